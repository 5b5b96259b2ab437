"""The published figures sparkctl's bench is compared with: R4's two repeat suites and its community
sweep, M1's sparkDash ladder and prefill sweep, and the reference sets R4 compares with (Tony's
four-Spark vLLM runs, the eight-Spark SG17, Mia's three-Spark profile), each with its source, date,
definition and (where published) TTFT and range.

Both publications are compared whatever profile is served: a figure is shown beside a measured level
when the *workload* matches — the same workload bytes (the SHA-256 of the workload file the figure
was measured with, ``WORKLOAD_SHA256``), kind, completion length and concurrency; for prefill, a
prompt within 10 % of the published prompt's length — never because of the profile's name. A figure
whose publisher does not pin its workload is listed as not compared, with the reason. The
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
- **R4 sweep**: R4 ``docs/results.md`` "Complete community sweep" (one measured batch per cell of the
  unchanged community runner): coding C1 decode, coding C6 aggregate and the eight-category
  aggregate R4 sets beside Tony's.
- **Tony** (tonyd2wild/DeepSeek-V4.1-Flash-vLLM-DGX-Spark at fc725ecf, vLLM TP4 on four Sparks, the
  community runner whose bytes R4's coding and mixed workloads are): ``results/<run>/bench-<run>.json``
  headline (eight-category aggregate) and coding rows, as R4 transcribed them with each file's SHA-256
  in ``results/reference/published-targets.json`` (checked 12 Sep 2026): EXL3 repeats 1 and 2 (R4's
  matched columns), the initial EXL3 run and the native-checkpoint boot 10.
- **SG17 TP8**: R4 ``docs/trace-iteration-01.md`` at 1efaec74, the restored eight-Spark SG17 reference
  (135.40 coding C1 from samples 135.14 / 136.02 / 135.03, the community coding prompt as R4's trace
  client sends it); the profile ``sg17-tp8`` carries the same figure.
- **Mia TP3**: MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks README at e0985205 (R4 quotes C1 and C4 from
  e59e6eb): sparkDash prose on three Sparks, version and prompt not pinned, so listed, never compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkctl.profiles import Profile

# The built-in bench workloads (sparkctl/qa/workloads/<name>.json); their names are also their kinds.
WORKLOADS = ("coding", "prose", "mixed")
KINDS = ("coding", "prose", "mixed")
DEFAULT_WORKLOADS = ("coding", "prose")  # what "both" (bench's default) runs

# The SHA-256 of each built-in workload file, the bytes R4's figures were measured with: the
# community runner's coding prompt and sparkDash's prose prompt, extracted from the publishers'
# pinned files by scripts/extract_workloads.py (a unit test recomputes both from the files).
WORKLOAD_SHA256: dict[str, str] = {
    "coding": "b66465bd904c15638e3ec456d4d8bedb6be2446772b9e631c85a2ea7447bad58",
    "prose": "b7090c894ef4a567390b8ec904b582e3c8e42a473bc75b497f565962dc4eaa61",
    "mixed": "2292a90cc45ff58eed4166f1c66186ec1002d008166fa68cc031a25a457993df",
}
M1_UNPINNED = ("M1 does not pin the sparkDash version or prompt its prose ladder was measured with, so "
               "no workload here is known to be the same")

UNPINNED = {"mia-tp3": "Mia does not pin the sparkDash version or prompt her three-Spark prose figures "
                        "were measured with, so no workload here is known to be the same"}

# Tony's repository at the commit R4 checked (the community runner's home).
_TONY = "tonyd2wild/DeepSeek-V4.1-Flash-vLLM-DGX-Spark at fc725ecf"
_TONY_DATE = "2026-09-12"  # as R4 checked it (results/reference/published-targets.json)

# Timing definitions; every measured level records the one it used. They must not be mixed.
DEFINITIONS: dict[str, str] = {
    "decode-per-stream": "(completion_tokens − 1) / (done − first content token), tokens from usage",
    "batch": "Σ completion_tokens / (last response done − first request sent): the whole batch, "
    "prefill and TTFT included (R4's coding aggregate)",
    "post-first-token": "Σ (completion_tokens − 1) / (latest last content token − earliest first content "
    "token) (sparkDash's aggregate, R4's and M1's prose)",
    "prefill": "prompt_tokens / TTFT of one cold request (fresh prefix, 8-token budget)",
    "category-mean": "mean over the eight categories of each category batch's Σ completion_tokens / "
    "(last response done − first request sent), the counting ceiling excluded (the community runner's "
    "headline aggregate, R4's eight-category aggregate)",
}


def definition_for(kind: str, concurrency: int) -> str:
    """The published definition of a headline: coding C1 decode per stream, coding C>1 the batch
    aggregate; prose (sparkDash) the post-first-token aggregate at every level (per stream at C1)."""
    if kind == "coding":
        return "decode-per-stream" if concurrency == 1 else "batch"
    if kind == "prose":
        return "post-first-token"
    if kind == "mixed":
        return "category-mean"
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
    "r4-sweep": Source(
        "r4-sweep",
        "R4 sweep",
        "rhys101/DeepSeek-V4.1-Flash-SGLang-DGX-Spark-4-NVMe docs/results.md, complete community sweep "
        "(one measured batch per cell)",
        "2026-09-12",
    ),
    "tony-rep1": Source(
        "tony-rep1",
        "Tony EXL3 rep 1",
        f"{_TONY} results/exl3tp4b-rep1/bench-exl3tp4b-rep1.json (sha256 2039fa5b…; EXL3 3.5-bit experts, "
        "vLLM TP4, four Sparks)",
        _TONY_DATE,
    ),
    "tony-rep2": Source(
        "tony-rep2",
        "Tony EXL3 rep 2",
        f"{_TONY} results/exl3tp4b-rep2/bench-exl3tp4b-rep2.json (sha256 8fb089a1…; EXL3 3.5-bit experts, "
        "vLLM TP4, four Sparks)",
        _TONY_DATE,
    ),
    "tony-exl3": Source(
        "tony-exl3",
        "Tony EXL3",
        f"{_TONY} results/exl3tp4b/bench-exl3tp4b.json (sha256 85a90f70…; EXL3 3.5-bit experts, first run)",
        _TONY_DATE,
    ),
    "tony-boot10": Source(
        "tony-boot10",
        "Tony boot 10",
        f"{_TONY} results/boot10/bench-boot10.json (sha256 e352b099…; original mixed-precision checkpoint)",
        _TONY_DATE,
    ),
    "sg17-tp8": Source(
        "sg17-tp8",
        "SG17 TP8",
        "rhys101/DeepSeek-V4.1-Flash-SGLang-DGX-Spark-4-NVMe docs/trace-iteration-01.md at 1efaec74 "
        "(eight Sparks, resident Engram; three C1 samples after an excluded warm-up)",
        "2026-09-12",
    ),
    "mia-tp3": Source(
        "mia-tp3",
        "Mia TP3",
        "MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks README.md at e0985205 (three Sparks, sparkDash prose)",
        "2026-09-14",
    ),
}

# Which publication a profile reproduces (its figures are marked as "this profile's" in tables).
PROFILE_SOURCES: dict[str, tuple[str, ...]] = {
    "r4-nvme": ("r4-s1", "r4-s2", "r4-sweep"), "m1-1m": ("m1",), "sg17-tp8": ("sg17-tp8",),
    "mia-tp3": ("mia-tp3",),
}


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
    workload: str | None = None  # the built-in workload it was measured with (None: not pinned)

    @property
    def workload_sha256(self) -> str | None:
        return WORKLOAD_SHA256.get(self.workload) if self.workload else None

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
        if self.kind != "prefill":
            out["workload_sha256"] = self.workload_sha256
        return out


def _coding(
    source: str, c: int, value: float, ttft: float | None, low: float | None = None,
    high: float | None = None,
) -> Figure:
    return Figure(source, "coding", value, definition_for("coding", c), c, 200, ttft, low, high,
                  workload="coding")


def _mixed(source: str, c: int, value: float, ttft: float | None = None) -> Figure:
    # The runner's headline: max_tokens is the workload's longest category budget (200).
    return Figure(source, "mixed", value, "category-mean", c, 200, ttft, workload="mixed")


def _prose(source: str, c: int, value: float, ttft: float | None = None, note: str | None = None) -> Figure:
    # R4 ran sparkDash through R8's pinned copy (the prose workload's source); M1 and Mia pin nothing.
    workload = "prose" if source.startswith("r4") else None
    return Figure(source, "prose", value, "post-first-token", c, 256, ttft, note=note, workload=workload)


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
    # Mia's three-Spark profile, sparkDash prose (no version or prompt pinned: listed, never compared).
    _prose("mia-tp3", 1, 37.9),
    _prose("mia-tp3", 2, 58.9),
    _prose("mia-tp3", 3, 71.2),
    _prose("mia-tp3", 4, 78.6),
    # R4's complete community sweep: one batch per cell (coding C1 decode, C6 aggregate; the mix).
    _coding("r4-sweep", 1, 82.99, None),
    _coding("r4-sweep", 6, 283.36, None),
    *(_mixed("r4-sweep", c, v) for c, v in ((1, 52.04), (2, 87.25), (3, 111.99), (4, 139.89),
                                             (5, 160.68), (6, 180.60), (8, 212.76))),
    # Tony's four-Spark runs (one batch per cell): coding C1 per stream, coding C6 and the mix.
    _coding("tony-rep1", 1, 81.2, 0.186),
    _coding("tony-rep1", 6, 281.75, 0.371),
    _mixed("tony-rep1", 1, 54.11, 0.259),
    _mixed("tony-rep1", 6, 170.92, 0.466),
    _coding("tony-rep2", 1, 81.11, 0.183),
    _coding("tony-rep2", 6, 295.84, 0.369),
    _mixed("tony-rep2", 1, 57.15, 0.25),
    _mixed("tony-rep2", 6, 176.14, 0.48),
    _coding("tony-exl3", 1, 81.54, 0.178),
    _coding("tony-exl3", 6, 292.07, 0.38),
    _mixed("tony-exl3", 1, 41.62, 0.37),
    _mixed("tony-exl3", 6, 141.19, 0.579),
    _coding("tony-boot10", 1, 73.78, 0.309),
    _coding("tony-boot10", 6, 225.48, 0.418),
    _mixed("tony-boot10", 1, 37.95, 0.441),
    _mixed("tony-boot10", 6, 131.86, 0.502),
    # SG17 TP8 (eight Sparks): R4's restored reference, three C1 coding samples.
    _coding("sg17-tp8", 1, 135.40, None, 135.03, 136.02),
    # M1 cold prefill, 4K–128K prompts.
    _prefill("4K", 4_118, 1.23, 3_350.0),
    _prefill("16K", 16_400, 4.34, 3_782.0),
    _prefill("32K", 32_788, 8.70, 3_768.0),
    _prefill("64K", 65_557, 18.57, 3_531.0),
    _prefill("128K", 131_093, 40.32, 3_251.0),
)

# R4's frozen heterogeneous-arrival test (docs/trace-iteration-02.md, "Frozen heterogeneous arrivals":
# the mean of three measured cohorts after an excluded warm-up), beside a run of the very schedule
# bytes (sparkctl/qa/workloads/r4-arrivals.jsonl, extracted from R4's pinned client).
ARRIVALS_SHA256 = {"r4": "287dd89a80245b9fcb00ac24a42674ba51db14e00bf446a6fc1ed881c8965d1f"}
ARRIVALS_FIGURES: dict[str, tuple[dict[str, Any], ...]] = {
    ARRIVALS_SHA256["r4"]: tuple(
        {"label": label, "throughput_tps": tps, "mean_latency_s": mean,
         "median_latency_mean_of_cohorts_s": med,
         "citation": "rhys101/DeepSeek-V4.1-Flash-SGLang-DGX-Spark-4-NVMe docs/trace-iteration-02.md at "
         f"1fbfa3c6, frozen heterogeneous arrivals, {what} (mean of three cohorts)",
         "date": "2026-09-12",
         "note": "R4 sent token ids to SGLang's native /generate; sparkctl sends the chat API"}
        for label, what, tps, mean, med in (
            ("R4 static five", "the static five-token profile", 100.44, 10.22, 10.83),
            ("R4 adaptive five", "adaptive verification", 106.16, 9.36, 9.58),
        )
    ),
}

# The prefill sweep's targets, named as M1 names them.
PREFILL_SIZES: dict[str, int] = {"4K": 4_096, "16K": 16_384, "32K": 32_768, "64K": 65_536, "128K": 131_072}
PREFILL_MATCH = 0.10  # a prefill measurement compares to a published one within ±10 % of its prompt


def _shape(kind: str, concurrency: int, max_tokens: int) -> list[Figure]:
    return [
        f for f in FIGURES if f.kind == kind and f.concurrency == concurrency and f.max_tokens == max_tokens
    ]


def matching(workload_sha256: str, kind: str, concurrency: int, max_tokens: int) -> list[Figure]:
    """Published decode figures measured with these very workload bytes at this level, suite order
    (R4 suite 1, suite 2, M1). A figure of another or an unpinned workload is never among them."""
    return [f for f in _shape(kind, concurrency, max_tokens) if f.workload_sha256 == workload_sha256]


def not_compared(workload_sha256: str, kind: str, concurrency: int, max_tokens: int) -> list[dict[str, Any]]:
    """The figures of this level's shape left out because their workload differs, with the reason."""
    out = []
    for f in _shape(kind, concurrency, max_tokens):
        if f.workload_sha256 == workload_sha256:
            continue
        why = (UNPINNED.get(f.source, M1_UNPINNED) if f.workload_sha256 is None else
               f"measured with workload sha256 {f.workload_sha256}, not {workload_sha256}")
        out.append({"label": f.label, "value": f.value, "reason": why})
    return out


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
