#!/usr/bin/env python3
"""The bench client is never the bottleneck: its CPU per streamed token at C16, and its share of the
timed window (goal < 2 %), against an aiohttp reader and a raw httpx streaming reader measured in the
same run.

One simulated rank (``sparkctl_sim.rank``, its own process, so none of its CPU is counted here) serves
C16 batches of the sparkDash prose workload (256 tokens each, ``min_tokens``/``ignore_eos`` as
sparkDash sends them: every stream runs its full length). Each round times one batch through each of
three clients, each first, middle and last in turn:

- bench's own path (``sparkctl.qa.bench.run_batch``: ``stream_one``, its own reader of the chunked
  SSE stream in asyncio's callbacks, one clock reading per read);
- the same measurement on aiohttp (llhttp's C parser for the head and the chunked coding; one
  session per batch, a connection per request, ``resp.content.readany()`` per read, the same SSE
  parser and fields timed, one clock reading per read): what ``stream_one`` would be on a
  well-kept library, kept as the evidence for its own reader;
- the thinnest reasonable httpx client (``httpx`` streaming the same requests, each SSE line parsed
  with ``json.loads``, nothing timed: the floor of any client built on httpx).

Per client: this process's CPU seconds during the batch (``time.process_time``: every thread of the
process), the batch's wall seconds (the timed window), the tokens the server's usage blocks count;
CPU per token, the share of the window (CPU / wall: how much of one core the client kept busy) and
the ratio of bench's and aiohttp's CPU per token to the raw reader's. The client is made once per
batch in all three (a bench suite makes one per suite), the endpoint discovered once before any batch.

The simulator sends one token per chunk (a real engine with speculative decoding packs several), so
the per-token figures are an upper bound of the client's cost on hardware.

    python bench/client_overhead.py [-n 5] [--rate 25] [--json] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from _stats import spread  # the one median/min/max summary of bench/

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparkctl.qa.bench import run_batch  # noqa: E402
from sparkctl.qa.endpoint import Endpoint, discover  # noqa: E402
from sparkctl.qa.request import (  # noqa: E402
    THINKING_OFF,
    RequestTiming,
    SSEParser,
    _Reading,
    request_body,
    status_error,
    stream_client,
)
from sparkctl.qa.workload import load_builtin  # noqa: E402

KEY = "client-overhead"
MODEL = "deepseek-v41-flash"
CONCURRENCY = 16
GOAL_SHARE = 0.02


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_rank(workdir: Path, rate: float) -> tuple[subprocess.Popen[bytes], str]:
    """One simulated rank on loopback with 16 slots, at ``rate`` tokens/s per stream."""
    port = _free_port()
    env = {**os.environ, "SPARKCTL_SIM_BOOT_DELAY_S": "0", "SPARKCTL_SIM_TOKEN_RATE": str(rate),
           "SPARKCTL_SIM_TTFT_S": "0.05", "SPARKCTL_SIM_PREFILL_RATE": "2000000"}
    argv = [sys.executable, "-m", "sparkctl_sim.rank", "serve", "--model-path", str(workdir / "model"),
            "--served-model-name", MODEL, "--tp-size", "1", "--nnodes", "1", "--node-rank", "0",
            "--dist-init-addr", f"127.0.0.1:{_free_port()}", "--host", "127.0.0.1", "--port", str(port),
            "--context-length", "32768", "--max-running-requests", str(CONCURRENCY), "--api-key", KEY]
    log = (workdir / "sim.log").open("wb")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the simulated rank exited: {(workdir / 'sim.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"{root}/ready", timeout=1).status_code == 200:
                return proc, root
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.terminate()
    raise SystemExit("the simulated rank was not ready within 60 s")


async def bench_client(
    endpoint: Endpoint, prompts: list[str], tokens: int, extra: dict[str, Any]
) -> tuple[float, int]:
    """One C16 batch through bench's own path: (wall seconds of the batch, completion tokens)."""
    client = stream_client(endpoint, timeout=300)
    try:
        batch = await run_batch(client, endpoint.model, prompts, tokens, 1, extra)
    finally:
        await client.close()
    if not batch.ok:
        raise SystemExit(f"bench client: {batch.errors[:1]}")
    return batch.wall, batch.completion_tokens


