#!/usr/bin/env python3
"""What the lab costs: rootfs build, cold `up`, re-`up`, power cycle of one node, `down`, memory and disk.

Runs as root. It takes the lab down first and leaves it down (pass --leave-up to keep it running).
Times are wall-clock through the same Python API the CLI uses; each step is repeated --runs times
and the median is printed. Memory per machine is the RSS of every process in its network namespace
(systemd, journald, networkd, sshd, …) and its PSS (shared pages split between the processes that map them).

    sudo .venv/bin/python bench/lab_updown.py [--runs 3] [--nvme-gib 4] [--rebuild] [--json]

--rebuild also times a fresh debootstrap into a temporary cache (network, a minute or more).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def _du_mib(path: Path) -> float:
    out = subprocess.run(
        ["du", "-sxk", str(path)], capture_output=True, text=True, check=False
    ).stdout.split()
    return int(out[0]) / 1024 if out else 0.0


def _pss_mib(pids: list[int]) -> float:
    """Proportional set size: shared pages (libc, python) split between the processes using them."""
    total_kib = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total_kib += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return round(total_kib / 1024, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nvme-gib", type=int, default=0, help="size-limited /mnt/nvme per node (0 = plain dir)")
    ap.add_argument("--rebuild", action="store_true", help="also time a fresh rootfs build (temporary cache)")
    ap.add_argument("--leave-up", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--force", action="store_true", help="run even while a test session uses the lab")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root (the lab needs namespaces, bridges and mounts)", file=sys.stderr)
        return 2
    users_dir = Path("/run/sparkctl-lab.users")  # live pytest sessions (tests/integration/conftest.py)
    users = [f.name for f in users_dir.glob("*") if f.name.isdigit() and Path(f"/proc/{f.name}").exists()]
    if users and not args.force:
        print(
            f"test sessions {', '.join(users)} use the lab; this benchmark takes it down (--force)",
            file=sys.stderr,
        )
        return 2

    from sparkctl_lab import control, host, rootfs, state, topology

    inventory = REPO / "inventory" / "lab"
    nvme = dict.fromkeys(topology.node_names(), args.nvme_gib) if args.nvme_gib else None
    result: dict[str, Any] = {
        "runs": args.runs,
        "nodes": topology.NODE_COUNT,
        "nvme_gib": args.nvme_gib or None,
    }

    cached = rootfs.rootfs_path()
    if args.rebuild:
        with tempfile.TemporaryDirectory(prefix="sparkctl-rootfs-bench-") as tmp:
            os.environ["SPARKCTL_ROOTFS_CACHE"] = tmp
            try:
                result["rootfs_build_s"] = round(rootfs.build(rootfs.rootfs_path()), 1)
                result["rootfs_mib"] = round(_du_mib(rootfs.rootfs_path()), 0)
            finally:
                del os.environ["SPARKCTL_ROOTFS_CACHE"]
    else:
        _, built_now = rootfs.ensure()
        recorded = rootfs.build_info(cached).get("build_seconds")
        result["rootfs_build_s"] = (
            round(built_now, 1) if built_now else (float(recorded) if recorded else None)
        )
        result["rootfs_mib"] = round(_du_mib(cached), 0)

    control.down()
    cold, reup, cycle, down = [], [], [], []
    rss: dict[str, float] = {}
    pss: dict[str, float] = {}
    upper: dict[str, float] = {}
    for _ in range(args.runs):
        cold.append(_timed(lambda: control.up(inventory, nvme)))
        time.sleep(2)  # let the machines settle before reading memory
        for row in control.status():
            rss[row["machine"]] = row["rss_mib"]
            pss[row["machine"]] = _pss_mib(host.netns_pids(topology.netns(row["machine"])))
        upper = {m: round(_du_mib(state.paths(m).upper), 1) for m in topology.machines()}
        reup.append(_timed(lambda: control.up(inventory)))
        cycle.append(_timed(lambda: (control.kill("spark-2"), control.start("spark-2"))))
        down.append(_timed(lambda: control.down()))
    if args.leave_up:
        control.up(inventory, nvme)

    def med(xs: list[float]) -> float:
        return round(statistics.median(xs), 2)

    result.update(
        {
            "up_cold_s": med(cold),
            "up_again_s": med(reup),
            "power_cycle_one_node_s": med(cycle),
            "down_s": med(down),
            "rss_mib_per_machine": rss,
            "pss_mib_per_machine": pss,
            "upper_dir_mib_per_machine": upper,
        }
    )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    build = result["rootfs_build_s"]
    print(f"lab benchmark ({args.runs} runs, medians; {topology.NODE_COUNT} nodes + lab-switch)")
    print(
        f"  rootfs build (debootstrap, once) : {'not recorded' if build is None else f'{build:.0f} s'}"
        f"  ({result['rootfs_mib']:.0f} MiB)"
    )
    print(f"  lab up, cold                     : {result['up_cold_s']:.2f} s")
    print(f"  lab up, again (no-op)            : {result['up_again_s']:.2f} s")
    print(f"  kill + start of one node         : {result['power_cycle_one_node_s']:.2f} s")
    print(f"  lab down                         : {result['down_s']:.2f} s")
    for m, v in rss.items():
        print(
            f"  memory {m:<11}               : RSS {v:.1f} MiB, PSS {pss.get(m, 0):.1f} MiB"
            f"   (overlay upper {upper.get(m, 0):.1f} MiB)"
        )
    print(f"  whole lab, PSS                   : {sum(pss.values()):.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
