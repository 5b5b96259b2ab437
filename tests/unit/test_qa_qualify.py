"""How qualify judges answers: lenient where a real model may phrase things its own way, exact elsewhere."""

from __future__ import annotations

import json
import types
from typing import Any

import pytest

from sparkctl.errors import InputError
from sparkctl.qa import haystack, probedata, qualify
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


def test_records_parse_as_r4_reads_them() -> None:
    """R4 strips a markdown fence and parses the rest as JSON; prose around it is not an answer."""
    want = {"alpha": "12345678", "beta": "23456789", "gamma": "34567890"}
    assert qualify._parse_records("```json\n" + json.dumps(want) + "\n```") == want
    assert qualify._parse_records(json.dumps(want)) == want
    assert qualify._parse_records("Sure: " + json.dumps(want) + ".") is None
    assert qualify._parse_records("alpha is 12345678") is None
    # numbers where strings were asked for parse, and the judge then refuses them (exact answer)
    assert qualify._parse_records('{"alpha": 12345678}') == {"alpha": 12345678}


def test_needle_evidence_is_regenerable_not_stored() -> None:
    needle = haystack.build(20_000, "x")
    record = qualify._needle_record(needle)
    assert len(record["messages"][0]["content"]) < 1000 < len(needle.prompt)
    assert record["needle"]["sha256"] == haystack.build(20_000, "x").sha256
    assert record["needle"]["expected"] == needle.expected and record["max_tokens"] == qualify.MAX_TOKENS


def test_the_image_checks_send_r4s_prompts() -> None:
    vision = probedata.r4()["vision"]
    assert vision["single"]["prompt"].startswith("Read the printed code, and identify the two shapes")
    assert vision["single"]["expected"] == {
        "code": "NORTH 7314", "left_shape": "red square", "right_shape": "blue circle",
    }
    assert vision["four"]["prompt"].startswith("Read the printed code at the top of each image.")
    assert vision["four"]["expected"] == ["NORTH 7314", "SOUTH 8265", "EAST 1948", "WEST 5620"]


class _Said:
    """A chat client that answers every request with one text, and keeps the requests."""

    def __init__(self, text: str) -> None:
        self.text, self.requests = text, []  # type: ignore[var-annotated]
        self.chat = types.SimpleNamespace(completions=self)

    def create(self, **body: Any) -> Any:
        self.requests.append(body)
        message = types.SimpleNamespace(content=self.text, tool_calls=None)
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=message)], usage=None)


def _image_check(answer: str, check: Any) -> tuple[bool, str, dict[str, Any], list[Any]]:
    ep = Endpoint(root="http://127.0.0.1:9", api_key="", model="m", simulator=True)
    client = _Said(answer)
    ctx = qualify._Context(ep, client, qualify._Evidence(), [], "t", True)  # type: ignore[arg-type]
    ok, detail, data = check(ctx)
    return ok, detail, data, client.requests


def test_the_one_image_check_judges_the_exact_object() -> None:
    right = '{"code": "NORTH 7314", "left_shape": "red square", "right_shape": "blue circle"}'
    ok, _, data, sent = _image_check("```json\n" + right + "\n```", qualify.check_image_one)
    assert ok and data["images"][0]["code"] == "NORTH 7314"
    parts = sent[0]["messages"][0]["content"]
    assert parts[0] == {"type": "text", "text": probedata.r4()["vision"]["single"]["prompt"]}  # text first
    assert [p["type"] for p in parts] == ["text", "image_url"]
    for wrong in (right.replace("7314", "7315"), right.replace("red square", "square"),
                  right.replace("blue circle", "Blue circle"), "NORTH 7314, red square, blue circle"):
        assert not _image_check(wrong, qualify.check_image_one)[0], wrong


def test_the_four_image_check_judges_the_codes_in_order() -> None:
    codes = ["NORTH 7314", "SOUTH 8265", "EAST 1948", "WEST 5620"]
    ok, _, _, sent = _image_check(json.dumps(codes), qualify.check_image_four)
    assert ok and [p["type"] for p in sent[0]["messages"][0]["content"]] == ["text", *["image_url"] * 4]
    assert not _image_check(json.dumps(codes[::-1]), qualify.check_image_four)[0]
    assert not _image_check(json.dumps(codes[:3]), qualify.check_image_four)[0]


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


class _Needled(_Said):
    """Answers a needle prompt with its records, reporting ``prompt_tokens``."""

    def __init__(self, prompt_tokens: int) -> None:
        super().__init__("")
        self.prompt_tokens = prompt_tokens

    def create(self, **body: Any) -> Any:
        self.requests.append(body)
        units = int(body["messages"][0]["content"].split("size=", 1)[1].split("]", 1)[0])
        message = types.SimpleNamespace(content=json.dumps(haystack.expected(units)), tool_calls=None)
        usage = types.SimpleNamespace(prompt_tokens=self.prompt_tokens, model_dump=lambda: {})
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=message)], usage=usage)


@pytest.mark.parametrize(("context", "passed"), [(1_048_576, True), (None, False)])
def test_the_needle_is_judged_against_the_served_context(context: int | None, passed: bool) -> None:
    """Inside the window but over R4's 300,000-token budget: a 1M context has room for the answer."""
    ep = Endpoint(root="http://127.0.0.1:9", api_key="", model="m", simulator=True)
    client = _Needled(299_760)
    ctx = qualify._Context(ep, client, qualify._Evidence(), [299_000], "t", True, context)  # type: ignore[arg-type]
    ok, detail, data = qualify.check_needle(ctx)
    assert ok is passed, detail
    (rung,) = data["rungs"]
    assert rung["found"] and rung["sized"] and rung["fits"] is passed
    assert data["published_sizes"] is True and data["tag"] == "t"
    assert client.requests[0]["messages"][0]["content"] == haystack.build(299_000, "t").prompt


def test_a_profile_context_sizes_the_ladder_when_the_server_names_none() -> None:
    profile = types.SimpleNamespace(
        args={"--context-length": 1_048_576},
        published=types.SimpleNamespace(needle=[types.SimpleNamespace(tokens=1_000_000)]),
    )
    cluster = types.SimpleNamespace(profile=profile)
    ep = Endpoint(root="http://127.0.0.1:9", api_key="", model="m", simulator=True)
    assert qualify.served_context(cluster, ep) == 1_048_576  # type: ignore[arg-type]
    units, published = qualify.needle_rungs(cluster, ep)  # type: ignore[arg-type]
    assert units == [32_768, 131_072, 299_000, 1_000_000] and published
