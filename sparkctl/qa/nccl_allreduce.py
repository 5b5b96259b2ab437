"""NCCL all-reduce bus bandwidth across the nodes, for `sparkctl check fabric`.

A standalone script: it imports only the standard library and torch, so it can be copied to a
node and run there with the python that has torch (inside the pinned SGLang container, or the
venv). Run one process per node, all at once, with the rank's NCCL environment (NCCL_IB_HCA with
both PCIe halves, NCCL_IB_TC, NCCL_SOCKET_IFNAME, ...):

    python3 nccl_allreduce.py --rank R --world-size 4 --master-addr <head fabric ip> \\
        --master-port 29659 --json

or, on one host with several GPUs (testing), ``--local-procs N`` spawns the N ranks itself.
``--backend gloo`` runs the same path on CPU tensors (tests without a GPU).

Measurement, per message size: ``--warmup`` all-reduces, one all-reduce of ones whose sum is
checked on every rank, then ``--iters`` timed all-reduces, each one alone: every rank waits on a
barrier, then times its own all-reduce (CUDA events for NCCL, a wall clock for Gloo). One
iteration takes as long as its slowest rank; the reported time is the median of those over the
iterations. Bandwidths follow nccl-tests: ``algbw = bytes / time`` and
``busbw = algbw * 2 (n - 1) / n`` (GB/s are 10^9 bytes per second).

Output (rank 0 only): one JSON document on one stdout line that starts with ``{`` with ``--json``
(the default when stdout is not a terminal; NCCL_DEBUG lines may follow it, so a caller picks the
last line starting with ``{``, or reads ``--output FILE``); a table on a terminal. Its top-level
``busbw_gbps`` is the peak bus bandwidth over the sizes, the figure the fabric verdict uses. On a
failure the document is ``{"error": ...}`` and the exit code is 1; bad arguments exit 2.

Size: one file on purpose — it is copied to the nodes and run as a standalone script.
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import math
import os
import re
import socket
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

SCHEMA = "sparkctl.nccl_allreduce/1"
DEFAULT_SIZES = "1M,16M,256M,1G"
# About 20-24 GB/s bus bandwidth is what four Sparks on a 200G switch reach with both PCIe halves
# and MTU 9000; ~3 GB/s at every size means NCCL is not using the fabric as it should.
EXPECTED_BUSBW_GBPS = 20.0
MISCONFIGURED_BUSBW_GBPS = 3.0
# "About 3 GB/s": anything up to this factor above it counts as the misconfigured figure.
MISCONFIGURED_MARGIN = 1.2
DTYPE_BYTES = {"bf16": 2, "fp32": 4}
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)


class UsageError(Exception):
    """A bad argument: reported in one line, exit code 2."""


# --- pure arithmetic (unit-tested without torch) -------------------------------------------------


def parse_size(text: str) -> int:
    """``"16M"`` -> 16777216. Binary units K, M, G (optionally ``KiB``/``KB``); plain bytes too."""
    m = _SIZE_RE.match(text)
    if not m:
        raise UsageError(f"size {text!r}: expected a byte count like 4096, 64K, 16M or 1G")
    value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if value <= 0:
        raise UsageError(f"size {text!r}: must be above zero")
    return value


def parse_sizes(text: str, dtype: str = "bf16") -> list[int]:
    """A comma-separated size list -> distinct byte counts, ascending, whole elements of ``dtype``."""
    width = DTYPE_BYTES[dtype]
    sizes: set[int] = set()
    for part in text.split(","):
        if not part.strip():
            continue
        value = parse_size(part)
        if value < width:
            raise UsageError(f"size {part.strip()!r}: smaller than one {dtype} element ({width} bytes)")
        sizes.add(value - value % width)
    if not sizes:
        raise UsageError("--sizes: no size given")
    return sorted(sizes)


def human_size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def bus_factor(world_size: int) -> float:
    """nccl-tests' all-reduce bus-bandwidth factor, 2 (n - 1) / n."""
    if world_size < 1:
        raise ValueError("world size must be at least 1")
    return 2.0 * (world_size - 1) / world_size