async def raw_client(
    endpoint: Endpoint, prompts: list[str], tokens: int, extra: dict[str, Any]
) -> tuple[float, int]:
    """The same batch through httpx alone: each SSE line parsed, the usage block read."""
    root, headers = endpoint.root, {"Authorization": f"Bearer {KEY}"}

    async def one(client: httpx.AsyncClient, prompt: str) -> int:
        body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
                **THINKING_OFF, **extra}
        used = 0
        async with client.stream("POST", f"{root}/v1/chat/completions", json=body, headers=headers) as r:
            async for line in r.aiter_lines():
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                event = json.loads(line[5:])
                if event.get("usage"):
                    used = int(event["usage"]["completion_tokens"])
        return used

    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=CONCURRENCY)) as client:
        start = time.perf_counter()
        used = await asyncio.gather(*(one(client, p) for p in prompts))
        return time.perf_counter() - start, sum(used)


async def aiohttp_client(
    endpoint: Endpoint, prompts: list[str], tokens: int, extra: dict[str, Any]
) -> tuple[float, int]:
    """The same batch as bench's path measures it (the same fields timed, one clock reading per read,
    the same SSE parser), its HTTP through aiohttp (llhttp's C parser): one session for the batch,
    a connection per request, ``resp.content.readany()`` per read."""
    url = f"{endpoint.base_url}/chat/completions"
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
               "Accept-Encoding": "identity", "Authorization": f"Bearer {KEY}"}
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=300, sock_read=300)

    async def one(session: aiohttp.ClientSession, prompt: str) -> RequestTiming:
        body = json.dumps(request_body(endpoint.model, prompt, tokens, extra)).encode()
        seen, parser = _Reading(), SSEParser()
        sent = time.perf_counter()
        async with session.post(url, data=body, headers=headers) as resp:
            if resp.status >= 400:
                raise SystemExit(status_error(resp.status, await resp.read()))
            content = resp.content
            while data := await content.readany():
                seen.take(parser.feed(data), time.perf_counter())
                if seen.ended is not None or seen.error is not None:
                    break
        done = seen.ended if seen.ended is not None else time.perf_counter()
        return RequestTiming(sent, seen.first, done, seen.completion, seen.prompt_tokens, seen.error,
                             seen.last, seen.finish_reason)

    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        start = time.perf_counter()
        timings = await asyncio.gather(*(one(session, p) for p in prompts))
        wall = time.perf_counter() - start
    if not all(t.ok for t in timings):
        raise SystemExit(f"aiohttp client: {[t.error for t in timings if not t.ok][:1]}")
    return wall, sum(t.completion_tokens for t in timings)


CLIENTS = {"bench": bench_client, "aiohttp": aiohttp_client, "raw": raw_client}


