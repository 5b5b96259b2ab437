"""Needle prompts: pinned, well-formed, and sized from the server's own token counts."""

from __future__ import annotations

import re

import pytest

from sparkctl.qa import haystack


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    a, b = haystack.build(5000, seed=7), haystack.build(5000, seed=7)
    assert a.prompt == b.prompt and a.expected == b.expected and a.sha256 == b.sha256
    assert haystack.build(5000, seed=8).prompt != a.prompt


def test_records_in_order_and_filler_word_count() -> None:
    hs = haystack.build(3001, seed=1, label="t")
    positions = [hs.prompt.index(f"RECORD {k}={hs.expected[k]}.") for k in haystack.KEYS]
    assert positions == sorted(positions)
    assert positions[0] < len(hs.prompt) * 0.05 < len(hs.prompt) * 0.95 < positions[2]
    assert 0.4 < positions[1] / len(hs.prompt) < 0.6
    assert hs.prompt.endswith(haystack.QUESTION)
    assert all(re.fullmatch(r"\d{8}", v) for v in hs.expected.values())
    body = hs.prompt
    for k in haystack.KEYS:
        body = body.replace(f"RECORD {k}={hs.expected[k]}.", "")
    body = (
        body.replace(haystack.QUESTION, "")
        .replace(haystack.INSTRUCTION, "")
        .replace("[needle t size=3001]", "")
    )
    assert len(body.split()) == 3001


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


def test_sizing_lands_within_tolerance_with_the_simulator_tokenizer() -> None:
    tok = pytest.importorskip("sparkctl_sim.tokenizer")
    fit = haystack.TokenFit()
    for words in (200, 800):
        fit.add(words, tok.count(haystack.build(words, label="calibration").prompt))
    for target in (4096, 29_491):
        hs = haystack.build(fit.words_for(target + haystack.AIM_ABOVE), label=str(target))
        assert haystack.within(target, tok.count(hs.prompt)), target


def test_r4_size_window_and_ladder() -> None:
    # R4's retrieval check: size − 64 ≤ prompt_tokens ≤ size + 768.
    assert haystack.window(32_768) == (32_704, 33_536)
    assert haystack.within(32_768, 32_704) and haystack.within(32_768, 33_536)
    assert not haystack.within(32_768, 32_703) and not haystack.within(32_768, 33_537)
    assert haystack.ladder(1_000_000, [299_102, 32_870, 131_174]) == [32_870, 131_174, 299_102]
    assert haystack.ladder(1_048_576, [1_000_000]) == [1_000_000]
    # a published rung beyond the context is capped to what fits
    assert haystack.ladder(32_768, [1_000_000]) == [32_768 - 1024]
    assert haystack.ladder(32_768) == [1024, 4096, 9830, 31_744]
    with pytest.raises(ValueError):
        haystack.ladder(512)