def algbw_gbps(nbytes: int, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError("time must be positive")
    return nbytes / seconds / 1e9


def busbw_gbps(nbytes: int, seconds: float, world_size: int) -> float:
    return algbw_gbps(nbytes, seconds) * bus_factor(world_size)


def summarize(
    nbytes: int, count: int, per_rank_seconds: Sequence[Sequence[float]], correct: bool
) -> dict[str, Any]:
    """One size's row from every rank's per-iteration times (``per_rank_seconds[rank][iter]``)."""
    world = len(per_rank_seconds)
    iters = {len(t) for t in per_rank_seconds}
    if world < 1 or len(iters) != 1 or 0 in iters:
        raise ValueError("every rank must report the same, non-zero number of iterations")
    slowest = [max(step) for step in zip(*per_rank_seconds, strict=True)]
    t = statistics.median(slowest)
    return {
        "bytes": nbytes,
        "count": count,
        "ms": round(t * 1e3, 4),
        "ms_min": round(min(slowest) * 1e3, 4),
        "ms_max": round(max(slowest) * 1e3, 4),
        "algbw_gbps": round(algbw_gbps(nbytes, t), 3),
        "busbw_gbps": round(busbw_gbps(nbytes, t, world), 3),
        "correct": correct,
    }


def verdict(
    busbw: float,
    expected_gbps: float = EXPECTED_BUSBW_GBPS,
    misconfigured_gbps: float = MISCONFIGURED_BUSBW_GBPS,
    misconfigured_margin: float = MISCONFIGURED_MARGIN,
) -> tuple[str, str]:
    """``("ok" | "slow" | "misconfigured", reason)`` for a peak bus bandwidth in GB/s."""
    if math.isnan(busbw) or busbw < 0:
        raise ValueError(f"bus bandwidth must be a non-negative number, got {busbw}")
    if busbw >= expected_gbps:
        return "ok", f"{busbw:.1f} GB/s bus bandwidth, at or above the expected {expected_gbps:g} GB/s"
    if busbw <= misconfigured_gbps * misconfigured_margin + 1e-9:  # 3.0 * 1.2 is 3.5999...96
        return "misconfigured", (
            f"{busbw:.1f} GB/s bus bandwidth, at or below the ~{misconfigured_gbps:g} GB/s of a "
            "misconfigured fabric: NCCL_IB_HCA must list both PCIe halves, MTU 9000 end to end, "
            f"a common RoCE v2 GID index (expected {expected_gbps:g} GB/s or more)"
        )
    return "slow", (
        f"{busbw:.1f} GB/s bus bandwidth, below the expected {expected_gbps:g} GB/s "
        "(about half of it suggests only one PCIe half in use: check NCCL_IB_HCA; otherwise link "
        "speed, PFC/ECN on the switch, or other traffic)"
    )


def env_seen(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that steer NCCL/Gloo/CUDA placement, as this process sees them."""
    return {k: environ[k] for k in sorted(environ) if k.startswith(ENV_PREFIXES)}


def env_mismatch(per_rank_env: Sequence[dict[str, str]]) -> dict[str, dict[str, str | None]]:
    """Keys whose value differs between ranks -> {rank: value or None where unset}."""
    keys = sorted({k for env in per_rank_env for k in env})
    out: dict[str, dict[str, str | None]] = {}
    for k in keys:
        values = [env.get(k) for env in per_rank_env]
        if len(set(values)) > 1:
            out[k] = {str(rank): v for rank, v in enumerate(values)}
    return out


def build_document(
    meta: dict[str, Any],
    rows: list[dict[str, Any]],
    expected_gbps: float = EXPECTED_BUSBW_GBPS,
    misconfigured_gbps: float = MISCONFIGURED_BUSBW_GBPS,
) -> dict[str, Any]:
    """The JSON document rank 0 prints: run facts, one row per size, the peak and the verdict."""
    if not rows:
        raise ValueError("no measurement")
    peak = max(rows, key=lambda r: r["busbw_gbps"])
    wrong = [human_size(r["bytes"]) for r in rows if not r["correct"]]
    if wrong:
        status, reason = "misconfigured", f"all-reduce returned wrong sums at {', '.join(wrong)}"
    else:
        status, reason = verdict(peak["busbw_gbps"], expected_gbps, misconfigured_gbps)
    world = int(meta["world_size"])
    return {
        "schema": SCHEMA,
        **meta,
        "world": world,
        "bus_factor": round(bus_factor(world), 6),
        "sizes": rows,
        "busbw_gbps": peak["busbw_gbps"],
        "peak_at_bytes": peak["bytes"],
        "verdict": {
            "status": status,
            "reason": reason,
            "expected_gbps": expected_gbps,
            "misconfigured_gbps": misconfigured_gbps,
        },
    }


def render_table(doc: dict[str, Any]) -> str:
    head = (
        f"all-reduce · {doc['world_size']} ranks · {doc['backend']} {doc.get('nccl_version') or ''}"
        f" · {doc['dtype']} · {doc.get('device') or 'cpu'}"
    )
    lines = [
        head.replace("  ", " "),
        f"{'size':>10} {'time ms':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}  sum",
    ]
    for r in doc["sizes"]:
        lines.append(
            f"{human_size(r['bytes']):>10} {r['ms']:>10.3f} {r['algbw_gbps']:>11.2f} {r['busbw_gbps']:>11.2f}"
            f"  {'ok' if r['correct'] else 'WRONG'}"
        )
    v = doc["verdict"]
    lines.append(f"peak busbw {doc['busbw_gbps']:.2f} GB/s — {v['status']}: {v['reason']}")
    for key, ranks in doc.get("env_mismatch", {}).items():
        lines.append(f"warning: {key} differs between ranks: {ranks}")
    return "\n".join(lines)


# --- arguments -----------------------------------------------------------------------------------


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value and value.isdigit() else None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="nccl_allreduce.py",
        description="All-reduce algorithm and bus bandwidth per message size (nccl-tests definitions).",
    )
    ap.add_argument("--rank", type=int, default=_env_int("RANK"), help="this process's rank (env RANK)")
    ap.add_argument(
        "--world-size",
        "--world",
        dest="world_size",
        type=int,
        default=_env_int("WORLD_SIZE"),
        help="number of ranks (env WORLD_SIZE)",
    )
    ap.add_argument(
        "--master-addr",
        "--addr",
        dest="master_addr",
        default=os.environ.get("MASTER_ADDR"),
        help="rank 0's address for the rendezvous (env MASTER_ADDR)",
    )
    ap.add_argument(
        "--master-port",
        "--port",
        dest="master_port",
        type=int,
        default=_env_int("MASTER_PORT"),
        help="rendezvous TCP port (env MASTER_PORT)",
    )
    ap.add_argument(
        "--local-rank",
        type=int,
        default=_env_int("LOCAL_RANK") or 0,
        help="GPU index on this host (env LOCAL_RANK, else 0)",
    )
    ap.add_argument(
        "--local-procs",
        type=int,
        default=0,
        metavar="N",
        help="spawn N ranks on this host, rank i on GPU i (testing on one machine)",
    )
    ap.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"message sizes (default {DEFAULT_SIZES})")
    ap.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default="bf16")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations per size")
    ap.add_argument("--warmup", type=int, default=5, help="untimed iterations per size")
    ap.add_argument(
        "--timeout-s",
        "--timeout",
        dest="timeout_s",
        type=float,
        default=120.0,
        help="rendezvous and collective timeout, seconds",
    )
    ap.add_argument("--expected-gbps", type=float, default=EXPECTED_BUSBW_GBPS)
    ap.add_argument("--misconfigured-gbps", type=float, default=MISCONFIGURED_BUSBW_GBPS)
    out = ap.add_mutually_exclusive_group()
    out.add_argument(
        "--json",
        dest="fmt",
        action="store_const",
        const="json",
        help="print the JSON document (default when stdout is not a terminal)",
    )
    out.add_argument("--table", dest="fmt", action="store_const", const="table", help="print a table")
    ap.add_argument("--output", metavar="FILE", help="also write the JSON document to FILE (rank 0)")
    return ap


def check_args(args: argparse.Namespace) -> argparse.Namespace:
    """Validate and complete the arguments; raises UsageError naming the flag."""
    args.size_list = parse_sizes(args.sizes, args.dtype)
    if args.iters < 1:
        raise UsageError("--iters: at least 1")
    if args.warmup < 0:
        raise UsageError("--warmup: 0 or more")
    if args.timeout_s <= 0:
        raise UsageError("--timeout-s: must be above zero")
    if not 0 < args.misconfigured_gbps < args.expected_gbps:
        raise UsageError("--misconfigured-gbps must be above zero and below --expected-gbps")
    if args.local_procs:
        if args.local_procs < 2:
            raise UsageError("--local-procs: at least 2 (an all-reduce of one rank moves no data)")
        if args.world_size not in (None, args.local_procs):
            raise UsageError(f"--world-size {args.world_size} contradicts --local-procs {args.local_procs}")
        args.world_size = args.local_procs
        args.master_addr = args.master_addr or "127.0.0.1"
        args.master_port = args.master_port or _free_port(args.master_addr)
        return args
    missing = [
        flag
        for flag, value in (
            ("--rank", args.rank),
            ("--world-size", args.world_size),
            ("--master-addr", args.master_addr),
            ("--master-port", args.master_port),
        )
        if value is None
    ]
    if missing:
        raise UsageError(f"missing {', '.join(missing)} (or use --local-procs N on one host)")
    if args.world_size < 2:
        raise UsageError("--world-size: at least 2 (an all-reduce of one rank moves no data)")
    if not 0 <= args.rank < args.world_size:
        raise UsageError(f"--rank {args.rank}: must be in 0..{args.world_size - 1}")
    if not 0 < args.master_port < 65536:
        raise UsageError(f"--master-port {args.master_port}: not a TCP port")
    return args


def _free_port(addr: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


# --- the measurement (torch) ---------------------------------------------------------------------


def _nccl_version(torch: Any) -> str | None:
    try:
        v = torch.cuda.nccl.version()
    except Exception:
        return None
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v)
    v = int(v)  # older torch: one integer, major*10000 + minor*100 + patch (major*1000 before 2.9)
    if v >= 10000:
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    return f"{v // 1000}.{v // 100 % 10}.{v % 100}"


def _init(args: argparse.Namespace, rank: int, local_rank: int) -> tuple[Any, Any, Any]:
    # torch only where the measurement runs: this file is copied to the nodes as a standalone
    # script, and the controller imports it (verdict, argument checks) without torch installed.
    import torch
    import torch.distributed as dist

    if args.backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError(
                "no CUDA device visible to torch (NCCL backend needs one; --backend gloo runs on CPU)"
            )
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(
                f"local rank {local_rank}: only {torch.cuda.device_count()} CUDA device(s) visible"
            )
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    kwargs: dict[str, Any] = {
        "backend": args.backend,
        "init_method": f"tcp://{args.master_addr}:{args.master_port}",
        "rank": rank,
        "world_size": args.world_size,
        "timeout": datetime.timedelta(seconds=args.timeout_s),
    }
    if args.backend == "nccl" and "device_id" in inspect.signature(dist.init_process_group).parameters:
        kwargs["device_id"] = device  # eager NCCL communicator bound to this GPU
    dist.init_process_group(**kwargs)
    return torch, dist, device


def _gather_json(torch: Any, dist: Any, device: Any, world: int, obj: Any) -> list[Any]:
    """Every rank's JSON-able ``obj``, in rank order (all_gather_object without pickle or numpy)."""
    data = json.dumps(obj).encode()
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    longest = max(int(s.item()) for s in sizes)
    mine = torch.zeros(longest, dtype=torch.uint8, device=device)
    mine[: len(data)] = torch.tensor(list(data), dtype=torch.uint8, device=device)
    parts = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(parts, mine)
    return [json.loads(bytes(p[: int(n.item())].tolist())) for p, n in zip(parts, sizes, strict=True)]


def _measure_size(
    torch: Any, dist: Any, device: Any, args: argparse.Namespace, nbytes: int
) -> dict[str, Any]:
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    count = nbytes // DTYPE_BYTES[args.dtype]
    world = args.world_size
    cuda = device.type == "cuda"
    buf = torch.ones(count, dtype=dtype, device=device)
    dist.all_reduce(buf)  # sums of ones: every element must equal the world size
    correct = bool((buf == world).all().item())
    buf.zero_()
    for _ in range(args.warmup):
        dist.all_reduce(buf)
    if cuda:
        torch.cuda.synchronize(device)
    times: list[float] = []
    for _ in range(args.iters):
        dist.barrier()
        if cuda:
            torch.cuda.synchronize(device)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            dist.all_reduce(buf)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            times.append(time.perf_counter() - t0)
    gathered = _gather_json(torch, dist, device, world, [times, correct])
    del buf
    if cuda:
        torch.cuda.empty_cache()
    per_rank = [list(t) for t, _ in gathered]
    return summarize(nbytes, count, per_rank, all(ok for _, ok in gathered))


def run_rank(args: argparse.Namespace, rank: int, local_rank: int) -> dict[str, Any] | None:
    """Join the group, measure every size, and return the document on rank 0 (None elsewhere)."""
    torch, dist, device = _init(args, rank, local_rank)
    try:
        me = {
            "rank": rank,
            "host": socket.gethostname(),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "local_rank": local_rank,
            "env": env_seen(os.environ),
        }
        ranks = _gather_json(torch, dist, device, args.world_size, me)
        rows = [_measure_size(torch, dist, device, args, n) for n in args.size_list]
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    meta = {
        "backend": args.backend,
        "world_size": args.world_size,
        "dtype": args.dtype,
        "iters": args.iters,
        "warmup": args.warmup,
        "torch_version": str(torch.__version__),
        "nccl_version": _nccl_version(torch) if args.backend == "nccl" else None,
        "device": ranks[0]["device"],
        "ranks": [{k: r[k] for k in ("rank", "host", "device", "local_rank")} for r in ranks],
        "env": ranks[0]["env"],
        "env_mismatch": env_mismatch([r["env"] for r in ranks]),
    }
    return build_document(meta, rows, args.expected_gbps, args.misconfigured_gbps)


def _emit(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    text = json.dumps(doc, sort_keys=False)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    fmt = args.fmt or ("table" if sys.stdout.isatty() else "json")
    if fmt == "table" and "error" not in doc:
        print(render_table(doc), flush=True)
    else:
        print(text, flush=True)


def _one(args: argparse.Namespace, rank: int, local_rank: int) -> int:
    try:
        doc = run_rank(args, rank, local_rank)
    except Exception as exc:  # a failed rendezvous, a timeout, a NCCL error: one line, exit 1
        first = (str(exc).strip().splitlines() or [""])[0]
        msg = f"rank {rank}: {type(exc).__name__}: {first}"
        print(f"nccl_allreduce: {msg}", file=sys.stderr, flush=True)
        if rank == 0:
            _emit(
                args, {"schema": SCHEMA, "error": msg, "world_size": args.world_size, "backend": args.backend}
            )
        return 1
    if doc is not None:
        _emit(args, doc)
    return 0


def _spawned(index: int, args: argparse.Namespace) -> None:
    rc = _one(args, index, index)
    if rc:
        sys.exit(rc)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_args(args)
    except UsageError as exc:
        parser.error(str(exc))  # exit 2
    if not args.local_procs:
        return _one(args, args.rank, args.local_rank)
    import torch.multiprocessing as mp  # see _init: torch exists only where the script runs

    try:
        mp.spawn(_spawned, args=(args,), nprocs=args.local_procs, join=True)
    except mp.ProcessExitedException as exc:
        print(f"nccl_allreduce: local rank {exc.error_index} exited with {exc.exit_code}", file=sys.stderr)
        return 1
    except mp.ProcessRaisedException as exc:
        print(f"nccl_allreduce: a local rank failed: {str(exc).strip().splitlines()[-1]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