def measure(
    kind: str, endpoint: Endpoint, prompts: list[str], tokens: int, extra: dict[str, Any]
) -> dict[str, float]:
    run = CLIENTS[kind]
    cpu0 = time.process_time()
    wall, used = asyncio.run(run(endpoint, prompts, tokens, extra))
    cpu = time.process_time() - cpu0
    return {"cpu_s": cpu, "wall_s": wall, "tokens": used, "cpu_us_per_token": 1e6 * cpu / used,
            "share": cpu / wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--rounds", type=int, default=5)
    # 16 × 25 = 400 tok/s in all: above what four Sparks serve (R4's C8 coding aggregate 340.41 tok/s,
    # M1's C16 prose 134.2), so the share measured here bounds the share on hardware.
    ap.add_argument("--rate", type=float, default=25.0, help="simulated tokens/s per stream [default: 25]")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    prose = load_builtin("prose")
    prompts, tokens, extra = prose.prompts_for(CONCURRENCY), prose.max_tokens, prose.extra
    with tempfile.TemporaryDirectory() as tmp:
        proc, root = start_rank(Path(tmp), args.rate)
        try:
            endpoint = discover(root, api_key=KEY)  # once, as bench does before its suites
            for kind in CLIENTS:  # warm: imports, connections, the sim's caches
                measure(kind, endpoint, prompts, 16, extra)
            rounds: dict[str, list[dict[str, float]]] = {kind: [] for kind in CLIENTS}
            order = list(CLIENTS)
            for r in range(args.rounds):  # each client first, middle and last in turn
                for kind in order[r % len(order):] + order[:r % len(order)]:
                    rounds[kind].append(measure(kind, endpoint, prompts, tokens, extra))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    summary: dict[str, Any] = {"concurrency": CONCURRENCY, "tokens_per_stream": tokens,
                               "simulated_rate_per_stream": args.rate, "goal_share": GOAL_SHARE}
    for kind, rows in rounds.items():
        summary[kind] = {key: spread([row[key] for row in rows], digits=4, runs=True)
                         for key in ("cpu_us_per_token", "share", "wall_s", "cpu_s")}
    for kind in ("bench", "aiohttp"):
        ratios = [k["cpu_us_per_token"] / r["cpu_us_per_token"]
                  for k, r in zip(rounds[kind], rounds["raw"], strict=True)]
        summary[f"ratio_{kind}_to_raw_cpu_per_token"] = spread(ratios, digits=3, runs=True)
    # What aiohttp would add to bench's share of the window (percentage points, per round).
    extra_pp = [100 * (a["share"] - b["share"])
                for a, b in zip(rounds["aiohttp"], rounds["bench"], strict=True)]
    summary["aiohttp_minus_bench_share_pp"] = spread(extra_pp, digits=2, runs=True)
    share = summary["bench"]["share"]["median"]
    summary["goal_met"] = share < GOAL_SHARE
    # At 100 % of one core the client would keep up with this many tokens/s (one token per chunk).
    summary["client_capacity_tok_s"] = round(1e6 / summary["bench"]["cpu_us_per_token"]["median"])
    text = json.dumps(summary, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
    else:
        b, raw = summary["bench"], summary["raw"]
        print(f"C{CONCURRENCY} × {tokens} tokens at {args.rate:g} tok/s per stream (simulator), "
              f"{args.rounds} rounds, order rotating")
        for kind, s in (("bench client", b), ("aiohttp     ", summary["aiohttp"]), ("raw httpx   ", raw)):
            cpt, sh = s["cpu_us_per_token"], s["share"]
            print(f"  {kind}: {cpt['median']:.1f} µs CPU/token (min {cpt['min']:.1f}, max {cpt['max']:.1f}); "
                  f"{100 * sh['median']:.2f} % of the timed window (min {100 * sh['min']:.2f}, "
                  f"max {100 * sh['max']:.2f}); window {s['wall_s']['median']:.2f} s")
        for kind in ("bench", "aiohttp"):
            ratio = summary[f"ratio_{kind}_to_raw_cpu_per_token"]
            print(f"  {kind} / raw CPU per token: {ratio['median']:.2f}× (min {ratio['min']:.2f}, "
                  f"max {ratio['max']:.2f})")
        pp = summary["aiohttp_minus_bench_share_pp"]
        print(f"  aiohttp - bench share of the window: {pp['median']:+.2f} points (min {pp['min']:+.2f}, "
              f"max {pp['max']:+.2f})")
        print(f"  goal: the bench client's share < {100 * GOAL_SHARE:.0f} %: "
              f"{'met' if summary['goal_met'] else 'not met'}; one core would keep up with "
              f"{summary['client_capacity_tok_s']:,} tok/s at one token per chunk")
    return 0


if __name__ == "__main__":
    sys.exit(main())
