#!/usr/bin/env python3
"""`sparkctl status` latency for the four nodes of an inventory, against `ansible all -m ping`.

Both are measured in the same run on the same inventory (default: the lab's), N rounds each:
  * status (CLI): the whole `sparkctl -i INV --json status` process, start-up included;
  * status (probe): the in-process snapshot only (SSH fan-out + rank-0 HTTP checks);
  * ansible ping: `ansible sparks -i INV -m ansible.builtin.ping` with the repository's ansible.cfg.
Prints the medians and the ratio ping / status; `--json` prints them as one document.

    python bench/status_bench.py [-i inventory/lab] [-n 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, check=False)
    return time.perf_counter() - t0, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory", default=str(REPO / "inventory" / "lab"))
    ap.add_argument("-n", "--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from sparkctl.model import load_inventory
    from sparkctl.render import plan_document
    from sparkctl.serve import verdict
    from sparkctl.serve.tools import api_key_or_none
    from sparkctl.serve.tools import http as _http
    from sparkctl.ssh import fleet as remote

    cluster = load_inventory(args.inventory)
    doc = plan_document(cluster)
    api_key = api_key_or_none(cluster)

    probe: list[float] = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        fleet = remote.Fleet(remote.targets_for(cluster))
        http = _http()
        try:
            snap = verdict.snapshot(cluster, doc, fleet, http, api_key)
        finally:
            fleet.close()
            http.close()
        probe.append(time.perf_counter() - t0)
    verdict = snap.verdict

    cli = [timed([sys.executable, "-m", "sparkctl", "-i", args.inventory, "--json", "status"])[0]
           for _ in range(args.rounds)]

    bin_dir = str(Path(sys.executable).parent)
    with tempfile.TemporaryDirectory(prefix="sparkctl-bench-") as tmp:
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_HOME": tmp,
               "ANSIBLE_LOCAL_TEMP": tmp, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
        ping_argv = [str(Path(bin_dir) / "ansible"), "sparks", "-i", args.inventory,
                     "-m", "ansible.builtin.ping"]
        ping = []
        for _ in range(args.rounds):
            seconds, rc = timed(ping_argv, env)
            if rc != 0:
                print(f"ansible ping failed (rc {rc})", file=sys.stderr)
                return 1
            ping.append(seconds)

    result = {
        "nodes": len(cluster.nodes),
        "rounds": args.rounds,
        "verdict": verdict,
        "status_cli_median_s": round(statistics.median(cli), 3),
        "status_probe_median_s": round(statistics.median(probe), 3),
        "ansible_ping_median_s": round(statistics.median(ping), 3),
        "ratio_ping_over_status_cli": round(statistics.median(ping) / statistics.median(cli), 2),
        "ratio_ping_over_status_probe": round(statistics.median(ping) / statistics.median(probe), 2),
        "goal_status_under_1s": statistics.median(cli) < 1.0,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['nodes']} nodes, {args.rounds} rounds (cluster {verdict}):")
        print(f"  sparkctl status (whole command) median {result['status_cli_median_s']:.3f} s")
        print(f"  status probe (in process)       median {result['status_probe_median_s']:.3f} s")
        print(f"  ansible sparks -m ping          median {result['ansible_ping_median_s']:.3f} s")
        print(f"  ping / status: {result['ratio_ping_over_status_cli']:.1f}x (whole command), "
              f"{result['ratio_ping_over_status_probe']:.1f}x (probe)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
