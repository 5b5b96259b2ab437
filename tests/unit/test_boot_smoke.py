"""m1-1m's boot smoke, warm-up and garbage-output guard (``gates.smoke``): the publisher's requests,
byte for byte, against a fake HTTP endpoint and against the rank simulator's model in-process; and
the guard in `up`'s boot watch."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.gates_fakes import API_KEY, FakeApi, FakeClock, FakeNodes, lab_cluster

from sparkctl.profiles import load_profile
from sparkctl.serve import bootwatch
from sparkctl.serve.smoke import batch_prompts, looks_like_latin_prose, run_smoke, warmup_prompt
from sparkctl_sim.knobs import Knobs
from sparkctl_sim.model import Responder
from sparkctl_sim.prompt import read_prompt

M1 = load_profile("m1-1m")
SMOKE = M1.gates.smoke
URL = "http://head:8888"
# What the publisher's boot.py smoke() sends (the quick smoke of the head, SMOKE_QUICK=1).
PUBLISHED_SMOKE_BODY = {
    "model": "deepseek-v4.1-flash", "temperature": 0, "max_tokens": 32,
    "chat_template_kwargs": {"thinking": False},
    "messages": [{"role": "user", "content": "What is 19 + 23? Reply only with the number."}],
}
PUBLISHED_FILLER = ("The quick brown fox jumps over the lazy dog near the riverbank "
                    "while the sun sets slowly behind the distant hills. ")
CJK_GARBAGE = "的的的 ##### 的的"


class Endpoint:
    """A chat endpoint answering each request with ``answer(body)``; keeps every body it got."""

    def __init__(self, answer: Any) -> None:
        self.answer, self.lock = answer, threading.Lock()
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/chat/completions"
        body = json.loads(request.content)
        with self.lock:
            self.bodies.append(body)
        content, reason = self.answer(body)
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": content},
                                                      "finish_reason": reason}]})

    def run(self, batch_size: int = 8) -> Any:
        assert SMOKE is not None
        with httpx.Client(transport=httpx.MockTransport(self)) as http:
            return run_smoke(http, URL, {}, "deepseek-v4.1-flash", SMOKE, batch_size)


def _good(body: dict[str, Any]) -> tuple[str, str]:
    text = body["messages"][0]["content"]
    if "19 + 23" in text:
        return "42", "stop"
    return "A hash table keeps colliding keys in a chain, or probes for the next free slot.", "stop"


def _garbage_in_batch(body: dict[str, Any]) -> tuple[str, str]:
    if body["max_tokens"] == 48:  # the batch's budget
        return CJK_GARBAGE, "length"
    return _good(body)


def test_the_smoke_sends_the_publishers_requests_and_passes_good_answers() -> None:
    ep = Endpoint(_good)
    result = ep.run()
    assert result.ok, result.detail
    assert ep.bodies[0] == PUBLISHED_SMOKE_BODY
    warm = ep.bodies[1:5]
    assert [b["max_tokens"] for b in warm] == [24] * 4
    assert warm[1]["messages"][0]["content"] == (
        PUBLISHED_FILLER * (200 // 20 + 1) + "Summarise the text above in one sentence.")
    batch = ep.bodies[5:]
    assert len(batch) == 8 and all(b["max_tokens"] == 48 and b["temperature"] == 0 for b in batch)
    assert sorted({b["messages"][0]["content"] for b in batch}) == sorted(SMOKE.batch.prompts)  # type: ignore[union-attr]
    assert "batch of 8 answered prose" in result.detail


def test_garbage_from_a_concurrent_batch_fails_the_guard() -> None:
    result = Endpoint(_garbage_in_batch).run()
    assert not result.ok
    assert "8/8 requests of a concurrent batch of 8 did not answer Latin prose" in result.detail
    assert CJK_GARBAGE[:10] in result.detail


def test_a_wrong_or_unfinished_arithmetic_answer_fails_the_smoke() -> None:
    wrong = Endpoint(lambda b: ("The answer is 42.", "stop")).run()
    assert not wrong.ok and "expected exactly '42'" in wrong.detail
    cut = Endpoint(lambda b: ("42", "length")).run()
    assert not cut.ok and "finish_reason 'length'" in cut.detail


def test_failed_warmup_requests_are_warnings_only() -> None:
    def flaky(body: dict[str, Any]) -> tuple[str, str]:
        if body["max_tokens"] == 24:
            raise httpx.ReadTimeout("slow")
        return _good(body)

    result = Endpoint(flaky).run()
    assert result.ok
    assert len(result.warnings) == 4 and "warm-up prompt (~12 words) failed" in result.warnings[0]


@pytest.mark.parametrize(("text", "prose"), [
    ("Light scatters off air molecules; blue light scatters most.", True),
    ("42", True),
    ("", False),
    ("   ", False),
    ("!!!!!!!!!!!!", True),  # the publisher counts "!" as punctuation
    ("#&#&#&@@", False),
    ("Hello 世界", False),
    ("안녕하세요", False),
    ("€€€€ ab", False),
])
def test_latin_prose(text: str, prose: bool) -> None:
    assert looks_like_latin_prose(text) is prose


def test_batch_and_warmup_prompts() -> None:
    assert SMOKE is not None and SMOKE.batch is not None and SMOKE.warmup is not None
    assert batch_prompts(SMOKE.batch, 8) == SMOKE.batch.prompts * 2
    assert batch_prompts(SMOKE.batch, 0) == SMOKE.batch.prompts[:1]
    assert warmup_prompt(SMOKE.warmup.filler, "S", 12) == PUBLISHED_FILLER + "S"


class SimEndpoint(Endpoint):
    """The rank simulator's own model answering in-process; the batch's requests arrive together
    (a barrier), so the model sees all of them running at once."""

    def __init__(self, faults: frozenset[str], batch: int = 8) -> None:
        self.responder = Responder(Knobs(faults=faults), "deepseek-v4.1-flash")
        self.barrier = threading.Barrier(batch, timeout=10)
        super().__init__(self.reply)

    def reply(self, body: dict[str, Any]) -> tuple[str, str]:
        running = 1
        if body["max_tokens"] == 48:
            self.barrier.wait()
            running = self.barrier.parties
        prompt = read_prompt(body["messages"], None)
        out = self.responder.reply(body, prompt, body["max_tokens"], running=running)
        return out.content or "", out.finish_reason


def test_the_simulator_answers_the_smoke_and_its_garbage_fault_trips_the_guard() -> None:
    good = SimEndpoint(frozenset()).run()
    assert good.ok, good.detail
    bad = SimEndpoint(frozenset({"garbage-at-batch"})).run()
    assert not bad.ok and "did not answer Latin prose" in bad.detail


# --- in `up`'s boot watch ------------------------------------------------------------------------


def _lab_with_smoke(tmp_path: Path) -> tuple[Any, dict[str, Any], FakeNodes, FakeApi]:
    assert SMOKE is not None
    cluster, doc = lab_cluster(tmp_path, {"gates": {"smoke": SMOKE.model_dump()}})
    nodes = FakeNodes([n.name for n in cluster.nodes], {n.name: n.rank for n in cluster.nodes})

    def boots(mode: str, n: int, state: dict[str, Any]) -> None:
        for st in state.values():
            st.unit = "active"
            st.markers = {m.pattern: 1 for m in cluster.profile.gates.log_markers}

    nodes.on_round = boots
    return cluster, doc, nodes, FakeApi(cluster, doc)


def _watch(lab: Any, tmp_path: Path) -> bootwatch.BootWatch:
    cluster, doc, nodes, api = lab
    clock = FakeClock()
    return bootwatch.BootWatch(cluster, doc, nodes, api.client(), API_KEY, record_dir=tmp_path / "rec",
                               clock=clock, sleep=clock.sleep)


def test_up_runs_the_profiles_smoke_and_records_it(tmp_path: Path) -> None:
    lab = _lab_with_smoke(tmp_path)
    _cluster, _doc, _nodes, api = lab
    state = _watch(lab, tmp_path).run()
    assert state.done
    chat = [json.loads(r.content) for r in api.requests if r.url.path == "/v1/chat/completions"]
    assert chat[0]["messages"] == PUBLISHED_SMOKE_BODY["messages"]
    batch = lab[0].profile.max_running_requests
    assert len(chat) == 1 + 4 + batch
    record = json.loads((tmp_path / "rec" / "smoke.json").read_text())
    assert record["ok"] and len(record["requests"]) == len(chat)


def test_up_fails_when_the_batch_answers_garbage(tmp_path: Path) -> None:
    lab = _lab_with_smoke(tmp_path)
    api = lab[3]

    class Garbage(FakeApi):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            if request.url.path == "/v1/chat/completions" and json.loads(request.content)["max_tokens"] == 48:
                self.requests.append(request)
                return httpx.Response(200, json={"choices": [{"message": {"content": CJK_GARBAGE},
                                                              "finish_reason": "length"}]})
            return super().__call__(request)

    garbage = Garbage(lab[0], lab[1])
    garbage.health, garbage.ready = api.health, api.ready
    with pytest.raises(bootwatch.GateFailure) as err:
        _watch((lab[0], lab[1], lab[2], garbage), tmp_path).run()
    assert "did not answer Latin prose" in str(err.value)
    assert json.loads((tmp_path / "rec" / "smoke.json").read_text())["ok"] is False
