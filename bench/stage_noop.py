#!/usr/bin/env python3
"""Wall time of a no-op `sparkctl stage all` on the lab: the fast path against `--full`, in one run.

Both variants go through sparkctl's own CLI (`sparkctl -i inventory/lab --json stage all`), on a
lab where everything is staged already (one warm-up run of each first, not counted). The repeats
interleave (fast, full, fast, full, ...) so that load on this machine hits both alike. Every run must
exit 0. The fast runs must report `path: fast`. The --full runs go through the playbook, which must
move and pack nothing.

Then a change: one checkpoint file on one node gets a new modification time (--touch-node). The next
run must name that node and file and run the playbook; the run after it must be fast again.

Prints a table and one JSON line: medians of the repeats with min/max, the ratio full / fast, and the
change round's verdicts. Usage (root, lab up and staged, under the lab lock):
  flock /tmp/sparkctl-lab.lock python3 bench/stage_noop.py [--repeat 5]
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


def stage(*extra: str) -> tuple[float, dict[str, Any]]:
    argv = [sys.executable, "-m", "sparkctl", "-i", str(INVENTORY), "--json", "stage", "all", *extra]
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False, timeout=1800)
    wall = time.monotonic() - t0
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"stage all {' '.join(extra)}: no JSON (exit {proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}") from None
    if proc.returncode != 0:
        raise SystemExit(f"stage all {' '.join(extra)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall, doc


def moved(doc: dict[str, Any]) -> dict[str, int]:
    """Bytes moved or packed per node, as the playbook reports them (none on the fast path)."""
    out = {}
    for host, n in doc["nodes"].items():
        b = int((n.get("transfer") or {}).get("bytes_moved") or 0)
        b += int((n.get("pack") or {}).get("bytes_written") or 0)
        b += int((n.get("image") or {}).get("bytes_moved") or 0)
        b += int(((n.get("kit") or {}).get("transfer") or {}).get("bytes_moved") or 0)
        if b:
            out[host] = b
    return out


def lab_ssh(node: str, command: str) -> str:
    argv = ["ssh", "-F", str(INVENTORY / "ssh_config"), node, command]
    return subprocess.run(argv, stdin=subprocess.DEVNULL, cwd=REPO, check=True, capture_output=True,
                          text=True, timeout=120).stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5,
                    help="interleaved repeats per variant (>= 5 for a report)")
    ap.add_argument("--touch-node", default="spark-2")
    args = ap.parse_args()

    stage("--full")
    stage()
    fast: list[float] = []
    full: list[float] = []
    for i in range(args.repeat):
        for label, extra, into in (("fast", (), fast), ("full", ("--full",), full)):
            wall, doc = stage(*extra)
            into.append(wall)
            path = doc["path"]["path"]
            if label == "fast" and path != "fast":
                raise SystemExit(f"fast run {i + 1}: the playbook ran: {doc['path']['reasons']}")
            if label == "full" and (path != "playbook" or moved(doc)):
                raise SystemExit(f"full run {i + 1}: not a no-op, moved {moved(doc)}")
            print(f"{label} {i + 1}: {wall:.1f}s ({path})", flush=True)

    model_dir = "/mnt/nvme/models/DeepSeek-V4.1-Flash"
    name = lab_ssh(args.touch_node, f"cd {model_dir} && ls model-*.safetensors | head -1").strip()
    lab_ssh(args.touch_node, f"touch {model_dir}/{name}")
    change_wall, change_doc = stage()
    after_wall, after_doc = stage()
    reasons = change_doc["path"]["reasons"]
    change = {"touched": f"{args.touch_node}:{model_dir}/{name}", "run_s": round(change_wall, 2),
              "path": change_doc["path"]["path"], "reasons": reasons,
              "next_run_s": round(after_wall, 2), "next_path": after_doc["path"]["path"]}
    caught = (change["path"] == "playbook" and any(r.startswith(f"{args.touch_node}:") and name in r
                                                    for r in reasons) and change["next_path"] == "fast")

    fast_s, full_s = spread(fast, runs=True, unit="_s"), spread(full, runs=True, unit="_s")
    print(f"{'variant':28} {'median s':>9} {'min':>7} {'max':>7}")
    for label, row in (("no-op stage all (fast path)", fast_s), ("no-op stage all --full", full_s)):
        print(f"{label:28} {row['median_s']:9.1f} {row['min_s']:7.1f} {row['max_s']:7.1f}")
    print(f"touched {change['touched']}: {change['path']} in {change_wall:.1f}s ({reasons}); "
          f"next run {change['next_path']} in {after_wall:.1f}s")
    print(json.dumps({
        "bench": "stage_noop",
        "command": f"flock /tmp/sparkctl-lab.lock python3 bench/stage_noop.py --repeat {args.repeat}",
        "repeats": args.repeat, "fast": fast_s, "full": full_s,
        "ratio_full_over_fast": round(full_s["median_s"] / fast_s["median_s"], 2),
        "change": change, "change_caught": caught,
        "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
    }))
    return 0 if caught else 1


if __name__ == "__main__":
    raise SystemExit(main())
