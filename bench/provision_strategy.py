#!/usr/bin/env python3
"""`sparkctl provision --full` on the lab through Mitogen (the default strategy) against plain linear,
and against the default with every task sent to a worker (no false `when` skipped, and no
controller-only action run, on the controller).

`--full` runs every role's probes on every node (185 tasks over four nodes and the switch, nothing
to change), so it measures what a playbook run costs per task. The default is ansible.cfg's
``sparkctl_linear`` strategy, which runs through Mitogen when it is installed
(plugins/strategy/sparkctl_linear.py); ``ANSIBLE_STRATEGY=linear`` is the same run without Mitogen,
and ``SPARKCTL_SKIP_IN_WORKER=1`` the default forking a worker for every task, those it could skip
or run itself included.
The variants interleave, so load on this machine hits both alike. Every run must exit 0 and
change nothing. Measured per run: wall seconds and the machine's busy core-seconds (/proc/stat: the
controller, ssh and the nodes together).

Prints each run and one JSON line: medians with min/max and every run, and the ratios linear / Mitogen
and skipped-in-a-worker / Mitogen.
Usage (root, lab up and provisioned):  python3 bench/provision_strategy.py [-n 5]
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
VARIANTS: dict[str, dict[str, str]] = {"mitogen": {}, "linear": {"ANSIBLE_STRATEGY": "linear"},
                                       "skip_in_worker": {"SPARKCTL_SKIP_IN_WORKER": "1"}}


def busy_core_seconds() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def provision_full(env: dict[str, str]) -> tuple[float, float, dict[str, Any]]:
    argv = [sys.executable, "-m", "sparkctl", "-i", str(INVENTORY), "--json", "provision", "--full"]
    c0, t0 = busy_core_seconds(), time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False, timeout=900,
                          env={**os.environ, **env})
    wall, cpu = time.monotonic() - t0, busy_core_seconds() - c0
    if proc.returncode != 0:
        variant = env or "default"
        raise SystemExit(f"provision --full ({variant}) exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return wall, cpu, doc


def changed(doc: dict[str, Any]) -> int:
    return sum(int(stats.get("changed", 0)) for stats in (doc.get("hosts") or {}).values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--repeat", type=int, default=5,
                    help="interleaved repeats per variant (>= 5 for a report)")
    args = ap.parse_args()
    runs: dict[str, dict[str, list[float]]] = {v: {"wall_s": [], "busy_core_s": []} for v in VARIANTS}
    for i in range(args.repeat):
        for variant, env in VARIANTS.items():
            wall, cpu, doc = provision_full(env)
            if changed(doc):
                raise SystemExit(f"provision --full ({variant}) changed {changed(doc)} on a provisioned lab")
            runs[variant]["wall_s"].append(wall)
            runs[variant]["busy_core_s"].append(cpu)
            print(f"{variant:8} {i + 1}: {wall:5.1f} s wall, {cpu:5.1f} busy core-s", flush=True)
    report = {v: {k: spread(xs, runs=True) for k, xs in m.items()} for v, m in runs.items()}
    def over_default(variant: str) -> dict[str, float]:
        return {k: round(report[variant][k]["median"] / report["mitogen"][k]["median"], 2)
                for k in ("wall_s", "busy_core_s")}

    ratios, in_worker = over_default("linear"), over_default("skip_in_worker")
    mit, lin, wrk = report["mitogen"], report["linear"], report["skip_in_worker"]
    print(f"provision --full through Mitogen: {mit['wall_s']['median']} s wall, "
          f"{mit['busy_core_s']['median']} core-s; linear: {lin['wall_s']['median']} s, "
          f"{lin['busy_core_s']['median']} core-s (linear / Mitogen: {ratios}); every skip in a worker: "
          f"{wrk['wall_s']['median']} s, {wrk['busy_core_s']['median']} core-s (/ Mitogen: {in_worker})")
    print(json.dumps({"bench": "provision_strategy", "repeat": args.repeat, **report,
                      "linear_over_mitogen": ratios, "skip_in_worker_over_mitogen": in_worker}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
