#!/usr/bin/env python3
"""`sparkctl status` latency for the four nodes of an inventory, against `ansible all -m ping`.

Both are measured in the same run on the same inventory (default: the lab's), N rounds each:
  * status (CLI): the whole `sparkctl -i INV --json status` process, start-up included, with the
    parsed-inventory cache warm (the inventory unchanged since the last command: sparkctl.model.cache)
    and cold (its cache entry removed first, so ansible-core reads the inventory), interleaved;
  * status (probe): the in-process snapshot only (SSH fan-out + rank-0 HTTP checks);
  * ansible ping: `ansible sparks -i INV -m ansible.builtin.ping` with the repository's ansible.cfg.
Prints the medians and the ratio ping / status (status warm and cold); `--json` prints them as
one document. Goal: status under 1 s wall with the cache warm.

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
from collections.abc import Callable
from pathlib import Path

from _stats import spread  # the one median/min/max summary of bench/

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, check=False)
    return time.perf_counter() - t0, proc.returncode


def cold_and_warm(
    run: Callable[[], float], forget: Callable[[], None], rounds: int
) -> tuple[list[float], list[float]]:
    """``rounds`` timed runs with the cache cold (``forget`` first) and as many warm, interleaved: a
    cold run keeps the inventory, and the warm run after it finds it."""
    cold: list[float] = []
    warm: list[float] = []
    for _ in range(rounds):
        forget()
        cold.append(run())
        warm.append(run())
    return cold, warm


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory", default=str(REPO / "inventory" / "lab"))
    ap.add_argument("-n", "--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.inventory = str(Path(args.inventory).absolute())  # one cache entry: the CLI's and ours
    os.chdir(REPO)  # where the CLI runs (the cache's key includes ./ansible.cfg)

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

    from sparkctl.model import cache as inventory_cache

    status_argv = [sys.executable, "-m", "sparkctl", "-i", args.inventory, "--json", "status"]
    timed(status_argv)  # untimed: the command index and the byte-code are built, the cache filled
    entry = inventory_cache.cache_file(Path(args.inventory))
    cold, cli = cold_and_warm(lambda: timed(status_argv)[0], lambda: entry.unlink(missing_ok=True),
                              args.rounds)
    kept = inventory_cache.lookup(Path(args.inventory))

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
        "status_cli_warm": spread(cli, digits=3, unit="_s"),
        "status_cli_cold": spread(cold, digits=3, unit="_s"),
        "inventory_cached": kept.hit,
        "inventory_not_cached_because": kept.why or None,
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
        cached = "inventory cached" if kept.hit else f"inventory NOT cached: {kept.why or 'no entry'}"
        print(f"  sparkctl status (whole command) median {result['status_cli_median_s']:.3f} s ({cached})")
        print(f"  sparkctl status, cache cold     median {result['status_cli_cold']['median_s']:.3f} s")
        print(f"  status probe (in process)       median {result['status_probe_median_s']:.3f} s")
        print(f"  ansible sparks -m ping          median {result['ansible_ping_median_s']:.3f} s")
        print(f"  ping / status: {result['ratio_ping_over_status_cli']:.1f}x (whole command), "
              f"{result['ratio_ping_over_status_probe']:.1f}x (probe)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
