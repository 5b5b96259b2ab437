"""The published table: both publications' figures as quoted, matched by workload, never by profile."""

from __future__ import annotations

import pytest

from sparkctl.profiles import load_profile
from sparkctl.qa import published as pub


def _values(kind: str, source: str) -> dict[int, float]:
    return {f.concurrency: f.value for f in pub.FIGURES if f.kind == kind and f.source == source}


def test_r4_figures_as_published() -> None:
    assert _values("coding", "r4-s1") == {1: 82.71, 4: 202.38, 8: 335.47}
    assert _values("coding", "r4-s2") == {1: 82.73, 4: 211.81, 8: 340.41}
    assert _values("prose", "r4-s1") == {1: 52.61, 4: 117.02, 8: 162.49}
    assert _values("prose", "r4-s2") == {1: 52.62, 4: 116.91, 8: 162.18}
    c1 = next(f for f in pub.FIGURES if f.source == "r4-s1" and f.kind == "coding" and f.concurrency == 1)
    assert (c1.low, c1.high, c1.ttft_s) == (82.44, 82.89, 0.225)


def test_m1_figures_as_published() -> None:
    assert _values("prose", "m1") == {1: 45.4, 2: 72.9, 4: 103.1, 8: 114.1, 16: 134.2}
    ttft = {f.concurrency: f.ttft_s for f in pub.FIGURES if f.kind == "prose" and f.source == "m1"}
    assert (ttft[1], ttft[8], ttft[16]) == (0.212, 2.70, 12.45)
    prefill = [f.value for f in pub.FIGURES if f.kind == "prefill"]
    assert (min(prefill), max(prefill)) == (3_251.0, 3_782.0)
    assert [f.size for f in pub.FIGURES if f.kind == "prefill"] == list(pub.PREFILL_SIZES)


@pytest.mark.parametrize(("profile", "keys"), [("r4-nvme", ("r4-s2",)), ("m1-1m", ("m1",)),
                                               ("sg17-tp8", ("sg17-tp8",)), ("mia-tp3", ("mia-tp3",))])
def test_the_profiles_own_figures_agree_with_the_table(profile: str, keys: tuple[str, ...]) -> None:
    own = pub.bench_figures(load_profile(profile))
    assert own
    for kind, points in own.items():
        for key in keys:
            table = _values(kind, key)
            assert {c: table[c] for c in points} == points, (profile, kind)
        assert set(keys) <= set(pub.PROFILE_SOURCES[profile])


def test_matching_is_by_the_workload_bytes_and_shape() -> None:
    coding, prose = pub.WORKLOAD_SHA256["coding"], pub.WORKLOAD_SHA256["prose"]
    assert [f.label for f in pub.matching(coding, "coding", 8, 200)] == ["R4 suite 1", "R4 suite 2"]
    # M1 pins no sparkDash version or prompt: never compared, listed with the reason.
    assert [f.label for f in pub.matching(prose, "prose", 8, 256)] == ["R4 suite 1", "R4 suite 2"]
    assert pub.matching(prose, "prose", 16, 256) == []
    (m1,) = pub.not_compared(prose, "prose", 16, 256)
    assert m1["label"] == "M1" and m1["reason"] == pub.M1_UNPINNED
    # The same shape with other bytes (another prompt) compares with nothing, and says why.
    other = "0" * 64
    assert pub.matching(other, "coding", 8, 200) == []
    assert all(coding in n["reason"] for n in pub.not_compared(other, "coding", 8, 200))
    assert pub.matching(prose, "prose", 8, 128) == []  # another completion length is another workload
    assert pub.matching(coding, "coding", 16, 200) == []  # R4 had 8 slots: no C16
    assert [f.size for f in pub.matching_prefill(31_744)] == ["32K"]  # a clamped 32K still compares
    assert pub.matching_prefill(24_000) == []


def test_definitions_follow_the_source() -> None:
    assert pub.definition_for("coding", 1) == "decode-per-stream"
    assert pub.definition_for("coding", 4) == "batch"
    assert pub.definition_for("prose", 1) == pub.definition_for("prose", 8) == "post-first-token"
    assert all(
        f.definition == pub.definition_for(f.kind, f.concurrency) for f in pub.FIGURES if f.kind != "prefill"
    )
    with pytest.raises(ValueError):
        pub.definition_for("poetry", 1)


def test_the_reference_sets_as_published() -> None:
    # R4 docs/results.md "Published comparison targets" and results/reference/published-targets.json.
    assert _values("coding", "tony-rep1") == {1: 81.2, 6: 281.75}
    assert _values("coding", "tony-rep2") == {1: 81.11, 6: 295.84}
    assert _values("mixed", "tony-rep1") == {1: 54.11, 6: 170.92}
    assert _values("mixed", "tony-rep2") == {1: 57.15, 6: 176.14}
    assert _values("coding", "tony-exl3") == {1: 81.54, 6: 292.07}
    assert _values("coding", "tony-boot10") == {1: 73.78, 6: 225.48}
    assert _values("coding", "r4-sweep") == {1: 82.99, 6: 283.36}
    assert _values("mixed", "r4-sweep") == {1: 52.04, 2: 87.25, 3: 111.99, 4: 139.89, 5: 160.68, 6: 180.6,
                                            8: 212.76}
    (sg17,) = [f for f in pub.FIGURES if f.source == "sg17-tp8"]
    assert (sg17.kind, sg17.concurrency, sg17.value) == ("coding", 1, 135.40)
    assert (sg17.low, sg17.high) == (135.03, 136.02)  # the three samples' range
    assert _values("prose", "mia-tp3") == {1: 37.9, 2: 58.9, 3: 71.2, 4: 78.6}
    for key in ("r4-sweep", "tony-rep1", "tony-rep2", "tony-exl3", "tony-boot10", "sg17-tp8", "mia-tp3"):
        source = pub.SOURCES[key]
        assert source.citation and len(source.date) == 10 and source.date.startswith("2026-")


def test_the_mix_compares_with_the_mix_only() -> None:
    mixed, coding = pub.WORKLOAD_SHA256["mixed"], pub.WORKLOAD_SHA256["coding"]
    assert [f.label for f in pub.matching(mixed, "mixed", 6, 200)] == [
        "R4 sweep", "Tony EXL3 rep 1", "Tony EXL3 rep 2", "Tony EXL3", "Tony boot 10"]
    assert [f.label for f in pub.matching(coding, "coding", 6, 200)] == [
        "R4 sweep", "Tony EXL3 rep 1", "Tony EXL3 rep 2", "Tony EXL3", "Tony boot 10"]
    assert pub.matching(coding, "mixed", 6, 200) == []  # the coding bytes are not the mix
    assert all(mixed in n["reason"] for n in pub.not_compared(coding, "mixed", 6, 200))
    assert pub.definition_for("mixed", 1) == pub.definition_for("mixed", 6) == "category-mean"
    # Mia's three-Spark prose pins no sparkDash version: listed with the reason, never compared.
    prose = pub.WORKLOAD_SHA256["prose"]
    assert [f.label for f in pub.matching(prose, "prose", 4, 256)] == ["R4 suite 1", "R4 suite 2"]
    reasons = {n["label"]: n["reason"] for n in pub.not_compared(prose, "prose", 4, 256)}
    assert reasons["Mia TP3"] == pub.UNPINNED["mia-tp3"] and reasons["M1"] == pub.M1_UNPINNED
