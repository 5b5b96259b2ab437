"""How qualify judges answers: lenient where a real model may phrase things its own way, exact elsewhere."""

from __future__ import annotations

import pytest

from sparkctl.errors import InputError
from sparkctl.qa import haystack, qualify
from sparkctl.qa.endpoint import Endpoint


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        ("There are 3 shapes.", 3, True),
        ("I count three shapes: red, blue, yellow.", 3, True),
        ("Image 1: 384x128 PNG with shapes", 3, False),  # a 3 inside a number is not a count
        ("4 images", 4, True),
        ("Four images in total", 4, True),
        ("fourteen", 4, False),
        ("version 3.5", 3, False),
    ],
)
def test_mentions_count(text: str, n: int, expected: bool) -> None:
    assert qualify.mentions_count(text, n) is expected


def test_mentions_in_order() -> None:
    assert qualify.mentions_in_order(
        "A red square, then a Blue circle and a yellow one.", ["red", "blue", "yellow"]
    )
    assert not qualify.mentions_in_order("blue, red, yellow", ["red", "blue", "yellow"])
    assert not qualify.mentions_in_order("reddish and blue", ["red", "blue"])  # whole words only
    assert qualify.mentions_in_order("red red blue", ["red", "red", "blue"])


def test_records_parse_with_or_without_fences() -> None:
    want = {"alpha": "12345678", "beta": "23456789", "gamma": "34567890"}
    assert (
        qualify._parse_records('```json\n{"alpha": "12345678", "beta": "23456789", "gamma": "34567890"}\n```')
        == want
    )
    assert (
        qualify._parse_records('Sure: {"alpha": 12345678, "beta": "23456789", "gamma": "34567890"}.') == want
    )
    assert qualify._parse_records("alpha is 12345678") is None


def test_needle_evidence_is_regenerable_not_stored() -> None:
    hs = haystack.build(20_000, label="x")
    record = qualify._needle_record(hs, 256)
    assert len(record["messages"][0]["content"]) < 1000 < len(hs.prompt)
    assert record["haystack"]["sha256"] == haystack.build(20_000, label="x").sha256
    assert record["haystack"]["expected"] == hs.expected


def test_suites() -> None:
    assert qualify.SUITES["quick"] == ("plain", "arithmetic", "json", "determinism")
    assert set(qualify.SUITES["full"]) == set(qualify.CHECKS) == set(qualify.CHECK_FUNCTIONS)
    assert len(qualify.ARITHMETIC) == 8 == len({a * b for a, b in qualify.ARITHMETIC})


def test_unknown_suite_or_check_is_bad_input(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ep = Endpoint(root="http://127.0.0.1:9", api_key="", model="m", simulator=True)
    with pytest.raises(InputError, match="unknown suite"):
        qualify.qualify_endpoint(ep, "huge", tmp_path)
    with pytest.raises(InputError, match="unknown check"):
        qualify.qualify_endpoint(ep, "quick", tmp_path, checks=["vibes"])


def test_unreachable_endpoint_fails_every_check_with_the_reason(tmp_path, no_network) -> None:  # type: ignore[no-untyped-def]
    ep = Endpoint(root="http://127.0.0.1:9", api_key="", model="m", simulator=False)
    report = qualify.qualify_endpoint(ep, "quick", tmp_path)
    no_network.clear()  # the attempts were expected; nothing left the process
    assert report.failed == list(qualify.SUITES["quick"])
    assert all(c.detail.startswith("error: ") for c in report.checks)
    assert (tmp_path / "report.json").is_file()


def test_new_results_dir_is_unique(tmp_path) -> None:  # type: ignore[no-untyped-def]
    a = qualify.new_results_dir(tmp_path, "qualify")
    b = qualify.new_results_dir(tmp_path, "qualify")
    assert a != b and a.is_dir() and b.is_dir() and a.name.startswith("qualify-")


def test_a_skipped_check_is_neither_run_nor_failed(tmp_path, no_network) -> None:  # type: ignore[no-untyped-def]
    ep = Endpoint(root="http://127.0.0.1:9", api_key="", model="m", simulator=True)
    reason = "profile lab does not set --enable-multimodal"
    report = qualify.qualify_endpoint(
        ep,
        "full",
        tmp_path,
        checks=["image-one", "image-four"],
        skip={"image-one": reason, "image-four": reason},
    )
    assert not no_network  # nothing was sent
    assert report.skipped == ["image-one", "image-four"] and report.failed == []
    assert not report.passed  # nothing passed either: a verdict needs at least one check that ran
    assert report.to_dict()["checks"][0]["skipped"] == reason
