"""The prefill sweep: cold prompts of 4K, 16K, 32K, 64K and 128K tokens, ``prompt_tokens / TTFT`` each.

As sparkDash measures it (M1's figures): a 512-token warm-up prefill first (excluded), then one
request per size with a fresh prefix (a random tag at the front, so no cached prefix is reused),
an 8-token budget and thinking off. Prompts are seeded filler words (``haystack.filler``) sized with
the server's own token counts: two short calibration prompts fit tokens per word.

Sizes larger than the served context are **clamped** to ``context − reserve`` and say so; a size
that clamps onto a point already measured is reported as skipped, not measured twice.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkctl.errors import InputError
from sparkctl.qa import haystack
from sparkctl.qa import published as pub
from sparkctl.qa.endpoint import Endpoint
from sparkctl.qa.quiet import Windows
from sparkctl.qa.request import RequestTiming, StreamClient, stats, stream_client, stream_one

BUDGET = 8  # completion tokens per prefill request (sparkDash)
RESERVE = 1024  # tokens kept free under the context for the template and the answer
WARMUP_TOKENS = 512
SEED = 20260914
QUESTION = "Reply with the single word OK."
TIMEOUT_S = 1800.0


def parse_sizes(text: str) -> list[int]:
    """``"4K,16K,32768"`` → token targets; ``none`` → []; K means 1,024 as M1 names its sizes."""
    if text.strip().lower() in ("", "none", "off"):
        return []
    out: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        label = part.upper()
        try:
            value = pub.PREFILL_SIZES.get(label) or (
                int(label[:-1]) * 1024 if label.endswith("K") else int(label)
            )
        except ValueError:
            value = 0
        if value < 16:
            raise InputError(
                f"--prefill {text!r}: {part!r} is not a prompt size", hint="e.g. --prefill 4K,16K,32K"
            )
        out.append(value)
    return sorted(set(out))


def _label(tokens: int) -> str:
    named = {v: k for k, v in pub.PREFILL_SIZES.items()}
    return named.get(tokens, f"{tokens / 1024:g}K" if tokens % 1024 == 0 else str(tokens))


@dataclass
class PrefillPoint:
    size: str
    target: int  # tokens asked for
    aimed: int  # tokens aimed at after clamping to the served context
    clamped: str | None = None
    skipped: str | None = None
    words: int = 0
    timing: RequestTiming | None = None

    @property
    def tps(self) -> float | None:
        t = self.timing
        if t is None or not t.ok or t.ttft <= 0:
            return None
        return t.prompt_tokens / t.ttft

    @property
    def published(self) -> list[pub.Figure]:
        t = self.timing
        return pub.matching_prefill(t.prompt_tokens) if t is not None and t.ok else []

    def to_dict(self) -> dict[str, Any]:
        t = self.timing
        tps = self.tps
        return {
            "size": self.size,
            "target_tokens": self.target,
            "aimed_tokens": self.aimed,
            "clamped": self.clamped,
            "skipped": self.skipped,
            "words": self.words,
            "prompt_tokens": t.prompt_tokens if t else None,
            "ttft_s": round(t.ttft, 4) if t else None,
            "prefill_tps": stats([tps]) if tps is not None else None,
            "error": t.error if t else None,
            "published": [
                {**f.to_dict(), "ratio": round(tps / f.value, 4) if tps is not None else None}
                for f in self.published
            ],
        }


@dataclass
class PrefillResult:
    context_length: int | None
    points: list[PrefillPoint] = field(default_factory=list)
    calibration: list[tuple[int, int]] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [p.timing.error for p in self.points if p.timing and p.timing.error]

    def to_dict(self) -> dict[str, Any]:
        return {
            "definition": "prefill",
            "definition_text": pub.DEFINITIONS["prefill"],
            "served_context_length": self.context_length,
            "reserve_tokens": RESERVE,
            "samples_per_size": 1,
            "warmup": f"one {WARMUP_TOKENS}-token prefill, excluded (sparkDash)",
            "calibration": self.calibration,
            "points": [p.to_dict() for p in self.points],
        }


def plan(sizes: Sequence[int], context_length: int | None) -> list[PrefillPoint]:
    """One point per size; sizes over ``context − RESERVE`` are clamped, duplicates skipped."""
    limit = (context_length - RESERVE) if context_length else None
    points: list[PrefillPoint] = []
    seen: dict[int, str] = {}
    for target in sorted(sizes):
        aimed, clamped = target, None
        if limit is not None and target > limit:
            aimed = limit
            clamped = f"clamped from {target:,} to {limit:,} tokens (served context {context_length:,})"
        point = PrefillPoint(_label(target), target, aimed, clamped)
        if aimed in seen:
            point.skipped = f"clamps onto the {seen[aimed]} point already measured"
        else:
            seen[aimed] = point.size
        points.append(point)
    return points


def _prompt(words: int, rng: random.Random) -> str:
    return f"[prefill {secrets.token_hex(8)}] {haystack.filler(rng, words)} {QUESTION}"


@dataclass
class ColdPrefill:
    """Cold prefills of given sizes one after another (sparkDash's per-trial prefills): a fresh
    prefix each, the filler sized from the server's count of the previous one."""

    rng: random.Random = field(default_factory=lambda: random.Random(SEED))
    words_per_token: float = 0.5

    async def send(self, client: StreamClient, model: str, tokens: int, max_tokens: int = BUDGET,
                   extra: Mapping[str, Any] | None = None) -> RequestTiming:
        words = max(1, round(tokens * self.words_per_token))
        timing = await stream_one(client, model, _prompt(words, self.rng), max_tokens, extra)
        if timing.ok and timing.prompt_tokens:
            self.words_per_token = words / timing.prompt_tokens
        return timing


async def _sweep(
    endpoint: Endpoint, result: PrefillResult, say: Callable[[str], None], windows: Windows
) -> None:
    client = stream_client(endpoint, TIMEOUT_S)
    rng = random.Random(SEED)

    async def timed(prompt: str, budget: int) -> RequestTiming:
        with windows.timed("prefill"):
            return await stream_one(client, endpoint.model, prompt, budget)

    try:
        say("prefill warm-up")
        windows.checkpoint("before the prefill sweep", force=True)
        await timed(_prompt(WARMUP_TOKENS // 2, rng), BUDGET)
        fit = haystack.TokenFit()
        for words in (200, 1600):
            t = await timed(_prompt(words, rng), 1)
            if t.error or not t.prompt_tokens:
                for point in result.points:  # nothing can be sized: every point fails with the reason
                    if not point.skipped:
                        point.timing = RequestTiming(
                            t.sent, None, t.done, 0, 0, f"calibration failed: {t.error or 'no usage'}"
                        )
                return
            fit.add(words, t.prompt_tokens)
        result.calibration = list(fit.samples)
        for point in result.points:
            if point.skipped:
                continue
            say(f"prefill {point.size}")
            point.words = fit.words_for(point.aimed)
            windows.checkpoint(f"before prefill {point.size}")
            point.timing = await timed(_prompt(point.words, rng), BUDGET)
            if point.timing.ok:
                fit.add(point.words, point.timing.prompt_tokens)
    finally:
        await client.close()


def run_prefill(
    endpoint: Endpoint, sizes: Sequence[int], on_progress: Callable[[str], None] | None = None,
    windows: Windows | None = None,
) -> PrefillResult:
    """The sweep; every request inside a timed window of ``windows`` (no GPU query meanwhile)."""
    result = PrefillResult(endpoint.context_length, plan(sizes, endpoint.context_length))
    asyncio.run(_sweep(endpoint, result, on_progress or (lambda _text: None), windows or Windows()))
    return result
