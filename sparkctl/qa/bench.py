"""The concurrency ladder, measured by the published definitions and sample counts.

Definitions (``published.DEFINITIONS``; every level records the one it used, and they are never mixed):

- **coding** (R4's community workload): C1 headline = decode per stream
  ``(completion_tokens − 1) / (done − first content token)``; C>1 headline = the **batch** aggregate
  ``Σ completion_tokens / (last done − first sent)``, prefill and TTFT included.
- **prose** (sparkDash, R4's and M1's prose): the **post-first-token** aggregate
  ``Σ (completion_tokens − 1) / (latest last content token − earliest first content token)`` at every
  level. With TTFT of seconds at C8 the batch definition would read ~20 % low here.
- **TTFT**: send → first streamed chunk carrying content (or reasoning) text. Tokens always come from the
  server's ``usage`` block, never from counting chunks (a chunk can carry a speculative block).

Samples and statistics follow R4's repeat suite: the standard warm-ups (the first three prompts at C1
with 64 tokens), then one full-length batch per level that is excluded, then trials: trials 1..waves
run every level (even trials in reverse order, so drift favours no level), further trials run C1 only
until coding C1 has its samples (R4: 5 C1 samples, 3 waves at C4/C8, 3 prose waves per level). Each
level reports the **mean** (what the publications quote) with min/median/max and every sample.
Prompts are identical across repeats and the excluded batch (R4 flushes no cache and reuses prefixes
on purpose); only the prefill sweep (``prefill.py``) uses a fresh prefix per request.

Size: one module on purpose — the load generator and the report share the measured records;
workloads (workload.py), the prefill sweep (prefill.py), plotting and published figures are apart.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.errors import InputError
from sparkctl.qa import published as pub
from sparkctl.qa.endpoint import Endpoint, for_cluster
from sparkctl.qa.prefill import PrefillResult, run_prefill
from sparkctl.qa.request import RequestTiming, percentile, stats, stream_one
from sparkctl.qa.workload import Workload, load_builtin, resolve

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from sparkctl.model import Cluster

WARMUP_TOKENS = 64
STANDARD_WARMUPS = 3  # R4/community runner: the first three prompts at C1, 64 tokens each
TIMEOUT_S = 900.0
DEFAULT_LEVELS = (1, 4, 8, 16)
WARMUPS = ("published", "short", "none")


def parse_concurrency(text: str) -> list[int]:
    """``"1,4,8"`` → [1, 4, 8] (sorted, unique, each ≥ 1)."""
    try:
        levels = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        levels = []
    if not levels or levels[0] < 1:
        raise InputError(
            f"--concurrency {text!r} is not a list of positive integers", hint="e.g. --concurrency 1,4,8,16"
        )
    return levels


@dataclass
class Batch:
    concurrency: int
    requests: list[RequestTiming]
    trial: int = 0  # 0: the excluded warm-up batch

    @property
    def wall(self) -> float:
        return max(r.done for r in self.requests) - min(r.sent for r in self.requests)

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.requests)

    @property
    def aggregate_tps(self) -> float:
        """Batch definition: Σ completion tokens / (last response done − first request sent)."""
        return self.completion_tokens / self.wall if self.wall > 0 else 0.0

    @property
    def post_first_token_tps(self) -> float:
        """sparkDash definition: Σ (completion − 1) / (latest last content − earliest first content)."""
        firsts = [r.first_token for r in self.requests if r.first_token is not None]
        if not firsts:
            return 0.0
        window = max(r.last for r in self.requests) - min(firsts)
        tokens = sum(max(0, r.completion_tokens - 1) for r in self.requests)
        return tokens / window if window > 0 else 0.0

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

    def value(self, definition: str) -> float:
        if definition == "decode-per-stream":
            return self.decode_tps
        if definition == "batch":
            return self.aggregate_tps
        if definition == "post-first-token":
            return self.post_first_token_tps
        raise ValueError(f"no batch value for definition {definition!r}")

    def summary(self) -> dict[str, Any]:
        return {
            "trial": self.trial,
            "concurrency": self.concurrency,
            "wall_s": round(self.wall, 4),
            "completion_tokens": self.completion_tokens,
            "aggregate_batch_tps": round(self.aggregate_tps, 3),
            "aggregate_post_first_token_tps": round(self.post_first_token_tps, 3),
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


def metric_name(definition: str) -> str:
    return {
        "decode-per-stream": "decode tok/s per stream",
        "batch": "aggregate tok/s (batch)",
        "post-first-token": "aggregate tok/s (post-first-token)",
    }[definition]


@dataclass
class LevelResult:
    workload: Workload
    concurrency: int
    batches: list[Batch] = field(default_factory=list)
    excluded: int = 0  # full-length warm-up batches run and discarded at this level
    slots: int | None = None  # the server's max_running_requests, when it says

    @property
    def definition(self) -> str:
        return pub.definition_for(self.workload.kind, self.concurrency)

    @property
    def published(self) -> list[pub.Figure]:
        return pub.matching(self.workload.kind, self.concurrency, self.workload.max_tokens)

    @property
    def measured(self) -> list[Batch]:
        """Batches in which every request completed (a batch with a failed request measures nothing)."""
        return [b for b in self.batches if b.ok]

    @property
    def samples(self) -> list[float]:
        return [b.value(self.definition) for b in self.measured]

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.measured else None

    @property
    def short_requests(self) -> int:
        """Requests that came back with fewer tokens than asked (the server ignored ``ignore_eos``)."""
        return sum(
            1
            for b in self.batches
            for r in b.requests
            if r.ok and r.completion_tokens < self.workload.max_tokens
        )

    def ratio(self, figure: pub.Figure) -> float | None:
        return self.mean / figure.value if self.mean is not None and figure.value else None

    def to_dict(self) -> dict[str, Any]:
        reqs = [r for b in self.measured for r in b.requests]
        ttft = [r.ttft for r in reqs]
        ttft_stats = stats(ttft, 4) if ttft else None
        if ttft_stats is not None:
            ttft_stats.pop("samples")
            ttft_stats.update({f"p{p}": round(percentile(ttft, p), 4) for p in (50, 90, 99)})
        queued = None
        if self.slots and self.concurrency > self.slots:
            queued = (
                f"{self.concurrency - self.slots} of {self.concurrency} requests wait for a slot "
                f"(the server runs max_running_requests={self.slots})"
            )
        return {
            "workload": self.workload.name,
            "kind": self.workload.kind,
            "workload_sha256": self.workload.sha256,
            "concurrency": self.concurrency,
            "metric": metric_name(self.definition),
            "definition": self.definition,
            "definition_text": pub.DEFINITIONS[self.definition],
            "headline_tps": stats(self.samples) if self.measured else None,
            "ttft_s": ttft_stats,
            "decode_tps_per_stream": stats([b.decode_tps for b in self.measured]) if self.measured else None,
            # Both aggregates, for reading only: the headline uses `definition`, never the other.
            "aggregate_means": {
                "batch": round(statistics.fmean(b.aggregate_tps for b in self.measured), 3),
                "post-first-token": round(statistics.fmean(b.post_first_token_tps for b in self.measured), 3),
            }
            if self.measured
            else None,
            "published": [
                {**f.to_dict(), "ratio": round(r, 4) if (r := self.ratio(f)) is not None else None}
                for f in self.published
            ],
            "measured_batches": len(self.measured),
            "failed_batches": len(self.batches) - len(self.measured),
            "excluded_warmup_batches": self.excluded,
            "queued": queued,
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
    started: str
    workloads: list[Workload]
    concurrency: list[int]
    waves: int
    c1_samples: int
    warmup: str
    levels: list[LevelResult] = field(default_factory=list)
    prefill: PrefillResult | None = None
    seconds: float = 0.0
    results_dir: Path | None = None
    server_info: dict[str, Any] = field(default_factory=dict)
    # GPU maxima per node during the run (serve.thermals.ThermalSampler.summary), set by the CLI.
    thermals: dict[str, Any] | None = None

    @property
    def errors(self) -> list[str]:
        out = [e for lvl in self.levels for b in lvl.batches for e in b.errors]
        return out + (self.prefill.errors if self.prefill else [])

    @property
    def sources(self) -> list[str]:
        figures = [f for lvl in self.levels for f in lvl.published]
        if self.prefill:
            figures += [f for p in self.prefill.points for f in p.published]
        return pub.sources_used(figures)

    def to_dict(self) -> dict[str, Any]:
        return {
            "simulator": self.simulator,
            "endpoint": self.endpoint,
            "model": self.model,
            "profile": self.profile,
            "profile_sources": list(pub.PROFILE_SOURCES.get(self.profile or "", ())),
            "published_sources": {
                k: {
                    "label": pub.SOURCES[k].label,
                    "citation": pub.SOURCES[k].citation,
                    "date": pub.SOURCES[k].date,
                }
                for k in self.sources
            },
            "published": "compared" if self.sources else "no published figure matches these workloads",
            "started": self.started,
            "seconds": round(self.seconds, 2),
            "concurrency": self.concurrency,
            "sampling": {
                "waves": self.waves,
                "c1_coding_samples": self.c1_samples,
                "order": "trials 1..waves run every level, even trials reversed; later trials C1 only",
                "warmup": self.warmup,
                "warmup_text": _warmup_text(self.warmup),
                "prefixes": "identical prompts across repeats and the excluded warm-up batch (R4: no cache "
                "flush, prefixes deliberately reused); the prefill sweep uses a fresh prefix per request",
                "statistic": "mean of the samples (as published), with min/median/max and every sample",
            },
            "definitions": pub.DEFINITIONS,
            "workloads": {w.name: w.describe() for w in self.workloads},
            "levels": [lvl.to_dict() for lvl in self.levels],
            "prefill": self.prefill.to_dict() if self.prefill else None,
            "thermals": self.thermals,
            "errors": self.errors,
            "server_info": self.server_info,
        }


def _warmup_text(mode: str) -> str:
    return {
        "published": f"the first {STANDARD_WARMUPS} prompts at C1 with {WARMUP_TOKENS} tokens, then one "
        "full-length batch per level, all excluded (R4's repeat suite)",
        "short": f"one {WARMUP_TOKENS}-token batch per level, excluded (quick mode, not R4's warm-up)",
        "none": "no warm-up (not comparable with the published figures)",
    }[mode]


# ------------------------------------------------------------------------------------------ running
def prompts_for(workload: Workload, concurrency: int) -> list[str]:
    """C distinct prompts, a deterministic tag at the front; the same on every repeat of a level."""
    return [
        f"[bench v1 {workload.name} c{concurrency} s{i}] {workload.prompts[i % len(workload.prompts)]}"
        for i in range(concurrency)
    ]


async def run_batch(
    client: AsyncOpenAI, model: str, prompts: Sequence[str], max_tokens: int, trial: int = 0
) -> Batch:
    """The prompts sent together; the batch lasts from the first send to the last response."""
    timings = await asyncio.gather(*(stream_one(client, model, p, max_tokens) for p in prompts))
    return Batch(len(prompts), list(timings), trial)


def trial_plan(levels: Sequence[int], waves: int, c1_samples: int) -> list[list[int]]:
    """Levels per trial: 1..waves run every level (even trials reversed), then C1 until it has
    ``c1_samples`` samples (R4: trials 1–3 C1/C4/C8 with trial 2 as 8,4,1; trials 4–5 C1 only)."""
    ordered = sorted(levels)
    plan = [ordered if t % 2 == 0 else ordered[::-1] for t in range(waves)]
    if 1 in ordered:
        plan += [[1] for _ in range(max(0, c1_samples - waves))]
    return plan


ProgressFn = Callable[[str], None]


async def _bench(
    endpoint: Endpoint,
    workloads: list[Workload],
    levels: list[int],
    waves: int,
    c1_samples: int,
    warmup: str,
    on_progress: ProgressFn | None,
) -> list[LevelResult]:
    client = endpoint.async_client(timeout=TIMEOUT_S)
    slots = endpoint.server_info.get("max_running_requests")
    results: list[LevelResult] = []

    def say(text: str) -> None:
        if on_progress:
            on_progress(text)

    try:
        for workload in workloads:
            by_c = {c: LevelResult(workload, c, slots=int(slots) if slots else None) for c in levels}
            results.extend(by_c.values())
            if warmup == "published":
                say(f"{workload.name} standard warm-ups")
                for i in range(STANDARD_WARMUPS):
                    await run_batch(
                        client,
                        endpoint.model,
                        [f"[bench v1 warmup s{i}] {workload.prompts[i % len(workload.prompts)]}"],
                        WARMUP_TOKENS,
                    )
            if warmup != "none":
                for c in levels:
                    say(f"{workload.name} warm-up C{c} (excluded)")
                    full = workload.max_tokens if warmup == "published" else WARMUP_TOKENS
                    await run_batch(client, endpoint.model, prompts_for(workload, c), full)
                    by_c[c].excluded += 1
            samples_c1 = c1_samples if workload.kind == "coding" else waves
            plan = trial_plan(levels, waves, samples_c1)
            for t, order in enumerate(plan, start=1):
                for c in order:
                    say(f"{workload.name} C{c} trial {t}/{len(plan)}")
                    batch = await run_batch(
                        client, endpoint.model, prompts_for(workload, c), workload.max_tokens, trial=t
                    )
                    by_c[c].batches.append(batch)
    finally:
        await client.close()
    return results


def run_bench(
    endpoint: Endpoint,
    workloads: Sequence[Workload | str] = ("coding", "prose"),
    concurrency: Sequence[int] = DEFAULT_LEVELS,
    waves: int = 3,
    c1_samples: int = 5,
    warmup: str = "published",
    prefill_sizes: Sequence[int] = (),
    profile: str | None = None,
    on_progress: ProgressFn | None = None,
) -> BenchReport:
    """Measure the ladder (and the prefill sweep when ``prefill_sizes``) against the published figures."""
    if waves < 1:
        raise InputError(f"--repeats {waves} must be at least 1")
    if c1_samples < 1:
        raise InputError(f"--c1-samples {c1_samples} must be at least 1")
    if warmup not in WARMUPS:
        raise InputError(f"warm-up {warmup!r} is not one of {', '.join(WARMUPS)}")
    loaded = [w if isinstance(w, Workload) else load_builtin(w) for w in workloads]
    levels = sorted(set(concurrency))
    report = BenchReport(
        endpoint=endpoint.base_url,
        model=endpoint.model,
        simulator=endpoint.simulator,
        profile=profile,
        started=datetime.now(UTC).isoformat(timespec="seconds"),
        workloads=loaded,
        concurrency=levels,
        waves=waves,
        c1_samples=c1_samples,
        warmup=warmup,
        server_info=endpoint.server_info,
    )
    start = time.perf_counter()
    report.levels = asyncio.run(_bench(endpoint, loaded, levels, waves, c1_samples, warmup, on_progress))
    if prefill_sizes:
        report.prefill = run_prefill(endpoint, prefill_sizes, on_progress=on_progress)
    report.seconds = time.perf_counter() - start
    return report


def write_report(report: BenchReport, results_dir: Path) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    report.results_dir = results_dir
    path = results_dir / "bench.json"
    path.write_text(json.dumps(report.to_dict(), indent=2))
    return path


def bench_cluster(cluster: Cluster, workloads: Sequence[str] = ("both",), **kwargs: Any) -> BenchReport:
    """``run_bench`` against an inventory's rank 0."""
    return run_bench(for_cluster(cluster), resolve(list(workloads)), profile=cluster.profile.name, **kwargs)
