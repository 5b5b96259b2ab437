"""The published figures sparkctl's bench is compared with: R4's two repeat suites and M1's sparkDash
ladder and prefill sweep, each with its source, definition and (where published) TTFT and range.

Both publications are compared whatever profile is served: a figure is shown beside a measured level
when the *workload* matches (same kind, same completion length, same concurrency; for prefill, a
prompt within 10 % of the published prompt's length), never because of the profile's name. The
profiles' own ``published:`` sections (needle rungs, the headline ladder) must agree with this table;
a unit test pins that.

Sources (quoted, not derived):

- **R4**: rhys101/DeepSeek-V4.1-Flash-SGLang-DGX-Spark-4-NVMe, ``docs/results.md`` and
  ``results/measurement-summary.json`` (12 Sep 2026). Suite 1 = the first repeat suite, suite 2 = the
  repeat after the 299K-token retrieval. Five C1 coding samples, three C4/C8 coding waves and three
  prose waves per concurrency; figures are means. Coding: the 200-token community workload;
  prose: the pinned 256-token sparkDash workload.
- **M1**: MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks ``README.md`` at e0985205 (four-rank profile,
  switched fabric, sparkDash prose 256 tokens; C16 measured with ``MAX_RUNNING_REQUESTS=16``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkctl.profiles import Profile

# The built-in bench workloads (sparkctl/qa/workloads/<name>.json); their names are also their kinds.
WORKLOADS = ("coding", "prose")
KINDS = ("coding", "prose")

# Timing definitions; every measured level records the one it used. They must not be mixed.
DEFINITIONS: dict[str, str] = {
    "decode-per-stream": "(completion_tokens − 1) / (done − first content token), tokens from usage",
    "batch": "Σ completion_tokens / (last response done − first request sent): the whole batch, "
    "prefill and TTFT included (R4's coding aggregate)",
    "post-first-token": "Σ (completion_tokens − 1) / (latest last content token − earliest first content "
    "token) (sparkDash's aggregate, R4's and M1's prose)",
    "prefill": "prompt_tokens / TTFT of one cold request (fresh prefix, 8-token budget)",
}


def definition_for(kind: str, concurrency: int) -> str:
    """The published definition of a headline: coding C1 decode per stream, coding C>1 the batch
    aggregate; prose (sparkDash) the post-first-token aggregate at every level (per stream at C1)."""
    if kind == "coding":
        return "decode-per-stream" if concurrency == 1 else "batch"
    if kind == "prose":
        return "post-first-token"
    raise ValueError(f"unknown workload kind {kind!r}")


@dataclass(frozen=True)
class Source:
    key: str
    label: str  # what tables and plots print
    citation: str
    date: str


SOURCES: dict[str, Source] = {
    "r4-s1": Source(
        "r4-s1",
        "R4 suite 1",
        "rhys101/DeepSeek-V4.1-Flash-SGLang-DGX-Spark-4-NVMe docs/results.md, first repeat suite",
        "2026-09-12",
    ),
    "r4-s2": Source(
        "r4-s2",
        "R4 suite 2",
        "rhys101/DeepSeek-V4.1-Flash-SGLang-DGX-Spark-4-NVMe docs/results.md, repeat after 299K input",
        "2026-09-12",
    ),
    "m1": Source(
        "m1",
        "M1",
        "MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks README.md at e0985205 (TP4, switched fabric)",
        "2026-09-14",
    ),
}

# Which publication a profile reproduces (its figures are marked as "this profile's" in tables).
PROFILE_SOURCES: dict[str, tuple[str, ...]] = {"r4-nvme": ("r4-s1", "r4-s2"), "m1-1m": ("m1",)}


@dataclass(frozen=True)
class Figure:
    """One published number and everything needed to decide whether a measurement compares to it."""

    source: str  # key of SOURCES
    kind: str  # coding | prose | prefill
    value: float  # tok/s under `definition`
    definition: str
    concurrency: int = 1
    max_tokens: int = 0  # completion length of the workload (0 for prefill)
    ttft_s: float | None = None
    low: float | None = None  # published range of the samples, when given
    high: float | None = None
    prompt_tokens: int | None = None  # prefill: the published prompt's length
    size: str | None = None  # prefill: the published size label (4K … 128K)
    note: str | None = None

    @property
    def label(self) -> str:
        return SOURCES[self.source].label

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source,
            "label": self.label,
            "citation": SOURCES[self.source].citation,
            "value": self.value,
            "definition": self.definition,
        }
        for key in ("ttft_s", "low", "high", "prompt_tokens", "size", "note"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


def _coding(
    source: str, c: int, value: float, ttft: float, low: float | None = None, high: float | None = None
) -> Figure:
    return Figure(source, "coding", value, definition_for("coding", c), c, 200, ttft, low, high)


def _prose(source: str, c: int, value: float, ttft: float | None = None, note: str | None = None) -> Figure:
    return Figure(source, "prose", value, "post-first-token", c, 256, ttft, note=note)


def _prefill(size: str, prompt_tokens: int, ttft: float, value: float) -> Figure:
    return Figure("m1", "prefill", value, "prefill", 1, 0, ttft, prompt_tokens=prompt_tokens, size=size)


FIGURES: tuple[Figure, ...] = (
    # R4 coding, 200 tokens (C1: decode per stream, 5 samples; C4/C8: batch aggregate, 3 waves).
    _coding("r4-s1", 1, 82.71, 0.225, 82.44, 82.89),
    _coding("r4-s1", 4, 202.38, 0.292),
    _coding("r4-s1", 8, 335.47, 0.315),
    _coding("r4-s2", 1, 82.73, 0.238, 82.53, 82.87),
    _coding("r4-s2", 4, 211.81, 0.274),
    _coding("r4-s2", 8, 340.41, 0.326),
    # R4 prose, sparkDash 256 tokens, 3 waves per level (no TTFT published for prose).
    _prose("r4-s1", 1, 52.61),
    _prose("r4-s1", 4, 117.02),
    _prose("r4-s1", 8, 162.49),
    _prose("r4-s2", 1, 52.62),
    _prose("r4-s2", 4, 116.91),
    _prose("r4-s2", 8, 162.18),
    # M1 prose, sparkDash 256 tokens.
    _prose("m1", 1, 45.4, 0.212),
    _prose("m1", 2, 72.9, 0.232),
    _prose("m1", 4, 103.1, 0.270),
    _prose("m1", 8, 114.1, 2.70),
    _prose("m1", 16, 134.2, 12.45, note="measured with MAX_RUNNING_REQUESTS=16 (the profile serves 8)"),
    # M1 cold prefill, 4K–128K prompts.
    _prefill("4K", 4_118, 1.23, 3_350.0),
    _prefill("16K", 16_400, 4.34, 3_782.0),
    _prefill("32K", 32_788, 8.70, 3_768.0),
    _prefill("64K", 65_557, 18.57, 3_531.0),
    _prefill("128K", 131_093, 40.32, 3_251.0),
)

# The prefill sweep's targets, named as M1 names them.
PREFILL_SIZES: dict[str, int] = {"4K": 4_096, "16K": 16_384, "32K": 32_768, "64K": 65_536, "128K": 131_072}
PREFILL_MATCH = 0.10  # a prefill measurement compares to a published one within ±10 % of its prompt


def matching(kind: str, concurrency: int, max_tokens: int) -> list[Figure]:
    """Published decode figures for this workload shape, suite order (R4 suite 1, suite 2, M1)."""
    return [
        f for f in FIGURES if f.kind == kind and f.concurrency == concurrency and f.max_tokens == max_tokens
    ]


def matching_prefill(prompt_tokens: int) -> list[Figure]:
    """Published prefill figures whose prompt is within ±10 % of ``prompt_tokens``."""
    return [
        f
        for f in FIGURES
        if f.kind == "prefill"
        and f.prompt_tokens is not None
        and abs(prompt_tokens - f.prompt_tokens) <= PREFILL_MATCH * f.prompt_tokens
    ]


def sources_used(figures: list[Figure]) -> list[str]:
    return list(dict.fromkeys(f.source for f in figures))


# ------------------------------------------------------------------------------ profile's own section
def bench_figures(profile: Profile) -> dict[str, dict[int, float]]:
    """A profile's own ``published:`` ladder ({workload: {concurrency: tok/s}}); empty when none."""
    published = profile.published
    if published is None:
        return {}
    figures = {"coding": dict(published.coding), "prose": dict(published.prose)}
    return {name: points for name, points in figures.items() if name in WORKLOADS and points}


def source(profile: Profile) -> str | None:
    published = profile.published
    if published is None:
        return None
    return f"{published.source} ({published.date})" if published.date else published.source


def needle_points(profile: Profile) -> list[int]:
    """Published needle rungs (input tokens), smallest first; empty when the profile has none."""
    published = profile.published
    if published is None:
        return []
    return sorted({int(n.tokens) for n in published.needle})
