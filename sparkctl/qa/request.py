"""One streamed chat request and its timing: the record (``RequestTiming``), the call that measures
it (``stream_one``) and the statistics every report quotes. The ladder (``bench``) and the prefill
sweep (``prefill``) both measure with these, so neither imports the other for them.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openai import AsyncOpenAI


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


def stats(values: Sequence[float], digits: int = 3) -> dict[str, Any]:
    """mean (what the publications quote), min/median/max, and every sample in measured order."""
    if not values:
        raise ValueError("statistics of no values")
    return {
        "mean": round(statistics.fmean(values), digits),
        "min": round(min(values), digits),
        "median": round(statistics.median(values), digits),
        "max": round(max(values), digits),
        "n": len(values),
        "samples": [round(v, digits) for v in values],
    }


@dataclass
class RequestTiming:
    """One streamed request, times from ``time.perf_counter``."""

    sent: float
    first_token: float | None
    done: float
    completion_tokens: int
    prompt_tokens: int
    error: str | None = None
    last_token: float | None = None  # the last chunk that carried content (sparkDash's window end)

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
    def last(self) -> float:
        return self.last_token if self.last_token is not None else self.done

    @property
    def decode_tps(self) -> float:
        """(completion_tokens − 1) / (end − first token): the first token belongs to prefill."""
        window = self.done - (self.first_token or self.done)
        return (self.completion_tokens - 1) / window if window > 0 and self.completion_tokens > 1 else 0.0


# ------------------------------------------------------------------------------------------ running
async def stream_one(client: AsyncOpenAI, model: str, prompt: str, max_tokens: int) -> RequestTiming:
    """Send one streamed chat request for ``max_tokens`` tokens (EOS ignored) and time it."""
    sent = time.perf_counter()
    first: float | None = None
    last: float | None = None
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
            if chunk.choices:
                delta = chunk.choices[0].delta
                extra = getattr(delta, "model_extra", None) or {}
                if delta.content or extra.get("reasoning_content"):
                    last = time.perf_counter()
                    if first is None:
                        first = last
            if chunk.usage is not None:
                completion = chunk.usage.completion_tokens
                prompt_tokens = chunk.usage.prompt_tokens
    except Exception as exc:
        return RequestTiming(
            sent, first, time.perf_counter(), completion, prompt_tokens, f"{type(exc).__name__}: {exc}", last
        )
    done = time.perf_counter()
    error = None
    if first is None:
        error = "no content was streamed"
    elif completion == 0:
        error = "the stream carried no usage block (stream_options.include_usage)"
    return RequestTiming(sent, first, done, completion, prompt_tokens, error, last)


__all__ = ["RequestTiming", "percentile", "stats", "stream_one"]
