"""NCCL all-reduce bus bandwidth across the nodes (one process per node), for `sparkctl check fabric`.

Run on every node at once (the check_fabric playbook does) with the rank's NCCL environment
(NCCL_IB_HCA with both PCIe halves, NCCL_IB_TC, NCCL_SOCKET_IFNAME, ...):

    python3 nccl_allreduce.py --rank R --world 4 --addr <head fabric ip> --port 29659

Rank 0 prints one JSON line: {"sizes": [{"bytes", "algbw_gbps", "busbw_gbps", "ms"}], "busbw_gbps": max}.
Bus bandwidth follows nccl-tests: busbw = algbw * 2 (n - 1) / n. Sizes grow progressively and stay
small enough not to starve a Spark's unified memory (no 16 GiB buffers). Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

DEFAULT_SIZES_MIB = (64, 256, 512, 1024)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--addr", required=True, help="rendezvous address (rank 0's bootstrap address)")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sizes-mib", type=int, nargs="+", default=list(DEFAULT_SIZES_MIB))
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timeout-s", type=int, default=300)
    args = ap.parse_args(argv)

    import datetime

    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device visible to torch"}))
        return 2
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    torch.cuda.set_device(0)
    dist.init_process_group(
        backend="nccl",
        init_method=f"tcp://{args.addr}:{args.port}",
        rank=args.rank,
        world_size=args.world,
        timeout=datetime.timedelta(seconds=args.timeout_s),
    )
    n = args.world
    rows = []
    for mib in args.sizes_mib:
        numel = mib * 1024 * 1024 // 2  # bf16
        buf = torch.ones(numel, dtype=torch.bfloat16, device="cuda")
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        elapsed = (time.perf_counter() - t0) / args.iters
        nbytes = numel * 2
        algbw = nbytes / elapsed / 1e9
        rows.append({
            "bytes": nbytes,
            "ms": round(elapsed * 1e3, 3),
            "algbw_gbps": round(algbw, 2),
            "busbw_gbps": round(algbw * 2 * (n - 1) / n, 2),
        })
        del buf
        torch.cuda.empty_cache()
    dist.destroy_process_group()
    if args.rank == 0:
        print(json.dumps({"world": n, "sizes": rows, "busbw_gbps": max(r["busbw_gbps"] for r in rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
