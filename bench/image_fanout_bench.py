#!/usr/bin/env python3
"""Image fan-out: `sparkctl stage image` to every worker vs a raw copy of the same archive bytes.

Each round first takes the image and its archive off the workers (`docker image rm` of the
reference, `rm -rf <run_dir>/images`; the head keeps both, so `docker save` is not re-run), then:

1. stage — `sparkctl -i INV --json stage image`: the chain carries the head's
   ``<run_dir>/images/<id16>/image.tar.zst`` to the N−1 workers, which `docker load` it. The
   fan-out time is the slowest worker's transfer agent (from its report); the throughput is the
   archive's size over that time. The wall time of the whole command (Ansible, probes, loads,
   ID checks) is reported beside it.
2. raw — the same archive file sent head → first worker over plain TCP on the same fabric
   addresses (sendfile → recv → write → fsync, no hashing, no chain; bench/stage_bench.py's copy).

ratio = stage fan-out MiB/s (to all workers) / raw MiB/s (to one)       goal ≥ 0.85

Rounds alternate stage and raw (medians): the lab's "links" share this machine's CPUs and disk.

    flock /tmp/sparkctl-lab.lock python bench/image_fanout_bench.py [-i inventory/lab] [-n 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import stage_bench  # noqa: E402  (the raw TCP copy, the same as the staging bench's)

PORT = 29732


def sparkctl(inventory: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkctl", "-i", inventory, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=3600,
        check=False,
    )


def stage_image(inventory: str) -> dict[str, Any]:
    t0 = time.monotonic()
    proc = sparkctl(inventory, "--json", "stage", "image")
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"stage image exited {proc.returncode}: {proc.stderr.strip()[-1500:]}")
    doc = json.loads(proc.stdout)
    return {"wall_s": wall, "nodes": {n: v.get("image") or {} for n, v in doc["nodes"].items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="image fan-out (stage image) vs a raw copy of the archive")
    ap.add_argument("-i", "--inventory", default=str(REPO / "inventory" / "lab"))
    ap.add_argument("-n", "--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from sparkctl.model import load_inventory
    from sparkctl.stage import image

    inv = Path(args.inventory)
    cluster = load_inventory(inv)
    ref = str(cluster.runtime.image)
    run_dir = str(cluster.paths.run_dir)
    ssh = ["ssh", "-F", str(inv / "ssh_config")]
    head, workers = cluster.nodes[0], list(cluster.nodes[1:])

    def on(node: Any, cmd: str) -> str:
        proc = subprocess.run(
            [*ssh, node.name, cmd], capture_output=True, text=True, timeout=600, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{node.name}: {cmd[:80]} exited {proc.returncode}: {proc.stderr.strip()[-500:]}"
            )
        return proc.stdout

    def reset_workers() -> None:
        for w in workers:
            on(w, f"docker image rm -f {shlex.quote(ref)} >/dev/null 2>&1 || true; rm -rf {run_dir}/images")

    first = stage_image(args.inventory)  # the head's image and archive exist from here on
    image_id = first["nodes"][head.name]["id"]
    archive = f"{image.archive_dir(run_dir, image_id)}/{image.ARCHIVE}"
    size = int(on(head, f"stat -c %s {archive}").strip())

    raw_host = stage_bench.Host(head.name, str(head.fabric_ip), "", "", ssh)
    peer = stage_bench.Host(workers[0].name, str(workers[0].fabric_ip), "", "", ssh)
    stage_rates, raw_rates, walls, fan_secs = [], [], [], []
    for _ in range(args.rounds):
        reset_workers()
        res = stage_image(args.inventory)
        secs = [float(res["nodes"][w.name].get("seconds") or 0) for w in workers]
        moved = [int(res["nodes"][w.name].get("bytes_moved") or 0) for w in workers]
        if min(moved) != size or not all(secs):
            raise RuntimeError(f"stage image did not move the whole archive to every worker: {res['nodes']}")
        ids = {n: v.get("id") for n, v in res["nodes"].items()}
        if set(ids.values()) != {image_id}:
            raise RuntimeError(f"image IDs differ after stage image: {ids}")
        fan_secs.append(max(secs))
        walls.append(res["wall_s"])
        stage_rates.append(size / (1 << 20) / max(secs))

        out = f"{run_dir}/raw-bench.bin"
        recv = peer.start(peer.py(stage_bench.RAW_RECV, peer.address, str(PORT), out))
        time.sleep(0.5)
        send = raw_host.start(raw_host.py(stage_bench.RAW_SEND, peer.address, str(PORT), archive))
        stage_bench.finish(send, "raw sender")
        raw_bytes, raw_s = stage_bench.finish(recv, "raw receiver").split()
        on(workers[0], f"rm -f {out}")
        raw_rates.append(int(raw_bytes) / (1 << 20) / float(raw_s))

    again = stage_image(args.inventory)  # nothing to do: every worker has the head's ID
    result = {
        "backend": "lab",
        "image_id": image_id,
        "archive_bytes": size,
        "workers": len(workers),
        "stage_fanout_mib_s": round(statistics.median(stage_rates), 1),
        "raw_copy_mib_s": round(statistics.median(raw_rates), 1),
        "pair_ratios": [round(s / r, 3) for s, r in zip(stage_rates, raw_rates, strict=True)],
        "fanout_s": round(statistics.median(fan_secs), 2),
        "stage_image_wall_s": round(statistics.median(walls), 2),
        "rerun_wall_s": round(again["wall_s"], 2),
        "rerun_bytes_moved": sum(int(v.get("bytes_moved") or 0) for v in again["nodes"].values()),
    }
    result["ratio"] = round(result["stage_fanout_mib_s"] / result["raw_copy_mib_s"], 3)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"image fan-out bench (lab, archive {size / (1 << 20):.0f} MiB zstd, {len(workers)} workers)")
    print(
        f"  stage image  {result['stage_fanout_mib_s']:8.1f} MiB/s to all workers "
        f"({result['fanout_s']:.2f} s; whole command {result['stage_image_wall_s']:.2f} s)"
    )
    print(f"  raw copy     {result['raw_copy_mib_s']:8.1f} MiB/s to one worker")
    print(f"  ratio        {result['ratio']:.2f}  (goal >= 0.85)   pairs {result['pair_ratios']}")
    print(f"  re-run       {result['rerun_wall_s']:.2f} s, {result['rerun_bytes_moved']} B moved")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
