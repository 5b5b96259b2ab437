"""Bench arithmetic: the published timing definitions, sample counts, statistics and published tables."""

from __future__ import annotations

import asyncio
import hashlib
import json
from importlib import resources
from typing import Any

import pytest
from support.sse_server import chunked, scripted, sse

from sparkctl.errors import InputError
from sparkctl.qa import bench, published
from sparkctl.qa.bench import Batch, LevelResult, RequestTiming
from sparkctl.qa.endpoint import Endpoint
from sparkctl.qa.request import stream_client
from sparkctl.qa.workload import load_builtin


def test_percentile_matches_numpy_linear() -> None:
    np = pytest.importorskip("numpy")
    values = [0.31, 0.12, 0.5, 0.44, 0.27, 0.9, 0.05, 0.33, 0.61, 0.2, 0.71]
    for p in (0, 10, 50, 90, 99, 100):
        assert bench.percentile(values, p) == pytest.approx(float(np.percentile(values, p)))
    assert bench.percentile([3.0], 99) == 3.0
    with pytest.raises(ValueError):
        bench.percentile([], 50)


def test_stats_report_the_mean_with_the_spread_and_every_sample() -> None:
    # The publications quote means: a skewed set must not be summarised by its median.
    out = bench.stats([80.0, 82.0, 90.0])
    assert out == {
        "mean": 84.0,
        "min": 80.0,
        "median": 82.0,
        "max": 90.0,
        "n": 3,
        "samples": [80.0, 82.0, 90.0],
    }
    with pytest.raises(ValueError):
        bench.stats([])


def test_decode_rate_excludes_the_first_token() -> None:
    r = RequestTiming(sent=10.0, first_token=10.25, done=12.25, completion_tokens=201, prompt_tokens=40)
    assert r.ttft == pytest.approx(0.25)
    assert r.e2e == pytest.approx(2.25)
    assert r.decode_tps == pytest.approx(100.0)  # (201 - 1) / (12.25 - 10.25)


def _slow_start_batch() -> Batch:
    """Eight streams, TTFT 2 s (M1's C8 shape), 256 tokens each decoded in 2.55 s, usage 0.05 s later."""
    return Batch(8, [RequestTiming(0.0, 2.0, 4.6, 256, 40, last_token=4.55) for _ in range(8)], trial=1)


def test_the_two_aggregates_differ_by_the_ttft_and_are_never_mixed() -> None:
    batch = _slow_start_batch()
    assert batch.aggregate_tps == pytest.approx(8 * 256 / 4.6)  # batch: first send → last done
    assert batch.post_first_token_tps == pytest.approx(8 * 255 / 2.55)  # sparkDash: first → last content
    assert batch.post_first_token_tps > 1.5 * batch.aggregate_tps
    coding = LevelResult(load_builtin("coding"), 8, [batch])
    prose = LevelResult(load_builtin("prose"), 8, [batch])
    assert (coding.definition, prose.definition) == ("batch", "post-first-token")
    assert coding.samples == [pytest.approx(batch.aggregate_tps)]
    assert prose.samples == [pytest.approx(batch.post_first_token_tps)]
    data = prose.to_dict()
    assert data["definition"] == "post-first-token" and "sparkDash" in data["definition_text"]
    assert data["aggregate_means"]["batch"] == pytest.approx(batch.aggregate_tps, abs=1e-3)


def test_coding_c1_headline_is_decode_per_stream() -> None:
    lvl = LevelResult(load_builtin("coding"), 1)
    for rate in (78.0, 82.0, 80.0, 81.0, 84.0):
        lvl.batches.append(Batch(1, [RequestTiming(0.0, 0.25, 0.25 + 199 / rate, 200, 20)]))
    data = lvl.to_dict()
    assert data["definition"] == "decode-per-stream" and data["metric"] == "decode tok/s per stream"
    assert data["headline_tps"]["mean"] == pytest.approx(81.0)
    assert data["headline_tps"]["samples"] == [78.0, 82.0, 80.0, 81.0, 84.0]
    assert (data["headline_tps"]["min"], data["headline_tps"]["max"], data["headline_tps"]["n"]) == (
        78.0,
        84.0,
        5,
    )
    assert data["ttft_s"]["mean"] == pytest.approx(0.25)
    # Beside both R4 suites and every reference set of the same coding bytes (R4's sweep, Tony's four
    # runs, SG17 TP8), ratio of means; suite 1's published C1 range travels with it.
    pubs = {p["label"]: p for p in data["published"]}
    assert set(pubs) == {"R4 suite 1", "R4 suite 2", "R4 sweep", "Tony EXL3 rep 1", "Tony EXL3 rep 2",
                         "Tony EXL3", "Tony boot 10", "SG17 TP8"}
    assert pubs["R4 suite 1"]["low"] == 82.44 and pubs["R4 suite 1"]["high"] == 82.89
    assert pubs["R4 suite 2"]["ratio"] == pytest.approx(81.0 / 82.73, abs=1e-4)


