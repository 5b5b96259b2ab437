#!/usr/bin/env python3
"""What `sparkctl up` adds beyond the rank simulator's own boot delay (goal: at most 3 s).

Each round stops the ranks (`sparkctl down`, not timed), then times `sparkctl -i INV --json up` from
process start to ready. The simulator's boot delay is the SPARKCTL_SIM_BOOT_DELAY_S the ranks get
(from the rendered environment, else the simulator's default); overhead = wall time - that delay.

    python bench/up_overhead.py [-i inventory/lab] [-n 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def sparkctl(inventory: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkctl", "-i", inventory, *args], capture_output=True,
                          text=True, cwd=REPO, timeout=900, check=False)


def boot_delay_s(inventory: str) -> float:
    from sparkctl.model import load_inventory
    from sparkctl.render import plan_document
    from sparkctl_sim.knobs import KNOBS

    doc = plan_document(load_inventory(inventory))
    env = doc["nodes"][0]["rank_launch"]["env"]
    default = next(k.default for k in KNOBS if k.env == "SPARKCTL_SIM_BOOT_DELAY_S")
    return float(env.get("SPARKCTL_SIM_BOOT_DELAY_S", default))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory", default=str(REPO / "inventory" / "lab"))
    ap.add_argument("-n", "--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    delay = boot_delay_s(args.inventory)
    rounds = []
    for _ in range(args.rounds):
        down = sparkctl(args.inventory, "down")
        if down.returncode != 0:
            print(down.stderr, file=sys.stderr)
            return 1
        t0 = time.perf_counter()
        up = sparkctl(args.inventory, "--json", "up")
        wall = time.perf_counter() - t0
        if up.returncode != 0:
            print(up.stderr, file=sys.stderr)
            return 1
        doc = json.loads(up.stdout)
        rounds.append({"wall_s": round(wall, 2), "gates_s": doc.get("boot_seconds"),
                       "overhead_s": round(wall - delay, 2)})
    overhead = statistics.median(r["overhead_s"] for r in rounds)
    result = {"boot_delay_s": delay, "rounds": rounds,
              "median_wall_s": statistics.median(r["wall_s"] for r in rounds),
              "median_overhead_s": overhead, "goal_overhead_at_most_3s": overhead <= 3.0}
    sparkctl(args.inventory, "down")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for i, r in enumerate(rounds, 1):
            print(f"round {i}: up {r['wall_s']:.2f} s (gates {r['gates_s']} s), "
                  f"overhead {r['overhead_s']:.2f} s")
        print(f"simulator boot delay {delay:g} s; median overhead {overhead:.2f} s (goal <= 3 s: "
              f"{'met' if overhead <= 3.0 else 'not met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
