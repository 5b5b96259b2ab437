#!/usr/bin/env python3
"""Wall time of a `sparkctl down` with nothing running on the lab: the SSH check against `--full`.

Both variants go through sparkctl's own CLI (`sparkctl -i inventory/lab --json down`), on a lab that
is provisioned with every rank unit inactive (one warm-up run of each first, not counted). The
repeats interleave (fast, full, fast, full, ...) so that load on this machine hits both alike. Every
run must exit 0 and stop nothing; the fast runs must report `path: fast`, the --full runs
`path: playbook`.

Then a change: spark-2's rank unit is put in the failed state (a unit that exited with status 1). The
next `down` must clear it (over SSH: every node answers, `path: ssh`) and the run after it take the
fast path.

Prints a table and one JSON line: medians of the repeats with min/max, the ratio full / fast, and the
change round's verdicts. Usage (root, lab up and provisioned, under the lab lock):
  flock /tmp/sparkctl-lab.lock python3 bench/down_noop.py [--repeat 5]
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
from stage_noop import lab_ssh  # the same lab SSH as the stage bench

REPO = Path(__file__).resolve().parents[1]
INVENTORY = REPO / "inventory" / "lab"
UNIT = "sparkctl-rank.service"


def down(*extra: str) -> tuple[float, dict[str, Any]]:
    argv = [sys.executable, "-m", "sparkctl", "-i", str(INVENTORY), "--json", "down", *extra]
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False, timeout=600)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"down {' '.join(extra)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return wall, doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5,
                    help="interleaved repeats per variant (>= 5 for a report)")
    ap.add_argument("--fail-node", default="spark-2")
    args = ap.parse_args()

    down("--full")
    down()
    fast: list[float] = []
    full: list[float] = []
    for i in range(args.repeat):
        for label, extra, into in (("fast", (), fast), ("full", ("--full",), full)):
            wall, doc = down(*extra)
            into.append(wall)
            want = "fast" if label == "fast" else "playbook"
            if doc["path"] != want or doc["stopped"]:
                raise SystemExit(f"{label} run {i + 1}: path {doc['path']}, stopped {doc['stopped']}")
            print(f"{label} {i + 1}: {wall:.1f}s ({doc['path']})", flush=True)

    # A unit that exited with status 1 is left failed: `down` must clear it (over SSH: every node answers).
    # Without an installed rank unit (provisioned, never `up`) a transient one of the same name fails;
    # an installed one is started and killed.
    script = (f"if systemctl cat {UNIT} >/dev/null 2>&1; then systemctl start --no-block {UNIT}; sleep 3; "
              f"systemctl kill --signal=SIGKILL {UNIT}; "
              f"else systemd-run --unit={UNIT} --service-type=exec /bin/false; fi; "
              f"sleep 1; systemctl is-failed {UNIT} || true")
    lab_ssh(args.fail_node, script)
    change_wall, change_doc = down()
    after_wall, after_doc = down()
    state = lab_ssh(args.fail_node, f"systemctl is-active {UNIT} || true").strip()
    change = {"failed_unit_on": args.fail_node, "run_s": round(change_wall, 2), "path": change_doc["path"],
              "next_run_s": round(after_wall, 2), "next_path": after_doc["path"], "unit_after": state}
    caught = change["path"] == "ssh" and change["next_path"] == "fast" and state == "inactive"

    fast_s, full_s = spread(fast, runs=True, unit="_s"), spread(full, runs=True, unit="_s")
    print(f"{'variant':30} {'median s':>9} {'min':>7} {'max':>7}")
    for label, row in (("down, nothing running (fast)", fast_s), ("down --full", full_s)):
        print(f"{label:30} {row['median_s']:9.1f} {row['min_s']:7.1f} {row['max_s']:7.1f}")
    print(f"failed unit on {args.fail_node}: {change['path']} in {change_wall:.1f}s; "
          f"next run {change['next_path']} in {after_wall:.1f}s; unit now {state}")
    print(json.dumps({
        "bench": "down_noop",
        "command": f"flock /tmp/sparkctl-lab.lock python3 bench/down_noop.py --repeat {args.repeat}",
        "repeats": args.repeat, "fast": fast_s, "full": full_s,
        "ratio_full_over_fast": round(full_s["median_s"] / fast_s["median_s"], 2),
        "change": change, "change_caught": caught,
        "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
    }))
    return 0 if caught else 1


if __name__ == "__main__":
    raise SystemExit(main())