def test_r4_trial_plan_gives_five_c1_and_three_waves() -> None:
    plan = bench.trial_plan([1, 4, 8], waves=3, c1_samples=5)
    assert plan == [[1, 4, 8], [8, 4, 1], [1, 4, 8], [1], [1]]  # R4: trial 2 reversed, 4–5 C1 only
    counts = {c: sum(c in t for t in plan) for c in (1, 4, 8)}
    assert counts == {1: 5, 4: 3, 8: 3}
    assert bench.trial_plan([4, 8], waves=3, c1_samples=5) == [[4, 8], [8, 4], [4, 8]]
    assert bench.trial_plan([1, 4], waves=2, c1_samples=2) == [[1, 4], [4, 1]]


def test_prompts_are_identical_across_repeats_and_tagged_as_each_publisher_tags_them() -> None:
    coding = load_builtin("coding")
    prompts = bench.prompts_for(coding, 8)
    assert prompts == bench.prompts_for(coding, 8)  # R4 reuses prefixes on purpose
    assert len(set(prompts)) == 8
    # The community runner: one prompt, its tag at the front (phase "run", category "coding").
    assert prompts[3] == "[bench v1 run coding c8 s3] " + coding.prompts[0]
    assert coding.warmup_prompts()[1][0].startswith("[bench v1 warm json c1 s0] Return only a JSON object")
    # sparkDash: C1 is the exact prompt, C>1 the stream suffix at the end.
    prose = load_builtin("prose")
    assert bench.prompts_for(prose, 1) == [prose.prompts[0]]
    assert bench.prompts_for(prose, 4)[2] == prose.prompts[0] + " (stream 3/4)"


def test_each_workload_sends_what_its_publishers_client_sends() -> None:
    # The community runner sends neither ignore_eos nor min_tokens; sparkDash forces 256 tokens.
    # Each turns thinking off with its own chat_template_kwargs.
    assert load_builtin("coding").extra == {"chat_template_kwargs": {"thinking": False}}
    off = {"enable_thinking": False, "thinking": False, "thinking_mode": "disabled"}
    assert load_builtin("prose").extra == {"top_p": 1, "min_tokens": 256, "ignore_eos": True, "stop": [],
                                           "chat_template_kwargs": off}
    assert load_builtin("coding").regime == "r4-repeat" and load_builtin("prose").regime == "sparkdash"


def test_builtin_workloads_are_pinned_and_hashed() -> None:
    for name in published.WORKLOADS:
        w = load_builtin(name)
        raw = resources.files("sparkctl.qa").joinpath("workloads", f"{name}.json").read_bytes()
        assert w.sha256 == hashlib.sha256(raw).hexdigest() == published.WORKLOAD_SHA256[name]
        assert w.kind == name and json.loads(raw)["name"] == name
    assert load_builtin("coding").max_tokens == 200  # R4's community workload length
    assert load_builtin("prose").max_tokens == 256  # sparkDash's


def test_option_parsing() -> None:
    assert bench.parse_concurrency("8,1,4,4,16") == [1, 4, 8, 16]
    for bad in ("", "0,4", "a,b"):
        with pytest.raises(InputError):
            bench.parse_concurrency(bad)


