#!/usr/bin/env python3
"""What the SSH fan-out costs the controller while it waits: `Fleet`'s own channel reader
(``sparkctl.ssh.fleet._exec``) against fabric's ``Connection.run`` (invoke's runner: three threads
per command, each polling every 10 ms), on the same open connections, in the same run.

Two commands on every node at once, each side first in turn:

- ``sleep 2``: a command that runs a while (the boot watch's and the memory guard's rounds wait on
  the probe; `up`'s start script waits for the unit);
- ``true``, five times: the cost of a round itself.

Per side and command: this process's CPU seconds (``time.process_time``: every thread) and the wall
seconds; the ratio is fabric's CPU over the channel reader's.

    python bench/fleet_wait.py [-i inventory/lab] [-n 5] [--json]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _stats import spread

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparkctl.model import load_inventory  # noqa: E402
from sparkctl.ssh.fleet import Fleet, _exec, targets_for  # noqa: E402


class _Whole(io.StringIO):
    """The script handed to invoke whole (it reads a stream without a descriptor one character
    per poll otherwise), as ``Fleet`` did before its own reader."""

    def read(self, size: int | None = -1) -> str:
        return super().read(-1)


def _fabric(conn: Any, script: str, timeout: float) -> int | None:
    res = conn.run("/bin/sh -s", in_stream=_Whole(script), hide=True, warn=True, pty=False, timeout=timeout,
                   encoding="utf-8")
    return int(res.exited)


def _channel(conn: Any, script: str, timeout: float) -> int | None:
    return _exec(conn, "/bin/sh -s", script, timeout).rc


def _round(fleet: Fleet, how: Callable[[Any, str, float], int | None], script: str,
           times: int) -> tuple[float, float]:
    conns = [fleet._open(t) for t in fleet.targets.values()]
    c0, t0 = time.process_time(), time.monotonic()
    for _ in range(times):
        futures = [fleet._pool.submit(how, c, script, 30.0) for c in conns]
        rcs = [f.result() for f in futures]
        assert rcs == [0] * len(conns), rcs
    return time.process_time() - c0, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-i", "--inventory", type=Path, default=REPO / "inventory" / "lab")
    ap.add_argument("-n", type=int, default=5, help="rounds per side (default 5)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cluster = load_inventory(args.inventory)
    sides = {"channel": _channel, "fabric": _fabric}
    cases = {"sleep 2": ("sleep 2\n", 1), "true x5": ("true\n", 5)}
    cpu: dict[tuple[str, str], list[float]] = {(s, c): [] for s in sides for c in cases}
    wall: dict[tuple[str, str], list[float]] = {(s, c): [] for s in sides for c in cases}
    with Fleet(targets_for(cluster)) as fleet:
        fleet.run("true\n", timeout=60)  # every connection open before anything is timed
        for i in range(args.n):
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for side in order:
                for case, (script, times) in cases.items():
                    c, w = _round(fleet, sides[side], script, times)
                    cpu[(side, case)].append(c)
                    wall[(side, case)].append(w)
    nodes = len(cluster.nodes)
    doc: dict[str, Any] = {"nodes": nodes, "rounds": args.n, "cases": {}}
    for case in cases:
        doc["cases"][case] = {
            side: {"cpu": spread(cpu[(side, case)], digits=4, unit="_s"),
                   "wall": spread(wall[(side, case)], digits=3, unit="_s")} for side in sides}
        pairs = zip(cpu[("fabric", case)], cpu[("channel", case)], strict=True)
        ratios = [f / max(c, 1e-6) for f, c in pairs]
        doc["cases"][case]["fabric_over_channel_cpu"] = spread(ratios, digits=2)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"controller CPU while {nodes} nodes run a command ({args.n} rounds per side, median [min-max])")
    for case, row in doc["cases"].items():
        for side in sides:
            c, w = row[side]["cpu"], row[side]["wall"]
            print(f"  {case:8} {side:8} cpu {c['median_s']:.4f} s [{c['min_s']:.4f}-{c['max_s']:.4f}]"
                  f"  wall {w['median_s']:.3f} s")
        r = row["fabric_over_channel_cpu"]
        print(f"  {case:8} fabric / channel CPU: {r['median']:.2f}x [{r['min']:.2f}-{r['max']:.2f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
