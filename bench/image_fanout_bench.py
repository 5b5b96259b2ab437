#!/usr/bin/env python3
"""Image fan-out: `sparkctl stage image` to the workers vs a raw copy of the same archive bytes.

The image is built for the bench, offline, on the head: ``FROM`` the lab's base engine image plus a
``COPY`` of ``--image-mib`` MiB of random bytes (incompressible, so zstd cannot shrink what moves;
the lab's own image is a few tens of MiB, where fixed costs would be all one measures). The bench
stages it through a temporary copy of the inventory whose ``sparkctl_runtime`` names that image
(``image_source: pull``: the head has it, so nothing is pulled); the lab's own image, its
inventory and the ranks are left alone, and the bench image is removed from every node at the end.

Each round, interleaved (medians over ``--rounds``, with min/max of the per-round ratios):

1. stage → all: the workers lose the image and its archive, then `sparkctl stage image`; the chain
   carries the head's archive to the N−1 workers, which `docker load` it. Time = the slowest
   worker's transfer agent (its report), so Ansible's and `docker load`'s time are not in it (the
   whole command's wall time is reported beside it).
2. raw → one: the archive sent head → first worker over plain TCP on the fabric addresses
   (sendfile → recv → write → fsync, no hashing; bench/stage_bench.py's copy).
3. raw → all: the same raw copy head → every worker at once (what a plain fan-out of the archive
   costs on this machine).
4. stage → one: only the first worker lacks the image: the chain has a single hop.

Ratios (MiB/s of the archive):

* ``ratio`` = stage → all / raw → one                          the issue's goal, ≥ 0.85
* ``hop_ratio`` = stage → one / raw → one                      one hop of the chain vs a plain copy
* ``all_ratio`` = stage → all / raw → all                      the same bytes to the same nodes

On real Sparks every hop has its own disk and link, so the chain to N−1 workers takes about one
copy's time and ``ratio`` ≈ ``hop_ratio``. In the lab the four "nodes" share one machine's two
cores and one disk: N−1 hops cost N−1 copies of CPU and disk, so ``ratio`` is bounded by about
``hop_ratio`` / (N−1) there, and ``all_ratio`` is the like-for-like figure.

    flock /tmp/sparkctl-lab.lock python bench/image_fanout_bench.py [-i inventory/lab] [-n 5]
        [--image-mib 1024] [--json]
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _stats import spread  # the one median/min/max summary of bench/

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


def temp_inventory(inventory: Path, ref: str, dest: Path) -> Path:
    """A copy of ``inventory`` whose runtime is the bench image (already on the head: never pulled)."""
    out = dest / "inventory"
    shutil.copytree(inventory, out, symlinks=True)
    gv = out / "group_vars" / "all" / "sparkctl.yml"
    doc = yaml.safe_load(gv.read_text())
    doc["sparkctl_runtime"] = {
        "kind": "container",
        "image": ref,
        "image_source": "pull",
        "allow_mutable_tag": True,
    }
    gv.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="image fan-out (stage image) vs a raw copy of the archive")
    ap.add_argument("-i", "--inventory", default=str(REPO / "inventory" / "lab"))
    ap.add_argument("-n", "--rounds", type=int, default=5)
    ap.add_argument("--image-mib", type=int, default=1024, help="random bytes in the bench image (MiB)")
    ap.add_argument("--keep-image", action="store_true", help="leave the bench image on the nodes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from sparkctl.model import load_inventory
    from sparkctl.stage import image
    from sparkctl_lab.kit import BASE_IMAGE

    inv = Path(args.inventory)
    cluster = load_inventory(inv)
    run_dir = str(cluster.paths.run_dir)
    ssh = ["ssh", "-F", str(inv / "ssh_config")]
    head, workers = cluster.nodes[0], list(cluster.nodes[1:])
    ref = f"sparkctl-bench/fanout:{args.image_mib}m"

    def on(node: Any, cmd: str, timeout: float = 900) -> str:
        proc = subprocess.run(
            [*ssh, node.name, cmd], capture_output=True, text=True, timeout=timeout, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{node.name}: {cmd[:80]} exited {proc.returncode}: {proc.stderr.strip()[-500:]}"
            )
        return proc.stdout

    # The bench image, built once on the head without a registry.
    ctx = f"{run_dir}/bench-image-ctx"
    on(
        head,
        f"docker image inspect {ref} >/dev/null 2>&1 || {{ rm -rf {ctx} && mkdir -p {ctx} && "
        f"head -c {args.image_mib}M /dev/urandom > {ctx}/blob && "
        f"printf 'FROM {BASE_IMAGE}\\nCOPY blob /opt/bench/blob\\n' > {ctx}/Dockerfile && "
        f"docker build --pull=false -q -t {ref} {ctx} >/dev/null && rm -rf {ctx}; }}",
        timeout=1800,
    )
    tmp = Path(tempfile.mkdtemp(prefix="image-fanout-"))
    id16, out = "", f"{run_dir}/raw-bench.bin"
    bench_inv = str(temp_inventory(inv, ref, tmp))

    def reset(nodes: list[Any]) -> None:
        for w in nodes:
            on(
                w,
                f"docker image rm -f {shlex.quote(ref)} >/dev/null 2>&1; rm -rf {run_dir}/images/{id16}",
            )

    def raw(peers: list[Any], archive: str) -> float:
        """Seconds until the last of ``peers`` has the archive (plain TCP copies, all at once)."""
        recvs = []
        for i, w in enumerate(peers):
            peer = stage_bench.Host(w.name, str(w.fabric_ip), "", "", ssh)
            recvs.append((w, peer.start(peer.py(stage_bench.RAW_RECV, peer.address, str(PORT + i), out))))
        time.sleep(0.5)
        sends = [
            host.start(host.py(stage_bench.RAW_SEND, str(w.fabric_ip), str(PORT + i), archive))
            for i, w in enumerate(peers)
        ]
        for send in sends:
            stage_bench.finish(send, "raw sender")
        secs = []
        for w, recv in recvs:
            nbytes, s = stage_bench.finish(recv, "raw receiver").split()
            if int(nbytes) != size:
                raise RuntimeError(f"raw copy to {w.name} moved {nbytes} of {size} B")
            secs.append(float(s))
            on(w, f"rm -f {out}")
        return max(secs)

    def staged(movers: list[Any]) -> tuple[float, float]:
        """(fan-out seconds of the slowest mover, whole command wall seconds)."""
        res = stage_image(bench_inv)
        secs = [float(res["nodes"][w.name].get("seconds") or 0) for w in movers]
        moved = [int(res["nodes"][w.name].get("bytes_moved") or 0) for w in movers]
        if min(moved) != size or not all(secs):
            raise RuntimeError(f"stage image did not move the whole archive to {movers}: {res['nodes']}")
        ids = {n: v.get("id") for n, v in res["nodes"].items()}
        if set(ids.values()) != {image_id}:
            raise RuntimeError(f"image IDs differ after stage image: {ids}")
        return max(secs), res["wall_s"]

    try:
        first = stage_image(bench_inv)  # the head's archive exists from here on
        image_id = first["nodes"][head.name]["id"]
        id16 = image_id.split(":", 1)[-1][:16]
        archive = f"{image.archive_dir(run_dir, image_id)}/{image.ARCHIVE}"
        size = int(on(head, f"stat -c %s {archive}").strip())
        host = stage_bench.Host(head.name, str(head.fabric_ip), "", "", ssh)
        mib = size / (1 << 20)
        rates: dict[str, list[float]] = {"stage_all": [], "raw_one": [], "raw_all": [], "stage_one": []}
        walls = []
        for _ in range(args.rounds):
            reset(workers)
            s_all, wall = staged(workers)
            rates["stage_all"].append(mib / s_all)
            walls.append(wall)
            rates["raw_one"].append(mib / raw(workers[:1], archive))
            rates["raw_all"].append(mib / raw(workers, archive))
            reset(workers[:1])
            rates["stage_one"].append(mib / staged(workers[:1])[0])
        again = stage_image(bench_inv)  # nothing to do: every worker has the head's ID
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not args.keep_image:
            for n in cluster.nodes:  # the bench image, its archive and the raw copies; nothing else
                gone = f"rm -rf {run_dir}/images/{id16}; " if id16 else ""
                on(n, f"docker image rm -f {shlex.quote(ref)} >/dev/null 2>&1; {gone}rm -f {out}; true")

    def ratio(a: str, b: str) -> dict[str, Any]:
        pairs = [x / y for x, y in zip(rates[a], rates[b], strict=True)]
        return {
            "ratio": round(statistics.median(rates[a]) / statistics.median(rates[b]), 3),
            "pairs": spread(pairs, digits=3),
        }

    result: dict[str, Any] = {
        "backend": "lab",
        "image": ref,
        "image_id": image_id,
        "archive_bytes": size,
        "workers": len(workers),
        "rounds": args.rounds,
        "mib_s": {k: spread(v, digits=3) for k, v in rates.items()},
        "stage_image_wall_s": round(statistics.median(walls), 2),
        "rerun_wall_s": round(again["wall_s"], 2),
        "rerun_bytes_moved": sum(int(v.get("bytes_moved") or 0) for v in again["nodes"].values()),
    }
    for key, (a, b) in {
        "ratio": ("stage_all", "raw_one"),
        "hop_ratio": ("stage_one", "raw_one"),
        "all_ratio": ("stage_all", "raw_all"),
    }.items():
        r = ratio(a, b)
        result[key], result[key + "_pairs"] = r["ratio"], r["pairs"]
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    m = result["mib_s"]

    def line(name: str, key: str) -> str:
        return f"  {name:14s} {m[key]['median']:8.1f} MiB/s  [{m[key]['min']:.1f}-{m[key]['max']:.1f}]"

    print(
        f"image fan-out bench (lab, archive {mib:.0f} MiB zstd of {args.image_mib} MiB random, "
        f"{len(workers)} workers, {args.rounds} interleaved rounds; medians [min-max])"
    )
    print(line("stage -> all", "stage_all") + f"   (whole command {result['stage_image_wall_s']:.1f} s)")
    print(line("stage -> one", "stage_one"))
    print(line("raw -> one", "raw_one"))
    print(line("raw -> all", "raw_all"))
    for key, what in (
        ("ratio", "stage->all / raw->one (goal >= 0.85)"),
        ("hop_ratio", "stage->one / raw->one"),
        ("all_ratio", "stage->all / raw->all"),
    ):
        p = result[key + "_pairs"]
        print(f"  {key:10s} {result[key]:.2f} [{p['min']:.2f}-{p['max']:.2f}]  {what}")
    print(f"  re-run       {result['rerun_wall_s']:.2f} s, {result['rerun_bytes_moved']} B moved")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
