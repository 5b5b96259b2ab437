#!/usr/bin/env python3
"""`sparkctl down` with four running ranks on the lab: the stop over SSH against the playbook, in one run.

Each repeat brings the group up (`up --yes`, not counted), stops it with plain `down` (every node
answers: the spark_rank role's stop steps over SSH, sparkctl/serve/faststop.py), brings it up again
and stops it with `down --full` (playbooks/down.yml). The variants interleave, so load on this
machine hits both alike. Every `down` must exit 0, report the path it took and leave every rank
unit inactive. Measured per `down`: wall seconds and the machine's busy core-seconds (/proc/stat:
the controller, ssh and the nodes together).

Prints each run and one JSON line: medians with min/max and every run, and the ratios playbook / SSH.
Usage (root, lab up, provisioned and staged):  python3 bench/down_stop.py [-n 5]
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
INVENTORY = REPO / "inventory" / "lab"


def busy_core_seconds() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def sparkctl(*args: str) -> tuple[float, float, dict[str, Any]]:
    argv = [sys.executable, "-m", "sparkctl", "-i", str(INVENTORY), "--json", *args]
    c0, t0 = busy_core_seconds(), time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False, timeout=900)
    wall, cpu = time.monotonic() - t0, busy_core_seconds() - c0
    if proc.returncode != 0:
        raise SystemExit(f"sparkctl {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return wall, cpu, doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--repeat", type=int, default=5,
                    help="interleaved repeats per variant (>= 5 for a report)")
    args = ap.parse_args()
    runs: dict[str, dict[str, list[float]]] = {
        v: {"wall_s": [], "busy_core_s": []} for v in ("ssh", "playbook")}
    for i in range(args.repeat):
        for variant, extra in (("ssh", ()), ("playbook", ("--full",))):
            sparkctl("up", "--yes")
            wall, cpu, doc = sparkctl("down", *extra)
            if doc.get("path") != variant or not doc.get("stopped"):
                raise SystemExit(f"down {' '.join(extra)}: path {doc.get('path')}, "
                                 f"stopped {doc.get('stopped')}")
            if set(doc["nodes"].values()) != {"inactive"}:
                raise SystemExit(f"down {' '.join(extra)} left ranks running: {doc['nodes']}")
            runs[variant]["wall_s"].append(wall)
            runs[variant]["busy_core_s"].append(cpu)
            print(f"{variant:8} {i + 1}: {wall:5.1f} s wall, {cpu:5.1f} busy core-s", flush=True)
    report = {v: {k: spread(xs, runs=True) for k, xs in m.items()} for v, m in runs.items()}
    ratios = {k: round(report["playbook"][k]["median"] / report["ssh"][k]["median"], 2)
              for k in ("wall_s", "busy_core_s")}
    ssh, book = report["ssh"], report["playbook"]
    print(f"down over SSH: {ssh['wall_s']['median']} s wall, {ssh['busy_core_s']['median']} core-s; "
          f"playbook: {book['wall_s']['median']} s, {book['busy_core_s']['median']} core-s "
          f"(playbook / SSH: {ratios})")
    print(json.dumps({"bench": "down_stop", "repeat": args.repeat, **report, "playbook_over_ssh": ratios}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
