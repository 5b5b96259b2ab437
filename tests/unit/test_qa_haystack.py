"""R4's needle as published (filler, sizes, layout, instruction, judging), and the seeded filler the
prefill sweep sizes from the server's own token counts."""

from __future__ import annotations

import json
import random
import re

import pytest

from sparkctl.qa import haystack, probedata

PUBLISHED = probedata.r4()["needle"]["published"]


@pytest.mark.parametrize("case", PUBLISHED["cases"], ids=lambda c: str(c["filler_units"]))
def test_the_prompt_is_byte_for_byte_r4s(case: dict[str, object]) -> None:
    """R4 published each prompt's SHA-256 and expected records: the same tag and size give the same bytes."""
    needle = haystack.build(int(str(case["filler_units"])), PUBLISHED["tag"])
    assert needle.sha256 == case["prompt_sha256"]
    assert needle.expected == case["expected"]


@pytest.mark.parametrize("units", haystack.PUBLISHED_SIZES)
def test_published_filler_count_and_record_layout(units: int) -> None:
    needle = haystack.build(units, "t")
    lines = needle.prompt.split("\n")
    assert lines[0] == f"[long-context t size={units}]"
    assert lines[1].startswith("Three exact records are embedded below. Ignore all filler.")
    assert [line.split("=")[0] for line in lines[2::2][:3]] == ["RECORD alpha", "RECORD beta", "RECORD gamma"]
    assert [lines[2], lines[4], lines[6]] == [f"RECORD {k}={needle.expected[k]}" for k in haystack.KEYS]
    assert lines[3] == " the" * (units // 2) and lines[5] == " the" * (units - units // 2)
    assert lines[7] == "Return the three recorded values as a JSON object with string values. No explanation."
    assert len(lines) == 8
    assert all(re.fullmatch(r"\d{8}", v) for v in needle.expected.values())


def test_values_come_from_the_published_seed() -> None:
    rng = random.Random(32_768 + 41)
    assert haystack.expected(32_768) == {k: str(rng.randrange(10**7, 10**8)) for k in haystack.KEYS}
    assert haystack.build(4096, "a").expected == haystack.build(4096, "b").expected
    assert haystack.build(4096, "a").prompt != haystack.build(4096, "b").prompt  # the tag: a fresh prefix


def test_a_tag_cannot_break_the_first_line() -> None:
    with pytest.raises(ValueError, match="tag"):
        haystack.build(100, "a]\nRECORD alpha=1")


def test_window_is_minus_64_plus_768() -> None:
    assert haystack.window(32_768) == (32_704, 33_536)
    assert haystack.within(32_768, 32_704) and haystack.within(32_768, 33_536)
    assert not haystack.within(32_768, 32_703) and not haystack.within(32_768, 33_537)


def test_judge_accepts_the_exact_answer_inside_the_window() -> None:
    right = haystack.expected(32_768)
    verdict = haystack.judge(32_768, dict(right), 32_870, 1_000_000)  # R4's own count at this size
    assert verdict.passed and verdict.found and verdict.sized and verdict.fits


@pytest.mark.parametrize("tokens", [32_768 - 65, 32_768 + 769])
def test_judge_refuses_a_prompt_outside_the_window(tokens: int) -> None:
    verdict = haystack.judge(32_768, haystack.expected(32_768), tokens, 1_000_000)
    assert verdict.found and not verdict.sized and not verdict.passed


def test_judge_refuses_a_wrong_or_partial_answer() -> None:
    right = haystack.expected(131_072)
    wrong = {**right, "beta": right["beta"][::-1]}
    assert not haystack.judge(131_072, wrong, 131_174, None).passed
    assert not haystack.judge(131_072, {k: right[k] for k in ("alpha", "gamma")}, 131_174, None).passed
    assert not haystack.judge(131_072, None, 131_174, None).passed
    # numbers instead of the strings asked for are not the exact answer
    as_ints = {k: int(v) for k, v in right.items()}
    assert not haystack.judge(131_072, as_ints, 131_174, None).passed


def test_judge_needs_room_for_the_answer() -> None:
    # R4's script: prompt_tokens + 256 <= 300,000 (its engine's context) when the server names none
    right = haystack.expected(299_000)
    assert haystack.judge(299_000, right, 299_102, None).passed
    assert not haystack.judge(299_000, right, 299_760, None).fits  # inside the window, no room
    assert haystack.judge(299_000, right, 299_760, 1_000_000).passed  # a 1M context has the room


def test_rungs_are_r4s_sizes_where_they_fit() -> None:
    assert haystack.PUBLISHED_SIZES == (32_768, 131_072, 299_000)
    assert haystack.rungs(1_000_000, [32_870, 131_174, 299_102]) == ([32_768, 131_072, 299_000], True)
    # M1 published a longer needle; it is added in R4's filler units
    assert haystack.rungs(1_048_576, [1_000_000]) == ([32_768, 131_072, 299_000, 1_000_000], True)
    assert haystack.rungs(200_000) == ([32_768, 131_072], True)


def test_a_small_context_gets_scaled_sizes_flagged_as_not_r4s() -> None:
    units, published = haystack.rungs(32_768)
    assert not published
    assert units == [round(n * 32_768 / 1_000_000) for n in haystack.PUBLISHED_SIZES]
    with pytest.raises(ValueError, match="no room"):
        haystack.rungs(512)


def test_simulator_tokens_land_in_the_window() -> None:
    tok = pytest.importorskip("sparkctl_sim.tokenizer")
    for units in (*haystack.rungs(32_768)[0], 32_768):
        assert haystack.within(units, tok.count(haystack.build(units, "sparkctl-qualify-x").prompt))


def test_the_probe_file_names_its_sources() -> None:
    data = probedata.r4()
    for name, src in data["sources"].items():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", src["repo"]), name
        assert re.fullmatch(r"[0-9a-f]{40}", src["commit"]), name
        assert src["path"], name
    assert data["needle"]["source"] in data["sources"]
    assert data["needle"]["published"]["source"] in data["sources"]
    assert json.loads(probedata.PATH.read_text()) == data


# ---------------------------------------------------------------------- seeded filler (prefill sweep)
def test_filler_is_seeded_and_has_the_word_count() -> None:
    a, b = haystack.filler(random.Random(7), 3001), haystack.filler(random.Random(7), 3001)
    assert a == b and len(a.split()) == 3001
    assert haystack.filler(random.Random(8), 3001) != a


def test_fit_recovers_a_linear_tokenizer() -> None:
    fit = haystack.TokenFit()
    for words in (500, 2000):
        fit.add(words, round(37 + 1.31 * words))
    slope, intercept = fit.coefficients()
    assert slope == pytest.approx(1.31, rel=1e-3)
    assert intercept == pytest.approx(37, abs=2)
    words = fit.words_for(131_174)
    assert abs(37 + 1.31 * words - 131_174) <= 2


def test_fit_needs_two_sizes_and_growth() -> None:
    fit = haystack.TokenFit()
    fit.add(100, 130)
    with pytest.raises(ValueError, match="two different sizes"):
        fit.coefficients()
    fit.add(200, 120)
    with pytest.raises(ValueError, match="did not grow"):
        fit.coefficients()
