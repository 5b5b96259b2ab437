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

The workloads are the publishers' own (``workload.py``: the community runner's merge_intervals prompt
with its per-request tag, sparkDash's hash-map prompt with its stream suffix), each request sending
what that client sends (the community runner: no ``ignore_eos``, no ``min_tokens``; sparkDash:
``min_tokens``/``ignore_eos`` at 256), and each suite runs its publisher's regime:

- ``r4-repeat`` (coding; R4 ``bench/repeat-client.py``): the standard warm-ups (the runner's first
  three categories at C1 with 64 tokens), one full-length batch per level that is excluded, then
  trials: trials 1..waves run every level (even trials in reverse order, so drift favours no level),
  further trials run C1 only until C1 has its samples (R4: 5 C1 samples, 3 waves at C4/C8);
- ``sparkdash`` (prose; R4's prose step, R8's ``run.mjs`` around sparkDash): per trial a 512-token
  warm-up prefill, a 4,096-token prefill (recorded), sparkDash's 32-token decode warm-up, then the
  decode levels ascending, one wave each (R4: 3 trials at C1/C4/C8).

Each level reports the **mean** (what the publications quote) with min/median/max and every sample.
Prompts are identical across repeats and the excluded batch (R4 flushes no cache and reuses prefixes
on purpose); only the prefills use a fresh prefix per request.

Around every suite the server must be idle and serve the profile (``idle.py``, as R4's client
asserts), and every request runs inside a timed window of ``quiet.Windows``: GPU telemetry is read
between them only.

Size: one module on purpose — the load generator and the report share the measured records;
workloads (workload.py), the prefill sweep (prefill.py), plotting and published figures are apart.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.errors import InputError
from sparkctl.qa import idle, protocols
from sparkctl.qa import published as pub
from sparkctl.qa.endpoint import Endpoint, for_cluster
from sparkctl.qa.prefill import ColdPrefill, PrefillResult, run_prefill
from sparkctl.qa.quiet import Windows
from sparkctl.qa.request import RequestTiming, StreamClient, percentile, stats, stream_client, stream_one
from sparkctl.qa.workload import STANDARD_WARMUPS, WARMUP_TOKENS, Workload, load_builtin, resolve

if TYPE_CHECKING:
    from sparkctl.model import Cluster

TIMEOUT_S = 900.0
# R4's two repeat suites: with --after-long each is shown beside its own suite only.
SUITE_OF = {"r4-s1": 1, "r4-s2": 2}
DEFAULT_LEVELS = (1, 4, 6, 8, 16)  # R4's C1/C4/C8, C6 (R4's and Tony's sweep), C16
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
    category: str | None = None  # a mix's category (one batch per category per sample)
    max_tokens: int = 0  # the budget asked of each request

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
            "category": self.category,
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
        "category-mean": "aggregate tok/s (mean of the categories' batches)",
    }[definition]


