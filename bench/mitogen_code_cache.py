#!/usr/bin/env python3
"""A playbook run with the compiled code of Mitogen's module scan kept across runs (the default,
plugins/strategy/sparkctl_linear.py) against the same run compiling it all again
(``SPARKCTL_MITOGEN_CODE_CACHE=off``, what Mitogen alone does in every ``ansible-playbook``).

The workload is `sparkctl provision --full` on the lab (every role's probes on every node, nothing
to change) or, with ``--verb``, another no-change command (``--verb "stage all"``). The kept code
sits in a directory of this run, filled by one run before the measured ones. The variants
interleave, so load on this machine hits both alike. Every run must exit 0 and change nothing.
Measured per run: wall seconds, the controller's CPU (the command and every process it waited for:
ansible-playbook, its workers and Mitogen's multiplexer) and the machine's busy core-seconds
(/proc/stat: the controller, ssh and the nodes together).

Prints each run and one JSON line: medians with min/max and every run, and the ratios off / kept.
Usage (root, lab up and provisioned):  python3 bench/mitogen_code_cache.py [-n 5] [-i INV] [--verb "..."]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _stats import spread  # the one median/min/max summary of bench/

REPO = Path(__file__).resolve().parents[1]
INVENTORY = REPO / "inventory" / "lab"
ENV = "SPARKCTL_MITOGEN_CODE_CACHE"
METRICS = ("wall_s", "controller_core_s", "busy_core_s")


def busy_core_seconds() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_core_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def changed(doc: dict[str, Any]) -> int:
    return sum(int(stats.get("changed", 0)) for stats in (doc.get("hosts") or {}).values())


def run(inventory: str, verb: list[str], cache: str) -> dict[str, float]:
    argv = [sys.executable, "-m", "sparkctl", "-i", inventory, "--json", *verb]
    b0, c0, t0 = busy_core_seconds(), children_core_seconds(), time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False, timeout=900,
                          env={**os.environ, ENV: cache})
    out = {"wall_s": time.monotonic() - t0, "controller_core_s": children_core_seconds() - c0,
           "busy_core_s": busy_core_seconds() - b0}
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(verb)} ({ENV}={cache}) exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    if changed(doc):
        raise SystemExit(f"{' '.join(verb)} changed {changed(doc)} on a lab where nothing was to change")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--repeat", type=int, default=5,
                    help="interleaved repeats per variant (>= 5 for a report)")
    ap.add_argument("-i", "--inventory", default=str(INVENTORY),
                    help="the lab's inventory (default: %(default)s)")
    ap.add_argument("--verb", default="provision --full", help="the no-change command (default: %(default)s)")
    args = ap.parse_args()
    verb = shlex.split(args.verb)
    with tempfile.TemporaryDirectory(prefix="mitogen-code-") as tmp:
        variants = {"off": "off", "kept": tmp}
        run(args.inventory, verb, tmp)  # fills the kept variant's directory
        runs: dict[str, dict[str, list[float]]] = {v: {k: [] for k in METRICS} for v in variants}
        for i in range(args.repeat):
            for variant, cache in variants.items():
                got = run(args.inventory, verb, cache)
                for k in METRICS:
                    runs[variant][k].append(got[k])
                print(f"{variant:4} {i + 1}: {got['wall_s']:5.1f} s wall, controller "
                      f"{got['controller_core_s']:5.2f} core-s, machine {got['busy_core_s']:5.1f} busy"
                      " core-s",
                      flush=True)
        kept_files = len(list(Path(tmp).iterdir()))
    report = {v: {k: spread(xs, runs=True) for k, xs in m.items()} for v, m in runs.items()}
    ratios = {k: round(report["off"][k]["median"] / report["kept"][k]["median"], 3) for k in METRICS}
    off, kept = report["off"], report["kept"]
    print(f"{args.verb}: controller {off['controller_core_s']['median']} core-s compiling anew, "
          f"{kept['controller_core_s']['median']} with the kept code; machine {off['busy_core_s']['median']} "
          f"and {kept['busy_core_s']['median']} busy core-s (off / kept: {ratios}; {kept_files} files kept)")
    print(json.dumps({"bench": "mitogen_code_cache", "verb": args.verb, "repeat": args.repeat, **report,
                      "off_over_kept": ratios, "files_kept": kept_files}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
