"""Needle-in-a-haystack prompts: pinned-seed filler, three planted records, sized by the served tokenizer.

The prompt follows the published long-context probe: an instruction, ``RECORD alpha=…`` near the start,
``RECORD beta=…`` in the middle, ``RECORD gamma=…`` at the end, and a request for the three values as
JSON. The filler is ordinary words drawn from a fixed vocabulary by a seeded generator, so the same
(seed, size) always gives the same bytes, and the evidence can be regenerated instead of stored.

Sizing never guesses the tokenizer: short calibration prompts are sent first and the server's own
``usage.prompt_tokens`` gives tokens per filler word (a straight-line fit); every later answer feeds
its count back into the fit.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

DEFAULT_SEED = 20260912

_WORDS = (
    "the of and to in is was for on that with as by at from his her they were are which this be had "
    "not or have one all their an there been has when who will more no if out so said what up its "
    "about into than them can only other new some could time these two may then do first any my now "
    "such like our over man me even most made after also did many before must through back years "
    "where much your way well down should because each just those people how too little state good "
    "very make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right used "
    "take three small river garden window market winter harbour village mountain letter table field "
    "morning evening lantern bridge station kitchen orchard meadow valley forest island quiet gentle "
    "bright careful distant narrow ancient simple steady patient silver golden wooden stone paper"
)
_VOCABULARY = _WORDS.split()

INSTRUCTION = (
    "Three records, named alpha, beta and gamma, are hidden in the text below. "
    "Read all of the text carefully."
)
QUESTION = "Return the three recorded values as a JSON object with string values."
KEYS = ("alpha", "beta", "gamma")


@dataclass(frozen=True)
class Haystack:
    """One needle prompt and its expected answer."""

    words: int
    seed: int
    prompt: str
    expected: dict[str, str]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.prompt.encode()).hexdigest()


def filler(rng: random.Random, words: int) -> str:
    """``words`` words of filler as sentences of 6–14 words."""
    out: list[str] = []
    left = words
    while left > 0:
        n = min(left, rng.randint(6, 14))
        sentence = [rng.choice(_VOCABULARY) for _ in range(n)]
        sentence[0] = sentence[0].capitalize()
        out.append(" ".join(sentence) + ".")
        left -= n
    return " ".join(out)


def build(words: int, seed: int = DEFAULT_SEED, label: str = "") -> Haystack:
    """A haystack of ``words`` filler words with alpha/beta/gamma records at the start, middle and end."""
    if words < 0:
        raise ValueError("words must be >= 0")
    rng = random.Random(seed * 1_000_003 + words)
    expected = {key: f"{rng.randrange(10**7, 10**8)}" for key in KEYS}
    first = words // 2
    tag = f"[needle {label} size={words}]" if label else f"[needle size={words}]"
    parts = [
        tag,
        INSTRUCTION,
        f"RECORD alpha={expected['alpha']}.",
        filler(rng, first),
        f"RECORD beta={expected['beta']}.",
        filler(rng, words - first),
        f"RECORD gamma={expected['gamma']}.",
        QUESTION,
    ]
    return Haystack(words=words, seed=seed, prompt=" ".join(p for p in parts if p), expected=expected)


@dataclass
class TokenFit:
    """prompt_tokens ≈ intercept + slope × words, fitted from the server's own counts."""

    samples: list[tuple[int, int]] = field(default_factory=list)

    def add(self, words: int, prompt_tokens: int) -> None:
        self.samples.append((words, prompt_tokens))

    def coefficients(self) -> tuple[float, float]:
        """(slope, intercept) by least squares; needs two distinct word counts."""
        xs = [float(w) for w, _ in self.samples]
        ys = [float(t) for _, t in self.samples]
        if len(set(xs)) < 2:
            raise ValueError("need samples at two different sizes to fit tokens per word")
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
        slope = sxy / sxx
        if slope <= 0:
            raise ValueError("token count did not grow with the filler; the server's usage is not usable")
        return slope, my - slope * mx

    def words_for(self, target_tokens: int) -> int:
        """Filler words expected to give ``target_tokens`` prompt tokens.

        The nearest measured sample anchors the estimate (local correction), the fitted slope scales it.
        """
        slope, intercept = self.coefficients()
        near_words, near_tokens = min(self.samples, key=lambda s: abs(s[1] - target_tokens))
        if near_tokens > 0 and abs(near_tokens - target_tokens) < 0.05 * target_tokens:
            return max(0, round(near_words + (target_tokens - near_tokens) / slope))
        return max(0, round((target_tokens - intercept) / slope))


# R4's long-context probe accepts a rung when ``size − 64 ≤ prompt_tokens ≤ size + 768``: the filler is
# sized in units, and the template, instruction and records add a few hundred tokens on top.
BELOW = 64
ABOVE = 768
# Where sizing aims inside that window: its middle, so a small misfit either way still counts.
AIM_ABOVE = (ABOVE - BELOW) // 2


def window(target_tokens: int) -> tuple[int, int]:
    """The prompt sizes that count as the ``target_tokens`` rung (R4: −64/+768 tokens)."""
    return target_tokens - BELOW, target_tokens + ABOVE


def within(target_tokens: int, prompt_tokens: int) -> bool:
    low, high = window(target_tokens)
    return low <= prompt_tokens <= high


def ladder(context_length: int, published: list[int] | None = None, reserve: int = 1024) -> list[int]:
    """Token targets for the needle ladder, each leaving ``reserve`` tokens for the answer and template.

    ``published`` rungs (a profile's measured points) are used when they fit the context; without them
    the ladder is three points scaled to the context: about 1/32, 1/8 and 3/10 of it (the published
    R4 shape: 32,870 / 131,174 / 299,102 of 1M), then the context itself.
    """
    limit = context_length - reserve
    if limit <= 0:
        raise ValueError(f"context length {context_length} leaves no room for a needle prompt")
    if published:
        points = sorted({min(int(p), limit) for p in published if int(p) > 0})
    else:
        points = sorted({max(256, int(context_length * f)) for f in (1 / 32, 1 / 8, 3 / 10)} | {limit})
    return [p for p in points if p <= limit]