@dataclass
class LevelResult:
    workload: Workload
    concurrency: int
    batches: list[Batch] = field(default_factory=list)
    excluded: int = 0  # full-length warm-up batches run and discarded at this level
    slots: int | None = None  # the server's max_running_requests, when it says
    suite: int = 0  # --after-long: 1 before the long request, 2 after it (0: a plain run)

    @property
    def definition(self) -> str:
        return pub.definition_for(self.workload.kind, self.concurrency)

    @property
    def published(self) -> list[pub.Figure]:
        """Published figures measured with these workload bytes at this level (none otherwise); with
        --after-long, R4's first suite beside the first and its suite after 299K beside the second."""
        w = self.workload
        figures = pub.matching(w.sha256, w.kind, self.concurrency, w.max_tokens)
        if self.suite:
            figures = [f for f in figures if SUITE_OF.get(f.source, self.suite) == self.suite]
        return figures

    @property
    def not_compared(self) -> list[dict[str, Any]]:
        w = self.workload
        return pub.not_compared(w.sha256, w.kind, self.concurrency, w.max_tokens)

    @property
    def measured(self) -> list[Batch]:
        """Batches in which every request completed (a batch with a failed request measures nothing)."""
        return [b for b in self.batches if b.ok]

    @property
    def samples(self) -> list[float]:
        """One value per measured sample: a batch, or for a mix a trial whose every category batch
        completed (the mean of their batch aggregates)."""
        if self.definition != "category-mean":
            return [b.value(self.definition) for b in self.measured]
        trials: dict[int, list[Batch]] = {}
        for b in self.batches:
            trials.setdefault(b.trial, []).append(b)
        return [statistics.fmean(b.aggregate_tps for b in group) for _, group in sorted(trials.items())
                if all(b.ok for b in group)]

    @property
    def mean(self) -> float | None:
        samples = self.samples
        return statistics.fmean(samples) if samples else None

    @property
    def short_requests(self) -> int:
        """Requests that came back with fewer tokens than asked (an EOS before the budget: the
        community runner forces no length; or a server that ignored ``ignore_eos``/``min_tokens``)."""
        return sum(
            1
            for b in self.batches
            for r in b.requests
            if r.ok and r.completion_tokens < (b.max_tokens or self.workload.max_tokens)
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
            "suite": self.suite or None,
            "concurrency": self.concurrency,
            "metric": metric_name(self.definition),
            "definition": self.definition,
            "definition_text": pub.DEFINITIONS[self.definition],
            "headline_tps": stats(self.samples) if self.samples else None,
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
            "published_not_compared": self.not_compared,
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
    # GPU maxima per node at the checkpoints (serve.thermals.ThermalSampler.summary), set by the CLI.
    thermals: dict[str, Any] | None = None
    idle: list[dict[str, Any]] = field(default_factory=list)  # the idle checks around every suite
    identity_checked: dict[str, Any] | None = None  # the /server_info fields compared with the profile
    suite_errors: list[str] = field(default_factory=list)  # a server busy after a suite
    trial_prefills: list[dict[str, Any]] = field(default_factory=list)  # sparkdash regime's prefills
    telemetry: dict[str, Any] = field(default_factory=dict)  # how GPU and memory were watched
    source_identity: dict[str, Any] | None = None  # qa.identity's block, set by the CLI
    after_long: dict[str, Any] | None = None  # --after-long: the long request between the suites
    after_levels: list[LevelResult] = field(default_factory=list)  # --after-long: the second suite
    arrivals: dict[str, Any] | None = None  # --arrivals: the schedule's result
    ab: dict[str, Any] | None = None  # --ab: the arms, in order, and the differences

    @property
    def errors(self) -> list[str]:
        out = [e for lvl in self.levels + self.after_levels for b in lvl.batches for e in b.errors]
        if self.after_long and self.after_long.get("error"):
            out.append(f"long request: {self.after_long['error']}")
        if self.arrivals:
            out += [f"arrivals: {e}" for e in self.arrivals["errors"]]
        if self.ab:  # the first arm's are the report's own (above)
            out += [f"A/B {arm['arm']} arm {arm['index']}: {e}" for arm in self.ab["arms"][1:]
                    for e in arm.get("errors", [])]
        out += [str(p["error"]) for p in self.trial_prefills if p.get("error")]
        return out + (self.prefill.errors if self.prefill else []) + self.suite_errors

    @property
    def sources(self) -> list[str]:
        figures = [f for lvl in self.levels + self.after_levels for f in lvl.published]
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
                "regimes": {w.name: REGIME_TEXT[w.regime] for w in self.workloads},
                "prefixes": "identical prompts across repeats and the excluded warm-up batch (R4: no cache "
                "flush, prefixes deliberately reused); the prefills use a fresh prefix per request",
                "statistic": "mean of the samples (as published), with min/median/max and every sample",
            },
            "differences_from_the_publishers": list(DIFFERENCES),
            "idle_checks": self.idle,
            "server_identity_checked": self.identity_checked,
            "telemetry": self.telemetry,
            "trial_prefills": self.trial_prefills,
            "definitions": pub.DEFINITIONS,
            "workloads": {w.name: w.describe() for w in self.workloads},
            "levels": [lvl.to_dict() for lvl in self.levels],
            "prefill": self.prefill.to_dict() if self.prefill else None,
            "thermals": self.thermals,
            "errors": self.errors,
            "server_info": self.server_info,
            "source_identity": self.source_identity,
            "protocols": self.protocols(),
        }

    def protocols(self) -> dict[str, Any]:
        """--after-long, --arrivals and --ab: each its own block (null when not run)."""
        return {
            "after_long": None if self.after_long is None else {
                "long_request": self.after_long,
                "suite_1": "levels (before the long request)",
                "levels": [lvl.to_dict() for lvl in self.after_levels],
            },
            "arrivals": self.arrivals,
            "ab": self.ab,
        }


