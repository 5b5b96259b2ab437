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


@pytest.mark.parametrize(("profile", "keys"), [("r4-nvme", ("r4-s2",)), ("m1-1m", ("m1",))])
def test_the_profiles_own_figures_agree_with_the_table(profile: str, keys: tuple[str, ...]) -> None:
    own = pub.bench_figures(load_profile(profile))
    assert own
    for kind, points in own.items():
        for key in keys:
            table = _values(kind, key)
            assert {c: table[c] for c in points} == points, (profile, kind)
        assert set(keys) <= set(pub.PROFILE_SOURCES[profile])


def test_matching_is_by_workload_shape() -> None:
    assert [f.label for f in pub.matching("coding", 8, 200)] == ["R4 suite 1", "R4 suite 2"]
    assert [f.label for f in pub.matching("prose", 8, 256)] == ["R4 suite 1", "R4 suite 2", "M1"]
    assert [f.label for f in pub.matching("prose", 16, 256)] == ["M1"]
    assert pub.matching("prose", 8, 128) == []  # another completion length is another workload
    assert pub.matching("coding", 16, 200) == []  # R4 had 8 slots: no C16
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
