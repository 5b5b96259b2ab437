"""Long-context prompts: R4's published needle probe, and seeded filler for sizing other prompts.

**The needle** is R4's retrieval probe (``validation/long-context.py``, whose prompts reproduce R4's
published ``prompt_sha256`` at every size; ``sparkctl/qa/probes/r4.json`` holds each piece with its
source): a ``[long-context <tag> size=<units>]`` line, the publisher's instruction, ``RECORD alpha=…``,
``units // 2`` filler units of ``" the"``, ``RECORD beta=…``, the remaining units, ``RECORD gamma=…``
and the publisher's question, one per line. The three eight-digit values come from
``random.Random(units + 41)``, as published, so a size always has the same answer; the tag makes each
run's prefix unique (no prefix-cache reuse across runs). R4 ran 32,768 / 131,072 / 299,000 filler
units; a rung passes on the exact answer with ``units − 64 ≤ prompt_tokens ≤ units + 768`` (the
server's own count) and room for the 256-token answer.

**Filler** (``filler``, ``TokenFit``) is ordinary words from a fixed vocabulary drawn by a seeded
generator, sized against the server's own ``usage.prompt_tokens`` by a straight-line fit; the prefill
sweep uses it. The needle does not: its sizes are the publisher's filler units.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

from sparkctl.qa import probedata

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




# ------------------------------------------------------------------------------- R4's needle probe
def _spec() -> dict[str, Any]:
    spec: dict[str, Any] = probedata.r4()["needle"]
    return spec


FILLER_UNIT: str = _spec()["filler_unit"]
KEYS: tuple[str, ...] = tuple(_spec()["keys"])
PUBLISHED_SIZES: tuple[int, ...] = tuple(int(n) for n in _spec()["sizes"])
# A rung counts when ``units − BELOW ≤ prompt_tokens ≤ units + ABOVE`` (R4's window): the template,
# instruction and records add about a hundred tokens to the filler units.
BELOW: int = int(_spec()["below"])
ABOVE: int = int(_spec()["above"])
MAX_TOKENS: int = int(_spec()["max_tokens"])


@dataclass(frozen=True)
class Needle:
    """One needle prompt and its expected answer."""

    units: int  # filler units of " the"
    tag: str
    prompt: str
    expected: dict[str, str]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.prompt.encode()).hexdigest()


def expected(units: int) -> dict[str, str]:
    """The three recorded values at ``units`` (R4: ``random.Random(units + 41)``, eight digits each)."""
    spec = _spec()
    rng = random.Random(units + int(spec["seed_offset"]))
    return {key: str(rng.randrange(int(spec["value_low"]), int(spec["value_high"]))) for key in KEYS}


def build(units: int, tag: str) -> Needle:
    """R4's long-context prompt at ``units`` filler units, with ``tag`` in its first line."""
    if units < 0:
        raise ValueError("units must be >= 0")
    if "\n" in tag or "]" in tag:
        raise ValueError(f"needle tag {tag!r} may not hold a newline or ']'")
    spec = _spec()
    values = expected(units)
    first = units // 2
    lines = [
        spec["head"].format(tag=tag, size=units),
        spec["instruction"],
        f"RECORD {KEYS[0]}={values[KEYS[0]]}",
        FILLER_UNIT * first,
        f"RECORD {KEYS[1]}={values[KEYS[1]]}",
        FILLER_UNIT * (units - first),
        f"RECORD {KEYS[2]}={values[KEYS[2]]}",
        spec["question"],
    ]
    prompt = "\n".join(lines)  # one piece per line; the filler lines start with their blank
    return Needle(units=units, tag=tag, prompt=prompt, expected=values)


def window(units: int) -> tuple[int, int]:
    """The prompt sizes that count for a rung of ``units`` filler units (R4: −64/+768 tokens)."""
    return units - BELOW, units + ABOVE


def within(units: int, prompt_tokens: int) -> bool:
    low, high = window(units)
    return low <= prompt_tokens <= high


@dataclass(frozen=True)
class Verdict:
    """A rung judged as R4 judges it."""

    found: bool  # the answer equals the expected records exactly
    sized: bool  # prompt_tokens inside the −64/+768 window
    fits: bool  # prompt_tokens + the answer budget within the served context
    passed: bool


def judge(
    units: int, answer: dict[str, Any] | None, prompt_tokens: int, context_length: int | None
) -> Verdict:
    """R4's rung verdict: exact answer, prompt tokens in the window, and room for the 256-token answer.

    R4's script checks ``prompt_tokens + 256 <= 300,000`` (the context its engine served); sparkctl
    checks against the served context length when the server reports one, else R4's figure.
    """
    budget = context_length if context_length else int(_spec()["context_budget"])
    found = answer == expected(units)
    sized = within(units, prompt_tokens)
    fits = prompt_tokens + MAX_TOKENS <= budget
    return Verdict(found, sized, fits, found and sized and fits)


def rungs(context_length: int, longer: list[int] | None = None) -> tuple[list[int], bool]:
    """(filler-unit sizes for this context, whether they are R4's published sizes).

    R4's sizes are used where they fit (``units + 768 + 256 ≤ context``). A profile's published needle
    longer than R4's longest prompt (``longer``, e.g. M1's 1,000,000) is added as filler units when it
    fits too. When none of
    R4's sizes fits (a small lab context), the three sizes are scaled by context / R4's served context
    (1,000,000) and reported as scaled, never as R4's.
    """
    def fits(units: int) -> bool:
        return units + ABOVE + MAX_TOKENS <= context_length

    published = [n for n in PUBLISHED_SIZES if fits(n)]
    if published:
        beyond = max(int(c["prompt_tokens"]) for c in _spec()["published"]["cases"])
        extra = sorted({int(n) for n in longer or () if int(n) > beyond and fits(int(n))})
        return published + extra, True
    served = int(_spec()["served_context"])
    scaled = sorted({max(16, round(n * context_length / served)) for n in PUBLISHED_SIZES})
    scaled = [n for n in scaled if fits(n)]
    if not scaled:
        raise ValueError(f"context length {context_length} leaves no room for a needle prompt")
    return scaled, False
