"""How qualify judges answers: lenient where a real model may phrase things its own way, exact elsewhere."""

from __future__ import annotations

import pytest

from sparkctl.errors import InputError
from sparkctl.qa import haystack, qualify
from sparkctl.qa.endpoint import Endpoint


def test_full_suite_runs_the_acceptance_list_before_and_after_the_long_request() -> None:
    full = qualify.SUITES["full"]
    acceptance = ["text", "arithmetic", "image-one", "image-four", "json", "tool"]
    assert list(full) == [*acceptance, "needle", *(f"{n}-after" for n in acceptance), "determinism"]
    assert qualify._phase("text", full) == "before" and qualify._phase("tool-after", full) == "after"
    assert qualify._phase("text", qualify.SUITES["quick"]) is None  # no long request, no phases
    assert qualify._function("json-after") is qualify.check_json


def test_the_text_check_is_exact() -> None:
    # R4's acceptance: "What is 17 times 19? Return only the integer." → content.strip() == "323".
    assert qualify.TEXT_PROMPT == "What is 17 times 19? Return only the integer."
    assert qualify.TEXT_EXPECTED == "323" and qualify.JSON_EXPECTED == {"answer": 42}


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
    assert qualify.SUITES["quick"] == ("text", "arithmetic", "json", "determinism")
    assert set(qualify.SUITES["full"]) == set(qualify.CHECKS)
    assert {n.removesuffix(qualify.AFTER) for n in qualify.CHECKS} == set(qualify.CHECK_FUNCTIONS)
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
