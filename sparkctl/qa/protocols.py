"""bench's protocols beside the ladder, each one a comparison R4 draws:

- **the long request between two suites** (``--after-long``): R4's second repeat suite ran after its
  299K-token retrieval; bench runs the suites, then R4's needle prompt (``haystack``: the longest of
  R4's filler sizes the served context holds), then the suites again, and reports both;
- **a frozen arrival schedule** (``--arrivals FILE@SHA256``): requests sent at fixed offsets from the
  cohort's start, whatever came back before, as R4's adaptive-verification iteration ran its twelve
  tasks (``experiments/trace-02/generalization-client.py``: one excluded warm-up cohort, then three
  measured cohorts; cohort throughput = Σ completion tokens / (last finish − first start), request
  latency send → end); reported per cohort and as the mean over the measured cohorts, with request
  latency mean / median / p95 over every measured request;
- **an interleaved A/B of a profile variant** (``--ab VARIANT``): baseline, lever, baseline, the
  group brought down and up with the variant's overrides between the arms (R4 compared five against
  seven draft tokens this way); the difference of the lever from the baseline arms' mean, with the
  spread the two baseline arms leave.

The schedule format (JSON lines, one arrival per line, blank lines ignored)::

    {"at": 0.0, "workload": "coding"}
    {"at": 0.4, "workload": "mixed", "category": "summary"}
    {"at": 1.1, "prompt": "Explain TCP slow start.", "max_tokens": 300, "extra": {"ignore_eos": true}}

``at``: seconds from the cohort's start (≥ 0); a built-in ``workload`` (and a mix's ``category``)
gives the prompt, budget and request fields its publisher's client sends; else ``prompt`` and
``max_tokens`` (and optionally ``extra``, the fields sent beside them; default none). R4's own case
keys are read too: ``id`` (the label) and ``budget`` (``max_tokens``); its ``expected`` is ignored.
The file is pinned by its SHA-256, as a workload file is; ``--arrivals r4`` runs R4's own twelve
arrivals (``workloads/r4-arrivals.jsonl``, written by ``scripts/extract_workloads.py`` from R4's
pinned client; a first line ``{"source": {…}}`` names it), beside R4's published cohort figures.
Differences from R4's client: requests go through the OpenAI chat API (R4 sends token ids to
SGLang's native ``/generate``), and the exact checks of its ``expected`` answers are not made.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from sparkctl.errors import InputError
from sparkctl.qa import haystack
from sparkctl.qa import published as pub
from sparkctl.qa.request import RequestTiming, StreamClient, percentile, stream_one
from sparkctl.qa.workload import load_builtin, read_pinned

if TYPE_CHECKING:
    from sparkctl.qa import idle
    from sparkctl.qa.quiet import Windows

LONG_TAG = "bench after-long"


# ------------------------------------------------------------------------------------- long request
def long_units(context_length: int | None) -> tuple[int, bool]:
    """(filler units of the long request, whether it is one of R4's sizes): R4's longest size the
    context holds (299,000 on a 1M context), else the needle's sizes scaled to a small context."""
    sizes, published = haystack.rungs(context_length or int(haystack._spec()["served_context"]))
    return sizes[-1] if published else max(sizes), published


async def long_request(client: StreamClient, model: str, context_length: int | None,
                       windows: Windows) -> dict[str, Any]:
    """R4's needle prompt at the longest size that fits, sent once inside a timed window; its
    timing, its size and whether the server counted the prompt inside R4's window."""
    units, published = long_units(context_length)
    needle = haystack.build(units, LONG_TAG)
    windows.checkpoint("before the long request")
    with windows.timed("long request"):
        t = await stream_one(client, model, needle.prompt, haystack.MAX_TOKENS, {})
    return {
        "filler_units": units,
        "published_size": published,
        "prompt_sha256": needle.sha256,
        "prompt_tokens": t.prompt_tokens,
        "in_window": haystack.within(units, t.prompt_tokens),
        "completion_tokens": t.completion_tokens,
        "ttft_s": round(t.ttft, 4),
        "e2e_s": round(t.e2e, 4),
        "error": None if t.ok else (t.error or "incomplete response"),
    }


# ---------------------------------------------------------------------------------------- arrivals
@dataclass(frozen=True)
class Arrival:
    at: float
    prompt: str
    max_tokens: int
    extra: dict[str, Any]
    label: str


@dataclass(frozen=True)
class Schedule:
    origin: str
    sha256: str
    arrivals: tuple[Arrival, ...]
    source: dict[str, Any] | None = None  # the publisher's file it was extracted from

    def describe(self) -> dict[str, Any]:
        return {"file": self.origin, "sha256": self.sha256, "requests": len(self.arrivals),
                "span_s": round(max(a.at for a in self.arrivals), 4),
                "labels": sorted({a.label for a in self.arrivals}), "source": self.source,
                "published": list(pub.ARRIVALS_FIGURES.get(self.sha256, ()))}


def _arrival(doc: Any, where: str) -> Arrival:
    if not isinstance(doc, dict):
        raise InputError(f"{where}: an arrival is a JSON object with at and a workload or a prompt")
    at = doc.get("at")
    if isinstance(at, bool) or not isinstance(at, int | float) or at < 0:
        raise InputError(f"{where}: at must be a number of seconds ≥ 0, got {at!r}")
    if "workload" in doc:
        name = doc["workload"]
        workload = load_builtin(name) if isinstance(name, str) else None
        if workload is None:
            raise InputError(f"{where}: workload must be a built-in workload name")
        category = doc.get("category")
        if category is not None:
            found = [c for c in workload.categories if c.category == category]
            if not found:
                names = ", ".join(c.category for c in workload.categories) or "none"
                raise InputError(f"{where}: workload {name} has no category {category!r} (it has: {names})")
            prompt, budget = workload.prompts_for(1, category=found[0])[0], found[0].max_tokens
        else:
            prompt, budget = workload.prompts_for(1)[0], workload.max_tokens
        return Arrival(float(at), prompt, budget, workload.extra, f"{name}:{category}" if category else name)
    text, extra = doc.get("prompt"), doc.get("extra", {})
    tokens = doc.get("max_tokens", doc.get("budget"))
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{where}: an arrival needs a workload or a prompt (non-empty string)")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise InputError(f"{where}: max_tokens must be a positive integer, got {tokens!r}")
    if not isinstance(extra, dict):
        raise InputError(f"{where}: extra must be an object of request fields")
    return Arrival(float(at), text, tokens, dict(extra), str(doc.get("label", doc.get("id", "prompt"))))


def parse_schedule(raw: bytes, where: str) -> tuple[Arrival, ...]:
    """The arrivals of a JSON-lines schedule, in the order of their offsets."""
    return _parse(raw, where)[0]


def _parse(raw: bytes, where: str) -> tuple[tuple[Arrival, ...], dict[str, Any] | None]:
    """(the arrivals in the order of their offsets, the source line's provenance)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{where}: not UTF-8 text") from None
    out = []
    source = None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}:{n}: not JSON ({exc.msg})") from None
        if isinstance(doc, dict) and set(doc) == {"source"} and isinstance(doc["source"], dict):
            source = doc["source"]
            continue
        out.append(_arrival(doc, f"{where}:{n}"))
    if not out:
        raise InputError(f"{where}: the schedule holds no arrival")
    return tuple(sorted(out, key=lambda a: a.at)), source


BUILTIN_SCHEDULES = {"r4": "r4-arrivals.jsonl"}


def load_schedule(spec: str) -> Schedule:
    """``r4`` (R4's twelve arrivals, carried) or ``FILE@SHA256``: the schedule's bytes must hash to the
    digest, else InputError (exit 2)."""
    if spec in BUILTIN_SCHEDULES:
        raw = resources.files("sparkctl.qa").joinpath("workloads", BUILTIN_SCHEDULES[spec]).read_bytes()
        digest = hashlib.sha256(raw).hexdigest()
        if digest != pub.ARRIVALS_SHA256[spec]:
            raise InputError(f"--arrivals {spec}: the carried schedule hashes to {digest}, not the pinned "
                             f"{pub.ARRIVALS_SHA256[spec]}", hint="reinstall sparkctl")
        arrivals, source = _parse(raw, f"built-in schedule {spec}")
        return Schedule(f"built-in {spec}", digest, arrivals, source)
    path, raw, actual = read_pinned(spec, "--arrivals", "schedule", "schedule.jsonl")
    arrivals, source = _parse(raw, f"--arrivals {path}")
    return Schedule(str(path), actual, arrivals, source)


def _spread(values: Sequence[float]) -> dict[str, Any] | None:
    if not values:
        return None
    return {"mean": round(statistics.fmean(values), 4), "median": round(statistics.median(values), 4),
            "p95": round(percentile(values, 95), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "n": len(values)}


@dataclass
class Cohort:
    """One run of the whole schedule: each arrival's timing and how late it was sent."""

    timings: list[RequestTiming]
    lateness: list[float]

    @property
    def ok(self) -> list[RequestTiming]:
        return [t for t in self.timings if t.ok]

    @property
    def wall(self) -> float:
        return max(t.done for t in self.timings) - min(t.sent for t in self.timings) if self.timings else 0.0

    @property
    def tokens(self) -> int:
        return sum(t.completion_tokens for t in self.ok)

    @property
    def throughput(self) -> float | None:
        return self.tokens / self.wall if self.wall > 0 else None

    @property
    def errors(self) -> list[str]:
        return [t.error or "incomplete response" for t in self.timings if not t.ok]

    def summary(self, trial: int) -> dict[str, Any]:
        latency = [t.e2e for t in self.ok]
        return {"trial": trial, "completed": len(self.ok), "failed": len(self.timings) - len(self.ok),
                "wall_s": round(self.wall, 4), "completion_tokens": self.tokens,
                "throughput_tps": round(self.throughput, 3) if self.throughput else None,
                "mean_latency_s": round(statistics.fmean(latency), 4) if latency else None,
                "median_latency_s": round(statistics.median(latency), 4) if latency else None,
                "send_late_s_max": round(max(self.lateness), 4) if self.lateness else None,
                "latency_s": [round(t.e2e, 4) for t in self.timings]}


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(statistics.fmean(kept), 4) if kept else None


def schedule_result(schedule: Schedule, cohorts: Sequence[Cohort], warmup: Cohort | None = None
                    ) -> dict[str, Any]:
    """The measured cohorts as R4 reports them: cohort throughput (Σ completion tokens / (last
    response done − first request sent)) and mean/median request latency, each the mean over the
    cohorts; request latency (send → last byte) mean / median / p95 over every measured request;
    every failure named (a warm-up's too)."""
    measured = [t for c in cohorts for t in c.ok]
    trials = [c.summary(n) for n, c in enumerate(cohorts, start=1)]
    errors = [e for c in ([warmup] if warmup else []) + list(cohorts) for e in c.errors]
    late = [t["send_late_s_max"] for t in trials if t["send_late_s_max"] is not None]
    return {
        **schedule.describe(),
        "cohorts": len(cohorts),
        "excluded_warmup_cohort": warmup.summary(0) if warmup else None,
        "completed": len(measured),
        "failed": sum(len(c.timings) - len(c.ok) for c in cohorts),
        "wall_s": _mean([c.wall for c in cohorts]),
        "completion_tokens": sum(c.tokens for c in cohorts),
        "throughput_tps": _mean([c.throughput for c in cohorts]),
        "median_latency_mean_of_cohorts_s": _mean([t["median_latency_s"] for t in trials]),
        "latency_s": _spread([t.e2e for t in measured]),
        "ttft_s": _spread([t.ttft for t in measured]),
        "send_late_s_max": max(late) if late else None,
        "trials": trials,
        "errors": errors,
    }


async def run_cohort(client: StreamClient, model: str, schedule: Schedule) -> Cohort:
    """Every arrival sent at its offset from one start (an open loop: a slow answer delays no later
    send)."""
    lateness: list[float] = []

    async def one(arrival: Arrival, start: float) -> RequestTiming:
        delay = start + arrival.at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lateness.append(max(0.0, time.perf_counter() - start - arrival.at))
        return await stream_one(client, model, arrival.prompt, arrival.max_tokens, arrival.extra)

    start = time.perf_counter()
    timings = await asyncio.gather(*(one(a, start) for a in schedule.arrivals))
    return Cohort(list(timings), lateness)


async def run_schedule(client: StreamClient, model: str, schedule: Schedule, windows: Windows,
                       cohorts: int = 3, warmup: bool = True) -> dict[str, Any]:
    """R4's protocol: one excluded warm-up cohort (unless ``warmup`` is off), then ``cohorts``
    measured ones, each inside its own timed window, the GPUs read only between them."""
    first = None
    if warmup:
        windows.checkpoint("before the warm-up cohort")
        with windows.timed("arrivals warm-up"):
            first = await run_cohort(client, model, schedule)
    measured = []
    for n in range(1, cohorts + 1):
        windows.checkpoint(f"before cohort {n}")
        with windows.timed(f"arrivals cohort {n}"):
            measured.append(await run_cohort(client, model, schedule))
    return schedule_result(schedule, measured, first)


# --------------------------------------------------------------------------------------------- A/B
ARMS = ("baseline", "lever", "baseline")


@dataclass
class ABPlan:
    """An interleaved A/B: ``variant`` describes the lever (name, file, digest, overrides);
    ``switch(arm)`` brings the group down and up serving the lever (``"lever"``) or the baseline
    (``"baseline"``) and returns its record; ``server_check(arm)`` the /server_info comparison the
    arm's suites make (None: none)."""

    variant: dict[str, Any]
    switch: Callable[[str], Mapping[str, Any]]
    server_check: Callable[[str], idle.ServerCheck | None] = field(default=lambda arm: None)


def _pct(new: float, old: float) -> float | None:
    return round(100.0 * (new / old - 1.0), 2) if old else None


def ab_differences(arms: Sequence[Mapping[str, float | None]]) -> list[dict[str, Any]]:
    """Per measured value (``"coding C1"``, ``"arrivals throughput"`` …), the lever against the mean of
    the two baseline arms: the difference in per cent, its range against either baseline arm, and the
    drift between the baseline arms (the spread any difference has to clear)."""
    first, lever, last = arms
    out = []
    for key in first:
        b1, lv, b2 = first.get(key), lever.get(key), last.get(key)
        if b1 is None or lv is None or b2 is None:
            out.append({"value": key, "baseline": [b1, b2], "lever": lv, "difference_pct": None,
                        "note": "an arm has no measurement"})
            continue
        base = (b1 + b2) / 2
        lows = sorted(p for p in (_pct(lv, b1), _pct(lv, b2)) if p is not None)
        out.append({
            "value": key,
            "baseline": [round(b1, 3), round(b2, 3)],
            "baseline_mean": round(base, 3),
            "lever": round(lv, 3),
            "difference_pct": _pct(lv, base),
            "difference_range_pct": [lows[0], lows[-1]] if lows else None,
            "baseline_drift_pct": _pct(b2, b1),
            "clears_drift": bool(lows) and abs(_pct(lv, base) or 0.0) > abs(_pct(b2, b1) or 0.0),
        })
    return out


# ------------------------------------------------------------------------------------------- schema
_NUM = {"type": ["number", "null"]}
_SPREAD = {"type": ["object", "null"], "required": ["mean", "median", "p95", "min", "max", "n"],
           "properties": {k: {"type": "number"} for k in ("mean", "median", "p95", "min", "max")}}
ARRIVALS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["file", "sha256", "requests", "cohorts", "excluded_warmup_cohort", "completed", "failed",
                 "wall_s", "completion_tokens", "throughput_tps", "median_latency_mean_of_cohorts_s",
                 "latency_s", "ttft_s", "send_late_s_max", "trials", "errors"],
    "properties": {
        "sha256": {"type": "string", "minLength": 64, "maxLength": 64},
        "requests": {"type": "integer", "minimum": 1},
        "completed": {"type": "integer"}, "failed": {"type": "integer"},
        "throughput_tps": _NUM, "latency_s": _SPREAD, "ttft_s": _SPREAD,
        "trials": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["trial", "throughput_tps", "mean_latency_s", "median_latency_s"]}},
        "errors": {"type": "array", "items": {"type": "string"}},
    },
}
# bench.json's "protocols" block (BenchReport.protocols): each protocol null when not run.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["after_long", "arrivals", "ab"],
    "additionalProperties": False,
    "properties": {
        "after_long": {
            "type": ["object", "null"],
            "required": ["long_request", "levels"],
            "properties": {
                "long_request": {
                    "type": "object",
                    "required": ["filler_units", "published_size", "prompt_sha256", "prompt_tokens",
                                 "in_window", "completion_tokens", "ttft_s", "e2e_s", "error"],
                    "properties": {"filler_units": {"type": "integer", "minimum": 1},
                                   "in_window": {"type": "boolean"}, "error": {"type": ["string", "null"]}},
                },
                "levels": {"type": "array", "items": {"type": "object", "required": ["suite", "headline_tps"],
                                                      "properties": {"suite": {"const": 2}}}},
            },
        },
        "arrivals": {"type": ["object", "null"], **{k: v for k, v in ARRIVALS_SCHEMA.items() if k != "type"}},
        "ab": {
            "type": ["object", "null"],
            "required": ["variant", "order", "arms", "differences"],
            "properties": {
                "order": {"type": "array", "items": {"enum": ["baseline", "lever"]}, "minItems": 3,
                          "maxItems": 3},
                "arms": {"type": "array", "minItems": 3, "maxItems": 3, "items": {
                    "type": "object",
                    "required": ["arm", "index", "switch", "levels", "arrivals", "errors"]}},
                "differences": {"type": "array", "items": {
                    "type": "object", "required": ["value", "baseline", "lever", "difference_pct"],
                    "properties": {"difference_pct": _NUM, "lever": _NUM}}},
            },
        },
    },
}


__all__ = [
    "ARMS",
    "SCHEMA",
    "ABPlan",
    "Arrival",
    "Cohort",
    "Schedule",
    "ab_differences",
    "load_schedule",
    "long_request",
    "parse_schedule",
    "run_cohort",
    "run_schedule",
    "schedule_result",
]