def _warmup_text(mode: str) -> str:
    return {
        "published": f"r4-repeat: the runner's first {STANDARD_WARMUPS} categories at C1 with "
        f"{WARMUP_TOKENS} tokens, then one full-length batch per level, all excluded (R4's repeat suite); "
        "sparkdash: per trial the warm-up prefill and sparkDash's decode warm-up, excluded",
        "short": f"r4-repeat: one {WARMUP_TOKENS}-token batch per level, excluded (quick mode, not R4's "
        "warm-up); sparkdash: the regime's own warm-ups, unchanged",
        "none": "no warm-up (not comparable with the published figures)",
    }[mode]


# ------------------------------------------------------------------------------------------ running
REGIME_TEXT = {
    "r4-repeat": "R4's repeat suite: the standard warm-ups at C1, one excluded full-length batch per level, "
    "then trials (even trials reversed; later trials C1 only)",
    "sparkdash": "sparkDash as R4 ran it: per trial a warm-up prefill, the trial's prefills, sparkDash's "
    "decode warm-up, then the levels ascending, one wave each",
}


def prompts_for(workload: Workload, concurrency: int) -> list[str]:
    """C prompts of the workload (its publisher's tag or suffix); the same on every repeat of a level."""
    return workload.prompts_for(concurrency)


