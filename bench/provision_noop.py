#!/usr/bin/env python3
"""Wall time of a no-op `sparkctl provision` on the lab: the fast path against `--full`, in one run.

Both variants go through sparkctl's own CLI (`sparkctl -i inventory/lab --json provision`), on a lab
that is already provisioned (one warm-up run of each first, not counted). The repeats interleave
(fast, full, fast, full, ...) so that load on this machine hits both alike. Every run must exit 0;
the fast runs must report 0 changed, 0 role runs due and no playbook (one SSH round,
sparkctl/serve/provfast.py); --full runs every role's probes, which must also find nothing to change.

Then two rounds of drift, each caught only if the next plain run re-applies the role on that node
only, reports it changed, and the run after it is 0 changed and fast again:
  file  one rendered file edited by hand on one node (--drift-file, on --drift-node);
  mtu   a fabric port's MTU set to 1500 with `ip link` on one node (--mtu-node, --mtu-netdev): live
        state no file digest covers, which the fabric role must restore.

Prints a table and one JSON line: medians of the repeats with min/max, the ratio full / fast, and
the drift round's verdicts. Usage (root, lab up, under the lab lock):
  flock /tmp/sparkctl-lab.lock python3 bench/provision_noop.py [-i inventory/labN] [--repeat 5]
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
INVENTORY = REPO / "inventory" / "lab"  # -i: another lab's (inventory/labN)
GOAL_S = 5.0  # a no-op provision, wall time including start-up (issue #36)


def provision(inv: Path, *extra: str) -> tuple[float, dict[str, Any]]:
    argv = [sys.executable, "-m", "sparkctl", "-i", str(inv), "--json", "provision", *extra]
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


def lab_ssh(inv: Path, node: str, command: str) -> str:
    return subprocess.run(
        ["ssh", "-F", str(inv / "ssh_config"), node, command],
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--repeat", type=int, default=5, help="interleaved repeats per variant (>= 5 for a report)"
    )
    ap.add_argument("-i", "--inventory", default=str(INVENTORY))
    ap.add_argument("--drift-node", default="spark-2")
    ap.add_argument("--drift-file", default="/etc/sparkctl/firewall.nft")
    ap.add_argument("--mtu-node", default="spark-1")
    ap.add_argument("--mtu-netdev", default="enp1s0f0np0")
    args = ap.parse_args()
    inv = Path(args.inventory).resolve()
    load_before = round(os.getloadavg()[0], 2)

    provision(inv, "--full")
    provision(inv)
    fast: list[float] = []
    full: list[float] = []
    for i in range(args.repeat):
        for label, extra, into in (("fast", (), fast), ("full", ("--full",), full)):
            wall, doc = provision(inv, *extra)
            into.append(wall)
            if changed(doc):
                raise SystemExit(f"{label} run {i + 1}: not a no-op, changed {changed(doc)}")
            if label == "fast" and due(doc):
                raise SystemExit(f"fast run {i + 1}: roles ran although nothing changed: {due(doc)}")
            if label == "fast" and doc["path"]["path"] != "fast":
                raise SystemExit(f"fast run {i + 1}: the playbook ran: {doc['path']['reasons'][:3]}")
            print(f"{label} {i + 1}: {wall:.1f}s, 0 changed", flush=True)

    def drift_round(edited: str, node: str, spoil: str, read: str | None = None) -> dict[str, Any]:
        before = lab_ssh(inv, node, read) if read else None
        lab_ssh(inv, node, spoil)
        drift_wall, drift_doc = provision(inv)
        after_wall, after_doc = provision(inv)
        out: dict[str, Any] = {
            "edited": edited,
            "path": drift_doc["path"]["path"],
            "fast_run_s": round(drift_wall, 2),
            "roles_run": due(drift_doc),
            "changed": changed(drift_doc),
            "restored": None if read is None else lab_ssh(inv, node, read) == before,
            "next_run_s": round(after_wall, 2),
            "next_path": after_doc["path"]["path"],
            "next_changed": changed(after_doc),
            "next_roles_run": due(after_doc),
        }
        out["caught"] = (
            set(out["changed"]) == {node}
            and all(r.endswith(f"@{node}") for r in out["roles_run"])
            and out["restored"] is not False
            and not out["next_changed"]
            and not out["next_roles_run"]
            and out["next_path"] == "fast"
        )
        return out

    drifts = [
        drift_round(f"{args.drift_node}:{args.drift_file}", args.drift_node,
                    f"printf '# edited by hand\\n' >> {args.drift_file}"),
        drift_round(f"{args.mtu_node}:{args.mtu_netdev} mtu 1500", args.mtu_node,
                    f"ip link set dev {args.mtu_netdev} mtu 1500",
                    f"cat /sys/class/net/{args.mtu_netdev}/mtu"),
    ]
    caught = all(d["caught"] for d in drifts)

    fast_s, full_s = spread(fast, runs=True, unit="_s"), spread(full, runs=True, unit="_s")
    print(f"{'variant':28} {'median s':>9} {'min':>7} {'max':>7}")
    for label, row in (("no-op provision (fast path)", fast_s), ("no-op provision --full", full_s)):
        print(f"{label:28} {row['median_s']:9.1f} {row['min_s']:7.1f} {row['max_s']:7.1f}")
    for d in drifts:
        print(f"drift {d['edited']}: ran {d['roles_run']}, changed {d['changed']} in {d['fast_run_s']:.1f}s; "
              f"next run {d['next_run_s']:.1f}s ({d['next_path']}), changed {d['next_changed'] or 0}: "
              f"{'caught' if d['caught'] else 'NOT CAUGHT'}")
    summary = {
        "bench": "provision_noop",
        "command": f"flock /tmp/sparkctl-lab.lock python3 bench/provision_noop.py -i {args.inventory} "
        f"--repeat {args.repeat}",
        "repeats": args.repeat,
        "fast": fast_s,
        "full": full_s,
        "ratio_full_over_fast": round(full_s["median_s"] / fast_s["median_s"], 2),
        "goal_s": GOAL_S,
        "goal_met": fast_s["median_s"] <= GOAL_S,
        "drift": drifts,
        "drift_caught": caught,
        "cpus": os.cpu_count(),
        "load_avg_1m_before": load_before,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(summary))
    return 0 if caught else 1


if __name__ == "__main__":
    sys.exit(main())
