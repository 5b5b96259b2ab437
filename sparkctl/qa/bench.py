"""The concurrency ladder, measured the way the published figures were.

Definitions (kept apart on purpose, as the published results do):

- **TTFT**: from sending a request to its first streamed chunk carrying content (or reasoning) text.
- **decode tok/s per stream**: ``(completion_tokens − 1) / (end − first token)``; tokens always come from
  the server's ``usage`` block, never from counting chunks (a chunk can carry a speculative block).
- **aggregate tok/s** of a batch of C concurrent requests: ``Σ completion_tokens / (last response done −
  first request sent)``; the whole batch duration, prefill and TTFT included.
- The headline at C1 is decode per stream; at C>1 it is the aggregate.

Every request asks for exactly ``max_tokens`` (``ignore_eos``), so each stream decodes the same length.
A warm-up batch per level (64 tokens) is discarded; each repeat runs the levels in order, every second
repeat in reverse, so drift (heat, caches) does not favour one level.

Size: one module on purpose — the workload, the load generator and the report share the measured
records; plotting (plot.py) and the published figures (published.py) are apart.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.errors import InputError
from sparkctl.qa import published as pub
from sparkctl.qa.endpoint import Endpoint, for_cluster
from sparkctl.qa.published import WORKLOADS

if TYPE_CHECKING:
    from openai import AsyncOpenAI

WARMUP_TOKENS = 64
TIMEOUT_S = 900.0


# ---------------------------------------------------------------------------------------- workloads
@dataclass(frozen=True)
class Workload:
    name: str
    max_tokens: int
    prompts: tuple[str, ...]
    sha256: str
    version: int = 1


def load_workload(name: str) -> Workload:
    """A pinned prompt set from ``sparkctl/qa/workloads/<name>.json``; its sha256 goes into every result."""
    if name not in WORKLOADS:
        raise InputError(f"unknown workload {name!r}", hint=f"choose one of: {', '.join(WORKLOADS)}, both")
    raw = resources.files("sparkctl.qa").joinpath("workloads", f"{name}.json").read_bytes()
    data = json.loads(raw)
    prompts = tuple(str(p) for p in data["prompts"])
    if not prompts or int(data["max_tokens"]) < 2:
        raise ValueError(f"workload {name} needs prompts and max_tokens >= 2")
    return Workload(
        data["name"],
        int(data["max_tokens"]),
        prompts,
        hashlib.sha256(raw).hexdigest(),
        int(data.get("version", 1)),
    )


def parse_concurrency(text: str) -> list[int]:
    """``"1,4,8"`` → [1, 4, 8] (sorted, unique, each ≥ 1)."""
    try:
        levels = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        levels = []
    if not levels or levels[0] < 1:
        raise InputError(
            f"--concurrency {text!r} is not a list of positive integers", hint="e.g. --concurrency 1,4,8"
        )
    return levels


def parse_workloads(text: str) -> list[str]:
    if text == "both":
        return list(WORKLOADS)
    if text in WORKLOADS:
        return [text]
    raise InputError(f"--workload {text!r} is not coding, prose or both")


# ------------------------------------------------------------------------------------------ metrics
def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0–100) with linear interpolation between closest ranks (NumPy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError("p must be within 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def percentiles(values: Sequence[float]) -> dict[str, float]:
    return {f"p{p}": percentile(values, p) for p in (50, 90, 99)}


@dataclass
class RequestTiming:
    """One streamed request, times from ``time.perf_counter``."""

    sent: float
    first_token: float | None
    done: float
    completion_tokens: int
    prompt_tokens: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.first_token is not None and self.completion_tokens > 0

    @property
    def ttft(self) -> float:
        return (self.first_token or self.done) - self.sent

    @property
    def e2e(self) -> float:
        return self.done - self.sent

    @property
    def decode_tps(self) -> float:
        """(completion_tokens − 1) / (end − first token): the first token belongs to prefill."""
        window = self.done - (self.first_token or self.done)
        return (self.completion_tokens - 1) / window if window > 0 and self.completion_tokens > 1 else 0.0


@dataclass
class Batch:
    concurrency: int
    requests: list[RequestTiming]

    @property
    def wall(self) -> float:
        return max(r.done for r in self.requests) - min(r.sent for r in self.requests)

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.requests)

    @property
    def aggregate_tps(self) -> float:
        """Σ completion tokens / (last response done − first request sent)."""
        return self.completion_tokens / self.wall if self.wall > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        """Mean per-stream decode rate of the batch."""
        return statistics.fmean(r.decode_tps for r in self.requests)

    @property
    def errors(self) -> list[str]:
        return [r.error or "incomplete response" for r in self.requests if not r.ok]

    @property
    def ok(self) -> bool:
        """Every request of the batch completed; only such batches measure anything."""
        return all(r.ok for r in self.requests)

    def headline(self) -> float:
        return self.decode_tps if self.concurrency == 1 else self.aggregate_tps

    def summary(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "wall_s": round(self.wall, 4),
            "completion_tokens": self.completion_tokens,
            "aggregate_tps": round(self.aggregate_tps, 3),
            "decode_tps_per_stream": round(self.decode_tps, 3),
            "requests": [
                {
                    "ttft_s": round(r.ttft, 4),
                    "e2e_s": round(r.e2e, 4),
                    "completion_tokens": r.completion_tokens,
                    "prompt_tokens": r.prompt_tokens,
                    "decode_tps": round(r.decode_tps, 3),
                    "error": r.error,
                }
                for r in self.requests
            ],
        }


def headline_metric(concurrency: int) -> str:
    return "decode tok/s per stream" if concurrency == 1 else "aggregate tok/s"


# ------------------------------------------------------------------------------------------ running
async def _one(client: AsyncOpenAI, model: str, prompt: str, max_tokens: int) -> RequestTiming:
    sent = time.perf_counter()
    first: float | None = None
    completion = prompt_tokens = 0
    try:
        stream = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True, "chat_template_kwargs": {"thinking": False}},
        )
        async for chunk in stream:
            if first is None and chunk.choices:
                delta = chunk.choices[0].delta
                extra = getattr(delta, "model_extra", None) or {}
                if delta.content or extra.get("reasoning_content"):
                    first = time.perf_counter()
            if chunk.usage is not None:
                completion = chunk.usage.completion_tokens
                prompt_tokens = chunk.usage.prompt_tokens
    except Exception as exc:
        return RequestTiming(
            sent, first, time.perf_counter(), completion, prompt_tokens, f"{type(exc).__name__}: {exc}"
        )
    done = time.perf_counter()
    error = None
    if first is None:
        error = "no content was streamed"
    elif completion == 0:
        error = "the stream carried no usage block (stream_options.include_usage)"
    return RequestTiming(sent, first, done, completion, prompt_tokens, error)


def _prompts(workload: Workload, concurrency: int, tag: str) -> list[str]:
    """C distinct prompts, each with a deterministic tag at the front (no two requests share a prefix)."""
    return [
        f"[bench v1 {tag} {workload.name} c{concurrency} s{i}] {workload.prompts[i % len(workload.prompts)]}"
        for i in range(concurrency)
    ]


async def run_batch(
    client: AsyncOpenAI,
    model: str,
    workload: Workload,
    concurrency: int,
    tag: str,
    max_tokens: int | None = None,
) -> Batch:
    """C requests sent together; the batch lasts from the first send to the last response."""
    prompts = _prompts(workload, concurrency, tag)
    timings = await asyncio.gather(
        *(_one(client, model, p, max_tokens or workload.max_tokens) for p in prompts)
    )
    return Batch(concurrency, list(timings))


@dataclass
class LevelResult:
    workload: str
    concurrency: int
    batches: list[Batch] = field(default_factory=list)
    published: float | None = None
    max_tokens: int = 0

    @property
    def short_requests(self) -> int:
        """Requests that came back with fewer tokens than asked (the server ignored ``ignore_eos``)."""
        return sum(
            1 for b in self.batches for r in b.requests if r.ok and r.completion_tokens < self.max_tokens
        )

    @property
    def metric(self) -> str:
        return headline_metric(self.concurrency)

    @property
    def measured(self) -> list[Batch]:
        """Batches in which every request completed (a batch with a failed request measures nothing)."""
        return [b for b in self.batches if b.ok]

    def headline(self) -> dict[str, float] | None:
        """min/median/max of the headline over the complete batches; None when there is none."""
        return spread([b.headline() for b in self.measured]) if self.measured else None

    def ratio(self) -> float | None:
        head = self.headline()
        return head["median"] / self.published if head and self.published else None

    def to_dict(self) -> dict[str, Any]:
        reqs = [r for b in self.measured for r in b.requests]
        ttft = [r.ttft for r in reqs]
        e2e = [r.e2e for r in reqs]
        ratio = self.ratio()
        head = self.headline()

        def rounded(values: list[float]) -> dict[str, float] | None:
            return {k: round(v, 3) for k, v in spread(values).items()} if values else None

        return {
            "workload": self.workload,
            "concurrency": self.concurrency,
            "metric": self.metric,
            "headline_tps": {k: round(v, 3) for k, v in head.items()} if head else None,
            "published_tps": self.published,
            "ratio_to_published": round(ratio, 4) if ratio is not None else None,
            "measured_batches": len(self.measured),
            "failed_batches": len(self.batches) - len(self.measured),
            "aggregate_tps": rounded([b.aggregate_tps for b in self.measured]),
            "decode_tps_per_stream": rounded([b.decode_tps for b in self.measured]),
            "ttft_s": {k: round(v, 4) for k, v in percentiles(ttft).items()} if ttft else None,
            "e2e_s": {k: round(v, 4) for k, v in percentiles(e2e).items()} if e2e else None,
            "short_requests": self.short_requests,
            "errors": [e for b in self.batches for e in b.errors],
            "batches": [b.summary() for b in self.batches],
        }


@dataclass
class BenchReport:
    endpoint: str
    model: str
    simulator: bool
    profile: str | None
    published_source: str | None
    started: str
    workloads: dict[str, Workload]
    concurrency: list[int]
    repeats: int
    levels: list[LevelResult] = field(default_factory=list)
    seconds: float = 0.0
    results_dir: Path | None = None
    server_info: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> list[str]:
        return [e for lvl in self.levels for b in lvl.batches for e in b.errors]

    @property
    def has_published(self) -> bool:
        return any(lvl.published is not None for lvl in self.levels)

    def to_dict(self) -> dict[str, Any]:
        return {
            "simulator": self.simulator,
            "endpoint": self.endpoint,
            "model": self.model,
            "profile": self.profile,
            "published_source": self.published_source,
            "published": "compared"
            if self.has_published
            else "the profile publishes no figures; compared to nothing",
            "started": self.started,
            "seconds": round(self.seconds, 2),
            "concurrency": self.concurrency,
            "repeats": self.repeats,
            "definitions": {
                "ttft": "send → first streamed content chunk",
                "decode_tps_per_stream": "(completion_tokens − 1) / (done − first token), tokens from usage",
                "aggregate_tps": "Σ completion_tokens / (last response done − first request sent)",
                "headline": "C1: decode tok/s per stream; C>1: aggregate tok/s",
                "warmup": f"one {WARMUP_TOKENS}-token batch per level, discarded",
            },
            "workloads": {
                name: {
                    "sha256": w.sha256,
                    "max_tokens": w.max_tokens,
                    "prompts": len(w.prompts),
                    "version": w.version,
                }
                for name, w in self.workloads.items()
            },
            "levels": [lvl.to_dict() for lvl in self.levels],
            "errors": self.errors,
            "server_info": self.server_info,
        }


ProgressFn = Callable[[str], None]


async def _bench(
    endpoint: Endpoint,
    workloads: list[Workload],
    levels: list[int],
    repeats: int,
    figures: dict[str, dict[int, float]],
    warmup: bool,
    on_progress: ProgressFn | None,
) -> list[LevelResult]:
    client = endpoint.async_client(timeout=TIMEOUT_S)
    results: list[LevelResult] = []
    try:
        for workload in workloads:
            by_c = {
                c: LevelResult(
                    workload.name,
                    c,
                    published=figures.get(workload.name, {}).get(c),
                    max_tokens=workload.max_tokens,
                )
                for c in levels
            }
            results.extend(by_c.values())
            if warmup:
                for c in levels:
                    if on_progress:
                        on_progress(f"{workload.name} warm-up C{c}")
                    await run_batch(client, endpoint.model, workload, c, "warmup", max_tokens=WARMUP_TOKENS)
            for r in range(repeats):
                order = levels if r % 2 == 0 else list(reversed(levels))
                for c in order:
                    if on_progress:
                        on_progress(f"{workload.name} C{c} repeat {r + 1}/{repeats}")
                    by_c[c].batches.append(await run_batch(client, endpoint.model, workload, c, f"r{r + 1}"))
    finally:
        await client.close()
    return results


def run_bench(
    endpoint: Endpoint,
    workloads: Sequence[str] = WORKLOADS,
    concurrency: Sequence[int] = (1, 4, 8),
    repeats: int = 3,
    figures: dict[str, dict[int, float]] | None = None,
    profile: str | None = None,
    published_source: str | None = None,
    warmup: bool = True,
    on_progress: ProgressFn | None = None,
) -> BenchReport:
    """Measure the ladder; ``figures`` ({workload: {C: tok/s}}) are the published values to compare to."""
    if repeats < 1:
        raise InputError(f"--repeats {repeats} must be at least 1")
    loaded = {name: load_workload(name) for name in workloads}
    levels = sorted(set(concurrency))
    report = BenchReport(
        endpoint=endpoint.base_url,
        model=endpoint.model,
        simulator=endpoint.simulator,
        profile=profile,
        published_source=published_source,
        started=datetime.now(UTC).isoformat(timespec="seconds"),
        workloads=loaded,
        concurrency=levels,
        repeats=repeats,
        server_info=endpoint.server_info,
    )
    start = time.perf_counter()
    report.levels = asyncio.run(
        _bench(endpoint, list(loaded.values()), levels, repeats, figures or {}, warmup, on_progress)
    )
    report.seconds = time.perf_counter() - start
    return report


def write_report(report: BenchReport, results_dir: Path) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    report.results_dir = results_dir
    path = results_dir / "bench.json"
    path.write_text(json.dumps(report.to_dict(), indent=2))
    return path


def bench_cluster(cluster: Any, **kwargs: Any) -> BenchReport:
    """``run_bench`` against an inventory's rank 0, compared with its profile's published figures."""
    endpoint = for_cluster(cluster)
    return run_bench(
        endpoint,
        figures=pub.bench_figures(cluster.profile),
        profile=cluster.profile.name,
        published_source=pub.source(cluster.profile),
        **kwargs,
    )