async def run_batch(
    client: StreamClient, model: str, prompts: Sequence[str], max_tokens: int, trial: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> Batch:
    """The prompts sent together; the batch lasts from the first send to the last response."""
    timings = await asyncio.gather(*(stream_one(client, model, p, max_tokens, extra) for p in prompts))
    return Batch(len(prompts), list(timings), trial, max_tokens=max_tokens)


def trial_plan(levels: Sequence[int], waves: int, c1_samples: int) -> list[list[int]]:
    """Levels per trial: 1..waves run every level (even trials reversed), then C1 until it has
    ``c1_samples`` samples (R4: trials 1–3 C1/C4/C8 with trial 2 as 8,4,1; trials 4–5 C1 only)."""
    ordered = sorted(levels)
    plan = [ordered if t % 2 == 0 else ordered[::-1] for t in range(waves)]
    if 1 in ordered:
        plan += [[1] for _ in range(max(0, c1_samples - waves))]
    return plan


ProgressFn = Callable[[str], None]


@dataclass
class _Run:
    """One bench run's collaborators: the endpoint, its client, the windows, the report."""

    endpoint: Endpoint
    client: StreamClient
    windows: Windows
    report: BenchReport
    say: ProgressFn

    async def batch(self, prompts: Sequence[str], tokens: int, trial: int = 0,
                    extra: Mapping[str, Any] | None = None, where: str = "") -> Batch:
        """One batch inside a timed window, GPU telemetry read (if due) just before it."""
        self.windows.checkpoint(where or f"before C{len(prompts)}")
        with self.windows.timed(where):
            return await run_batch(self.client, self.endpoint.model, prompts, tokens, trial, extra)

    async def r4_repeat(self, workload: Workload, by_c: dict[int, LevelResult], waves: int, c1_samples: int,
                        warmup: str) -> None:
        levels = sorted(by_c)
        if warmup == "published":
            self.say(f"{workload.name} standard warm-ups")
            for prompt, tokens in workload.warmup_prompts():
                await self.batch([prompt], tokens, extra=workload.extra, where="standard warm-up")
        if warmup != "none":
            for c in levels:
                self.say(f"{workload.name} warm-up C{c} (excluded)")
                for _, prompts, budget in workload.batches_for(c):
                    full = budget if warmup == "published" else WARMUP_TOKENS
                    await self.batch(prompts, full, extra=workload.extra, where=f"warm-up C{c}")
                by_c[c].excluded += 1
        samples_c1 = c1_samples if workload.kind == "coding" else waves
        plan = trial_plan(levels, waves, samples_c1)
        for t, order in enumerate(plan, start=1):
            for c in order:
                self.say(f"{workload.name} C{c} trial {t}/{len(plan)}")
                for category, prompts, budget in workload.batches_for(c):
                    where = f"C{c} trial {t}" + (f" {category}" if category else "")
                    batch = await self.batch(prompts, budget, t, workload.extra, where)
                    batch.category = category
                    by_c[c].batches.append(batch)

    async def sparkdash(
        self, workload: Workload, by_c: dict[int, LevelResult], waves: int, warmup: str
    ) -> None:
        trial = workload.trial or {}
        cold = ColdPrefill()
        pre_extra = trial.get("prefill_extra") or {}
        for t in range(1, waves + 1):
            if warmup != "none" and trial.get("prefill_warmup_tokens"):
                self.say(f"{workload.name} trial {t}/{waves}: warm-up prefill")
                with self.windows.timed("warm-up prefill"):
                    await cold.send(self.client, self.endpoint.model, trial["prefill_warmup_tokens"],
                                    trial["prefill_max_tokens"], pre_extra)
            for size in trial.get("prefill_sizes") or []:
                self.say(f"{workload.name} trial {t}/{waves}: prefill {size}")
                self.windows.checkpoint(f"before prefill {size}")
                with self.windows.timed(f"prefill {size}"):
                    timing = await cold.send(
                        self.client, self.endpoint.model, size, trial["prefill_max_tokens"], pre_extra)
                self.report.trial_prefills.append(_prefill_record(workload, t, size, timing))
            if warmup != "none" and trial.get("decode_warmup_tokens"):
                await self.batch([workload.prompts[0]], trial["decode_warmup_tokens"],
                                 extra=trial.get("decode_warmup_extra") or {}, where="decode warm-up")
            for c in sorted(by_c):
                self.say(f"{workload.name} C{c} trial {t}/{waves}")
                by_c[c].batches.append(await self.batch(
                    workload.prompts_for(c), workload.max_tokens, t, workload.extra, f"C{c} trial {t}"))


def _prefill_record(workload: Workload, trial: int, size: int, t: RequestTiming) -> dict[str, Any]:
    tps = t.prompt_tokens / t.ttft if t.ok and t.ttft > 0 else None
    return {"workload": workload.name, "trial": trial, "target_tokens": size,
            "prompt_tokens": t.prompt_tokens,
            "ttft_s": round(t.ttft, 4), "prefill_tps": round(tps, 1) if tps else None,
            "error": None if t.ok else (t.error or "incomplete response")}


def _slots(endpoint: Endpoint) -> int | None:
    """The requests the server runs at once (``max_running_requests``, when it says); through the
    router every group's together (its policy spreads the requests over them)."""
    infos = [w.server_info for w in endpoint.workers] or [endpoint.server_info]
    said = [info.get("max_running_requests") for info in infos]
    counts = [int(n) for n in said if n]
    return sum(counts) if len(counts) == len(said) else None


async def _bench(
    endpoint: Endpoint,
    report: BenchReport,
    levels: list[int],
    windows: Windows,
    server_check: idle.Compare | None,
    on_progress: ProgressFn | None,
    suite: int = 0,
) -> list[LevelResult]:
    client = stream_client(endpoint, TIMEOUT_S)
    slots = _slots(endpoint)
    results: list[LevelResult] = []

    def say(text: str) -> None:
        if on_progress:
            on_progress(text)

    run = _Run(endpoint, client, windows, report, say)
    try:
        for n, workload in enumerate(report.workloads):
            say(f"{workload.name}: idle and identity checks")
            before = f"before the {workload.name} suite"
            try:
                report.idle.append(idle.check_idle(endpoint, before))
                if server_check is not None:
                    report.identity_checked = idle.check_server(
                        endpoint, server_check, IDENTITY_FIELDS)
            except idle.BusyError as exc:
                if n == 0:
                    raise  # nothing measured: refused
                report.suite_errors.append(f"{exc.message}; the suites from {workload.name} on were not run")
                break
            windows.checkpoint(before, force=True)
            by_c = {c: LevelResult(workload, c, slots=slots, suite=suite)
                    for c in levels}
            results.extend(by_c.values())
            if workload.regime == "sparkdash":
                await run.sparkdash(workload, by_c, report.waves, report.warmup)
            else:
                await run.r4_repeat(workload, by_c, report.waves, report.c1_samples, report.warmup)
            after = f"after the {workload.name} suite"
            windows.checkpoint(after, force=True)
            record, problem = idle.after_suite(endpoint, after)
            report.idle.append(record)
            if problem:
                report.suite_errors.append(problem)
    finally:
        await client.close()
    return results


# Where sparkctl's bench knowingly differs from the publishers' clients (every result lists them;
# a unit test pins the list, so a new difference is written down here or not made).
DIFFERENCES: tuple[str, ...] = (
    "prefills of the sparkDash regime use sparkctl's seeded word filler with a fresh tag, not sparkDash's "
    "buildPrefillPrompt (server/collectors/PrefillBench.js: a salted header, ' the' repeated, 'Reply OK.'; "
    "not carried); their sizes come from the server's own token counts",
    "sparkDash's request fields and its 32-token decode warm-up were read from a DecodeBench.js that "
    "takes promptType; the file R8 pins (sha256 1aa50982…) was not available byte for byte",
    "sparkDash retries a request refused with HTTP 400 without min_tokens/ignore_eos; sparkctl does not: "
    "the batch fails",
    "R4's repeat client stops the suite when a coding request returns other than 200 tokens; sparkctl "
    "counts such requests (short_requests) and warns",
    "requests go through sparkctl's own streaming reader (qa.request: a connection per request, the SSE "
    "stream read in asyncio's callbacks) on one event loop, not threads behind a barrier (v41bench) or "
    "Node's fetch (sparkDash)",
    "the default ladder adds C16 (no R4 figure: R4 served 8 slots)",
    "the mixed workload runs the runner's eight categories at every level of the ladder with its waves "
    "(R4's sweep and Tony's runs: one batch per cell, levels 1–6 and 8, then the counting ceiling, not run)",
    "--after-long sends one long request between the suites, R4's needle at the longest of its sizes the "
    "served context holds; R4 ran its three retrieval rungs (32,768 / 131,072 / 299,000) there",
    "--arrivals sends each arrival through the chat API; R4's generalization client sends token ids to "
    "SGLang's native /generate and checks the expected answers of three cases",
)

IDENTITY_FIELDS = idle.IDENTITY_FIELDS  # the /server_info fields recorded (R4's, as qualify records them)


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
    windows: Windows | None = None,
    server_check: idle.Compare | None = None,
    after_long: bool = False,
    arrivals: protocols.Schedule | None = None,
    ab: protocols.ABPlan | None = None,
) -> BenchReport:
    """Measure the ladder (and the prefill sweep when ``prefill_sizes``) against the published figures.

    ``windows``: the timed windows and the GPU checkpoints between them (the CLI passes one that
    reads the thermal sampler); ``server_check``: the comparison of ``/server_info`` with the
    profile (problems in words), made before each suite. A busy server is refused before a suite
    (``idle.BusyError``) and reported after one.

    Protocols (``protocols``): ``after_long`` runs the suites, R4's long needle request, then the
    suites again (both reported); ``arrivals`` runs the frozen schedule instead of the ladder (a
    warm-up cohort unless ``warmup`` is none, then ``waves`` measured cohorts); ``ab`` runs the
    measurement three times, baseline / lever / baseline, switching the group between the arms."""
    if waves < 1:
        raise InputError(f"--repeats {waves} must be at least 1")
    if c1_samples < 1:
        raise InputError(f"--c1-samples {c1_samples} must be at least 1")
    if warmup not in WARMUPS:
        raise InputError(f"warm-up {warmup!r} is not one of {', '.join(WARMUPS)}")
    if after_long and (arrivals is not None or ab is not None):
        raise InputError("--after-long runs the suites around the long request; it does not combine with "
                         "--arrivals or --ab")
    loaded = [w if isinstance(w, Workload) else load_builtin(w) for w in workloads]
    levels = sorted(set(concurrency))
    report = BenchReport(
        endpoint=endpoint.base_url,
        model=endpoint.model,
        simulator=endpoint.simulator,
        profile=profile,
        started=datetime.now(UTC).isoformat(timespec="seconds"),
        workloads=[] if arrivals is not None else loaded,
        concurrency=[] if arrivals is not None else levels,
        waves=waves,
        c1_samples=c1_samples,
        warmup=warmup,
        server_info=endpoint.server_info,
    )
    windows = windows or Windows()
    start = time.perf_counter()

    def measure(check: idle.Compare | None, suite: int = 0) -> None:
        if arrivals is not None:
            report.arrivals = asyncio.run(_arrivals(endpoint, report, arrivals, windows, check, on_progress))
        else:
            report.levels = asyncio.run(_bench(endpoint, report, levels, windows, check, on_progress, suite))

    if ab is not None:
        report.ab = _run_ab(report, ab, measure, on_progress)
    else:
        measure(server_check, 1 if after_long else 0)
        if after_long and not report.suite_errors:
            report.after_long = asyncio.run(_long(endpoint, windows, on_progress))
            report.after_levels = asyncio.run(
                _bench(endpoint, report, levels, windows, server_check, on_progress, 2))
    if prefill_sizes and arrivals is None:
        report.prefill = run_prefill(endpoint, prefill_sizes, on_progress=on_progress, windows=windows)
    report.seconds = time.perf_counter() - start
    report.telemetry = windows.describe()
    return report


