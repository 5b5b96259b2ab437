#!/usr/bin/env python3
"""What `sparkctl up` adds beyond the engine's own readiness, playbook path against fast path (goal: <= 3 s).

Each round stops the ranks (`sparkctl down`, not timed), then times `sparkctl -i INV --json up --yes`
from process start to exit, on the playbook path (`--full`) and on the fast path (nothing to install:
the units start over SSH), interleaved (the first path alternates per round). The engine's own
readiness is what the gates see: from the moment the last unit start returned to rank 0 answering
/ready (`timeline` in up's JSON); overhead = wall time - that. Also shown per path: the seconds before
the last start (process start, inventory, probes, preflight, the checks or the playbook) and after
/ready (the remaining gates: /server_info, log markers, a chat completion, qualify on up when the
profile asks for it — the lab's does, and its determinism check alone waits for the simulator's
decode rate; its own seconds, from the run's qualify report, are shown apart). The simulator's
configured boot delay is printed for reference.

    python bench/up_overhead.py [-i inventory/lab] [-n 5] [--json] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _stats import spread  # the one median/min/max summary of bench/

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PATHS = {"playbook": ["--full"], "fast": []}
MEASURES = ("wall_s", "engine_ready_s", "overhead_s", "before_start_s", "after_ready_s", "qualify_on_up_s",
            "overhead_without_qualify_s")
GOAL_S = 3.0


def sparkctl(inventory: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkctl", "-i", inventory, *args], capture_output=True,
                          text=True, cwd=REPO, timeout=900, check=False)


def boot_delay_s(inventory: str) -> float | None:
    """The simulator's configured boot delay (the rendered environment, else the profile), if any."""
    from sparkctl.model import load_inventory
    from sparkctl.render import plan_document

    cluster = load_inventory(inventory)
    env = plan_document(cluster)["nodes"][0]["rank_launch"]["env"]
    if "SPARKCTL_SIM_BOOT_DELAY_S" in env:
        return float(env["SPARKCTL_SIM_BOOT_DELAY_S"])
    sim = cluster.profile.simulator
    return float(sim.boot_delay_s) if sim is not None else None


def one(inventory: str, path: str) -> dict[str, Any]:
    down = sparkctl(inventory, "down")
    if down.returncode != 0:
        raise SystemExit(f"down failed: {down.stderr[-2000:]}")
    t0 = time.perf_counter()
    up = sparkctl(inventory, "--json", "up", "--yes", *PATHS[path])
    wall = time.perf_counter() - t0
    if up.returncode != 0:
        raise SystemExit(f"up ({path}) failed: {up.stderr[-3000:]}")
    doc = json.loads(up.stdout)
    t = doc["timeline"]
    engine = t["ready_s"] - t["last_start_s"]
    reports = sorted(Path(doc["records"]).glob("qualify-*/report.json"))
    report = json.loads(reports[-1].read_text()) if reports else {}
    qualify = float(report.get("seconds", 0.0))
    return {"path": path, "took": doc["start"]["path"], "reasons": doc["start"]["reasons"][:3],
            "wall_s": round(wall, 3), "engine_ready_s": round(engine, 3),
            "overhead_s": round(wall - engine, 3),
            "before_start_s": round(wall - doc["seconds"] + t["last_start_s"], 3),
            "after_ready_s": round(t["done_s"] - t["ready_s"], 3), "qualify_on_up_s": round(qualify, 3),
            "overhead_without_qualify_s": round(wall - engine - qualify, 3),
            "check_s": doc["start"]["check_seconds"], "timeline": t,
            "qualify_checks_s": {c["name"]: round(float(c["seconds"]), 3) for c in report.get("checks", [])}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory", default=str(REPO / "inventory" / "lab"))
    ap.add_argument("-n", "--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, help="Also write the JSON result here.")
    args = ap.parse_args()
    load_before = round(os.getloadavg()[0], 2)
    # One up first: the fast path needs the playbook to have installed the current files once.
    warm = sparkctl(args.inventory, "--json", "up", "--yes", "--full")
    if warm.returncode != 0:
        raise SystemExit(f"warm-up up failed: {warm.stderr[-3000:]}")
    rounds = []
    for i in range(args.rounds):
        order = ["playbook", "fast"] if i % 2 == 0 else ["fast", "playbook"]
        for path in order:
            rounds.append(one(args.inventory, path))
            print(json.dumps(rounds[-1]), file=sys.stderr)
    sparkctl(args.inventory, "down")
    by_path: dict[str, Any] = {}
    for path in PATHS:
        rs = [r for r in rounds if r["path"] == path]
        by_path[path] = {k: spread([float(r[k]) for r in rs], digits=3, iqr=True) for k in MEASURES}
        by_path[path]["took"] = sorted({r["took"] for r in rs})
    fast, slow = by_path["fast"]["overhead_s"]["median"], by_path["playbook"]["overhead_s"]["median"]
    mechanics = by_path["fast"]["overhead_without_qualify_s"]["median"]
    result = {
        "command": " ".join(["python", "bench/up_overhead.py", "-i", args.inventory, "-n", str(args.rounds)]),
        "simulator_boot_delay_s": boot_delay_s(args.inventory), "rounds": rounds, "paths": by_path,
        "overhead_fast_over_playbook": round(fast / slow, 3) if slow else None,
        "goal_overhead_at_most_s": GOAL_S, "goal_met": fast <= GOAL_S and by_path["fast"]["took"] == ["fast"],
        "goal_met_without_qualify_on_up": mechanics <= GOAL_S and by_path["fast"]["took"] == ["fast"],
        "cpus": os.cpu_count(), "load_avg_1m_before": load_before,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'path':<9} " + " ".join(f"{k[:-2].replace('_', ' ')[:16]:>16}" for k in MEASURES))
    for path, stats in by_path.items():
        cells = [f"{stats[k]['median']:7.2f} ±{stats[k]['iqr']:.2f}" for k in MEASURES]
        print(f"{path:<9} " + " ".join(f"{c:>16}" for c in cells))
    print(f"medians of {args.rounds} interleaved rounds (± interquartile range); simulator boot delay "
          f"{result['simulator_boot_delay_s']} s; fast/playbook overhead "
          f"{result['overhead_fast_over_playbook']}; "
          f"goal overhead <= {GOAL_S:g} s: {'met' if result['goal_met'] else 'not met'} "
          f"({'met' if result['goal_met_without_qualify_on_up'] else 'not met'} without the profile's "
          f"qualify on up)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