def test_c16_on_an_eight_slot_server_says_who_waited() -> None:
    lvl = LevelResult(load_builtin("prose"), 16, slots=8)
    lvl.batches.append(Batch(16, [RequestTiming(0.0, 0.2, 6.6, 256, 20) for _ in range(16)]))
    data = lvl.to_dict()
    assert data["queued"] == "8 of 16 requests wait for a slot (the server runs max_running_requests=8)"
    # M1 pins no sparkDash version or prompt: its C16 figure is listed, not compared.
    assert data["published"] == []
    (m1,) = data["published_not_compared"]
    assert m1["label"] == "M1" and m1["value"] == 134.2 and "does not pin" in m1["reason"]


def test_a_batch_with_a_failed_request_measures_nothing() -> None:
    good = Batch(2, [RequestTiming(0.0, 0.1, 2.1, 200, 9), RequestTiming(0.0, 0.1, 2.1, 200, 9)])
    bad = Batch(
        2, [RequestTiming(0.0, 0.1, 1.0, 200, 9), RequestTiming(0.0, None, 0.2, 0, 0, "503 lost node_rank 2")]
    )
    lvl = LevelResult(load_builtin("coding"), 2, [good, bad])
    assert not bad.ok and bad.errors == ["503 lost node_rank 2"]
    assert lvl.measured == [good]
    data = lvl.to_dict()
    assert data["headline_tps"]["mean"] == pytest.approx(400 / 2.1, rel=1e-3)
    assert (data["measured_batches"], data["failed_batches"]) == (1, 1)
    failed = LevelResult(load_builtin("coding"), 2, [bad])
    assert failed.mean is None and failed.to_dict()["headline_tps"] is None
    assert failed.to_dict()["ttft_s"] is None


def _answer(body: dict[str, Any]) -> list[bytes]:
    """One content chunk and the usage block, streamed."""
    usage = {"completion_tokens": body["max_tokens"], "prompt_tokens": 9}
    content = {"choices": [{"delta": {"content": "x"}}], "usage": None}
    return chunked(sse([content, {"choices": [], "usage": usage}]))


def test_requests_send_what_each_publishers_client_sends() -> None:
    coding, prose = load_builtin("coding"), load_builtin("prose")
    with scripted(_answer) as server:
        client = stream_client(Endpoint(server.root, "k", "m", False))
        batches = [
            asyncio.run(bench.run_batch(client, "m", bench.prompts_for(w, 2), w.max_tokens, extra=w.extra))
            for w in (coding, prose)
        ]
    assert all(b.ok for b in batches), [b.errors for b in batches]
    sent = [body for _, body in server.requests]
    community, sparkdash = sent[0], sent[2]  # a batch's two requests arrive in either order
    common = {"model", "messages", "max_tokens", "temperature", "stream", "stream_options"}
    assert community["stream"] is True and community["stream_options"] == {"include_usage": True}

    def beside(body: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in body.items() if k not in common}

    # The community runner: temperature 0, thinking off, nothing that forces the length.
    assert beside(community) == {"chat_template_kwargs": {"thinking": False}}
    assert community["max_tokens"] == 200 and community["temperature"] == 0
    # sparkDash's decode bench: min_tokens and ignore_eos at the budget, no stop, top_p 1.
    off = {"enable_thinking": False, "thinking": False, "thinking_mode": "disabled"}
    assert beside(sparkdash) == {"top_p": 1, "min_tokens": 256, "ignore_eos": True, "stop": [],
                                 "chat_template_kwargs": off}
    assert sorted(b["messages"][0]["content"][-13:] for b in sent[2:]) == [" (stream 1/2)", " (stream 2/2)"]


def test_every_known_difference_from_the_publishers_clients_is_written_down() -> None:
    # The fidelity rule: a deliberate difference is listed (and in every result), never silent.
    assert len(bench.DIFFERENCES) == 9
    text = " ".join(bench.DIFFERENCES)
    for topic in ("buildPrefillPrompt", "1aa50982", "HTTP 400", "200 tokens", "own streaming reader", "C16",
                  "eight categories", "--after-long", "/generate"):
        assert topic in text
    report = bench.BenchReport("e", "m", True, None, "now", [load_builtin("coding")], [1], 1, 1, "none")
    assert report.to_dict()["differences_from_the_publishers"] == list(bench.DIFFERENCES)