async def _long(endpoint: Endpoint, windows: Windows, on_progress: ProgressFn | None) -> dict[str, Any]:
    if on_progress:
        on_progress("the long request between the suites")
    client = stream_client(endpoint, TIMEOUT_S)
    try:
        return await protocols.long_request(client, endpoint.model, endpoint.context_length, windows)
    finally:
        await client.close()


async def _arrivals(endpoint: Endpoint, report: BenchReport, schedule: protocols.Schedule, windows: Windows,
                    server_check: idle.Compare | None, on_progress: ProgressFn | None) -> dict[str, Any]:
    """The schedule between an idle/identity check before and an idle check after (as the suites)."""
    if on_progress:
        on_progress(f"arrivals: {len(schedule.arrivals)} requests")
    report.idle.append(idle.check_idle(endpoint, "before the arrivals"))
    if server_check is not None:
        report.identity_checked = idle.check_server(
            endpoint, server_check, IDENTITY_FIELDS)
    windows.checkpoint("before the arrivals", force=True)
    client = stream_client(endpoint, TIMEOUT_S)
    try:
        result = await protocols.run_schedule(client, endpoint.model, schedule, windows, report.waves,
                                              report.warmup != "none")
    finally:
        await client.close()
    windows.checkpoint("after the arrivals", force=True)
    record, problem = idle.after_suite(endpoint, "after the arrivals")
    report.idle.append(record)
    if problem:
        report.suite_errors.append(problem)
    return result


