#!/usr/bin/env python3
"""Wall time of a no-op `sparkctl provision` on the lab: the fast path against `--full`, in one run.

Both variants go through sparkctl's own CLI (`sparkctl -i inventory/lab --json provision`), on a lab
that is already provisioned (one warm-up run of each first, not counted). The repeats interleave
(fast, full, fast, full, ...) so that load on this machine hits both alike. Every run must exit 0;
the fast runs must report 0 changed (and 0 role runs due); --full runs every role's probes, which
must also find nothing to change.

Then drift: one rendered file edited by hand on one node (--drift-file, on --drift-node); the next
fast run must re-apply that role on that node only and report it changed; the run after it must be
0 changed and fast again.

Prints a table and one JSON line: medians of the repeats with min/max, the ratio full / fast, and
the drift round's verdicts. Usage (root, lab up, under the lab lock):
  flock /tmp/sparkctl-lab.lock python3 bench/provision_noop.py [--repeat 5]
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


def provision(*extra: str) -> tuple[float, dict[str, Any]]:
    argv = [sys.executable, "-m", "sparkctl", "-i", str(INVENTORY), "--json", "provision", *extra]
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False, timeout=1800)
    wall = time.monotonic() - t0
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(
            f"provision {' '.join(extra)}: no JSON (exit {proc.returncode}):\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        ) from None
    if proc.returncode != 0:
        raise SystemExit(f"provision {' '.join(extra)} exited {proc.returncode}: {doc.get('failures')}")
    return wall, doc


def changed(doc: dict[str, Any]) -> dict[str, int]:
    return {h: int(s["changed"]) for h, s in doc["hosts"].items() if s["changed"]}


def due(doc: dict[str, Any]) -> list[str]:
    return sorted(
        f"{role}@{host}"
        for host, roles in (doc.get("applied") or {}).items()
        for role, verdict in roles.items()
        if verdict.get("run")
    )


def lab_ssh(node: str, command: str) -> None:
    subprocess.run(
        ["ssh", "-F", str(INVENTORY / "ssh_config"), node, command],
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--repeat", type=int, default=5, help="interleaved repeats per variant (>= 5 for a report)"
    )
    ap.add_argument("--drift-node", default="spark-2")
    ap.add_argument("--drift-file", default="/etc/sparkctl/firewall.nft")
    args = ap.parse_args()

    provision("--full")
    provision()
    fast: list[float] = []
    full: list[float] = []
    for i in range(args.repeat):
        for label, extra, into in (("fast", (), fast), ("full", ("--full",), full)):
            wall, doc = provision(*extra)
            into.append(wall)
            if changed(doc):
                raise SystemExit(f"{label} run {i + 1}: not a no-op, changed {changed(doc)}")
            if label == "fast" and due(doc):
                raise SystemExit(f"fast run {i + 1}: roles ran although nothing changed: {due(doc)}")
            print(f"{label} {i + 1}: {wall:.1f}s, 0 changed", flush=True)

    lab_ssh(args.drift_node, f"printf '# edited by hand\\n' >> {args.drift_file}")
    drift_wall, drift_doc = provision()
    after_wall, after_doc = provision()
    drift: dict[str, Any] = {
        "edited": f"{args.drift_node}:{args.drift_file}",
        "fast_run_s": round(drift_wall, 2),
        "roles_run": due(drift_doc),
        "changed": changed(drift_doc),
        "next_run_s": round(after_wall, 2),
        "next_changed": changed(after_doc),
        "next_roles_run": due(after_doc),
    }
    caught = (
        bool(drift["changed"])
        and set(drift["changed"]) == {args.drift_node}
        and not drift["next_changed"]
        and not drift["next_roles_run"]
    )

    fast_s, full_s = spread(fast, runs=True, unit="_s"), spread(full, runs=True, unit="_s")
    print(f"{'variant':28} {'median s':>9} {'min':>7} {'max':>7}")
    for label, row in (("no-op provision (fast path)", fast_s), ("no-op provision --full", full_s)):
        print(f"{label:28} {row['median_s']:9.1f} {row['min_s']:7.1f} {row['max_s']:7.1f}")
    print(f"drift {drift['edited']}: ran {drift['roles_run']}, changed {drift['changed']} "
          f"in {drift_wall:.1f}s; next run {after_wall:.1f}s, changed {drift['next_changed'] or 0}")
    summary = {
        "bench": "provision_noop",
        "command": "flock /tmp/sparkctl-lab.lock python3 bench/provision_noop.py --repeat "
        + str(args.repeat),
        "repeats": args.repeat,
        "fast": fast_s,
        "full": full_s,
        "ratio_full_over_fast": round(full_s["median_s"] / fast_s["median_s"], 2),
        "goal_s": 20,
        "goal_met": fast_s["median_s"] <= 20,
        "drift": drift,
        "drift_caught": caught,
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(summary))
    return 0 if caught else 1


if __name__ == "__main__":
    sys.exit(main())