def _ab_values(report: BenchReport) -> dict[str, float | None]:
    """What an arm measured, by name: each level's headline mean, or the schedule's throughput and
    mean request latency."""
    if report.arrivals is not None:
        latency = report.arrivals.get("latency_s") or {}
        return {"arrivals throughput tok/s": report.arrivals.get("throughput_tps"),
                "arrivals latency mean s": latency.get("mean")}
    return {f"{lvl.workload.name} C{lvl.concurrency}": lvl.mean for lvl in report.levels}


def _run_ab(report: BenchReport, plan: protocols.ABPlan, measure: Callable[..., None],
            on_progress: ProgressFn | None) -> dict[str, Any]:
    """Baseline, lever, baseline: the group switched before the lever and back before the last arm;
    the report's own levels (or schedule) are the first baseline arm's. A run that stops while the
    lever is served (a failed switch or suite) brings the baseline back before it ends."""
    arms: list[dict[str, Any]] = []
    values: list[dict[str, float | None]] = []
    first: tuple[list[LevelResult], dict[str, Any] | None] | None = None
    serving = "baseline"
    try:
        for index, arm in enumerate(protocols.ARMS, start=1):
            switched = None
            if arm != serving:
                if on_progress:
                    on_progress(f"A/B: switching the group to the {arm}")
                serving = arm
                switched = dict(plan.switch(arm))
            if on_progress:
                on_progress(f"A/B: {arm} arm ({index}/{len(protocols.ARMS)})")
            measure(plan.server_check(arm))
            values.append(_ab_values(report))
            errors = [e for lvl in report.levels for b in lvl.batches for e in b.errors]
            arms.append({
                "arm": arm,
                "index": index,
                "switch": switched,
                "levels": [lvl.to_dict() for lvl in report.levels],
                "arrivals": report.arrivals,
                "errors": errors + (report.arrivals["errors"] if report.arrivals else []),
            })
            if first is None:
                first = (report.levels, report.arrivals)
    finally:
        if serving != "baseline":
            if on_progress:
                on_progress("A/B: the run stopped on the lever; switching the group back to the baseline")
            plan.switch("baseline")
    assert first is not None
    report.levels, report.arrivals = first
    return {
        "variant": plan.variant,
        "order": list(protocols.ARMS),
        "arms": arms,
        "differences": protocols.ab_differences(values),
        "difference_text": "lever against the mean of the two baseline arms; range: against either "
        "baseline arm; drift: the second baseline arm against the first",
    }


def write_report(report: BenchReport, results_dir: Path) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    report.results_dir = results_dir
    path = results_dir / "bench.json"
    path.write_text(json.dumps(report.to_dict(), indent=2))
    return path


def bench_cluster(cluster: Cluster, workloads: Sequence[str] = ("both",), **kwargs: Any) -> BenchReport:
    """``run_bench`` against an inventory's rank 0."""
    return run_bench(for_cluster(cluster), resolve(list(workloads)), profile=cluster.profile.name, **kwargs)
