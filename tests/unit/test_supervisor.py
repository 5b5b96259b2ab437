"""The supervisor's decisions with fakes: trigger → action, the breaker's window, the admin's pause,
the event log, the canary and the notification hook."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkctl.model.cluster import Supervisor as Settings
from sparkctl.serve import events, supervisor
from sparkctl.serve.probe import NodeFacts
from sparkctl.serve.supervisor import NONE, OPEN, RESTART, START, STOP, Brain, Observation, observe
from sparkctl.serve.verdict import GIB, Snapshot

NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]
FLOOR_GIB = 4.0


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def facts(units: dict[str, str] | None = None, gone: dict[str, str] | None = None,
          mem_gib: dict[str, float] | None = None, result: str = "success") -> dict[str, NodeFacts]:
    out = {}
    for rank, name in enumerate(NODES):
        if name in (gone or {}):
            out[name] = NodeFacts(name, rank, False, (gone or {})[name])
            continue
        state = (units or {}).get(name, "active")
        out[name] = NodeFacts(name, rank, True, None, {
            "unit": {"active": state, "sub": "running", "result": result if state == "failed" else "success"},
            "mem": {"MemAvailable": int((mem_gib or {}).get(name, 20.0) * GIB)},
        })
    return out


def snap(**kw: Any) -> Snapshot:
    return Snapshot(facts(**kw), None, "ready", [])


def obs(canary: tuple[bool, str] | None = (True, "3 tokens"), **kw: Any) -> Observation:
    s = snap(**kw)
    return observe(s, canary if supervisor.all_running(s) else None, FLOOR_GIB)


def brain(**kw: Any) -> Brain:
    args = {"max_restarts": 3, "window_s": 600.0, "failures": 3, "autostart": False} | kw
    return Brain(**args)


# --- trigger → action --------------------------------------------------------------------------


def test_a_serving_group_is_left_alone_and_logged_once() -> None:
    b = brain()
    first = b.decide(obs(), 0.0)
    again = b.decide(obs(), 10.0)
    assert (first.kind, first.action, first.log) == ("serving", NONE, True)
    assert (again.kind, again.action, again.log) == ("serving", NONE, False)


@pytest.mark.parametrize(("state", "result"), [("failed", "exit-code"), ("failed", "signal"),
                                               ("inactive", "success")])
def test_a_rank_unit_that_exited_restarts_the_whole_group(state: str, result: str) -> None:
    d = brain().decide(obs(units={"spark-2": state}, result=result), 0.0)
    assert (d.kind, d.action, d.node) == ("unit-exited", RESTART, "spark-2")
    assert "rank 2 unit " + state in d.evidence and "3 of 4 ranks run" in d.evidence


def test_every_unit_failed_is_a_crash_and_restarts() -> None:
    d = brain().decide(obs(units=dict.fromkeys(NODES, "failed")), 0.0)
    assert (d.kind, d.action) == ("unit-exited", RESTART)


def test_memory_under_the_floor_restarts() -> None:
    d = brain().decide(obs(mem_gib={"spark-1": 3.5}), 0.0)
    assert (d.kind, d.action, d.node) == ("memory", RESTART, "spark-1")
    assert "3.50 GiB under the floor 4.00 GiB" in d.evidence


def test_the_canary_restarts_only_after_n_misses_in_a_row() -> None:
    b = brain(failures=3)
    miss = (False, "answered with zero tokens")
    assert b.decide(obs(canary=miss), 0).action == NONE
    assert b.decide(obs(canary=miss), 1).action == NONE
    assert b.decide(obs(), 2).kind == "serving"  # a good answer resets the count
    assert [b.decide(obs(canary=miss), t).action for t in (3, 4, 5)] == [NONE, NONE, RESTART]
    d = b.decide(obs(canary=miss), 6)
    assert d.action == NONE  # counting starts over after the restart


def test_a_node_that_stops_answering_stops_the_rest_then_restarts_when_it_answers() -> None:
    b = brain(failures=2)
    gone = {"spark-2": "connection timed out"}
    first = b.decide(obs(gone=gone), 0)
    assert (first.kind, first.action, first.log) == ("suspect", NONE, True)
    d = b.decide(obs(gone=gone), 1)
    assert (d.kind, d.action, d.node) == ("dead-rank", STOP, "spark-2")
    # The rest was stopped: the group is down while spark-2 is away; nothing is started.
    down = {n: "inactive" for n in NODES if n != "spark-2"}
    assert b.decide(obs(gone=gone, units=down), 2).kind == "waiting"
    assert b.decide(obs(gone=gone, units=down), 3).action == NONE
    # spark-2 answers again: the group owes a restart.
    back = b.decide(obs(units=dict.fromkeys(NODES, "inactive")), 4)
    assert (back.kind, back.action) == ("retry", RESTART)
    assert "spark-2 answers again" in back.evidence


def test_the_controller_losing_its_network_restarts_nothing() -> None:
    b = brain(failures=1)
    lost = dict.fromkeys(NODES, "no route to host")
    decisions = [b.decide(obs(gone=lost), t) for t in range(10)]
    assert {d.action for d in decisions} == {NONE}
    assert [d.log for d in decisions].count(True) == 1 and decisions[0].kind == "unreachable"
    assert b.decide(obs(), 11).kind == "serving"  # back, still serving: nothing to do
    assert b.breaker.restarts == []


def test_a_stopped_group_waits_for_up_without_autostart() -> None:
    d = brain().decide(obs(units=dict.fromkeys(NODES, "inactive")), 0)
    assert (d.kind, d.action) == ("down", NONE)


def test_autostart_brings_the_group_up_after_a_power_cut_once_all_four_answer() -> None:
    b = brain(autostart=True)
    assert b.decide(obs(), 0).kind == "serving"  # serving: disarmed
    off = dict.fromkeys(NODES, "no route to host")
    assert b.decide(obs(gone=off), 1).action == NONE
    three = {"spark-3": "connection refused"}
    down = dict.fromkeys(NODES, "inactive")
    assert b.decide(obs(gone=three, units=down), 2).action == NONE  # waits for all four
    d = b.decide(obs(units=down), 3)
    assert (d.kind, d.action) == ("autostart", START)


def test_autostart_at_boot_starts_a_stopped_group_and_off_it_does_not() -> None:
    down = dict.fromkeys(NODES, "inactive")
    assert brain(autostart=True).decide(obs(units=down), 0).action == START
    assert brain(autostart=False).decide(obs(units=down), 0).action == NONE


def test_the_pause_resets_everything_and_is_logged_once() -> None:
    b = brain(autostart=True)
    b.retry = "pending"
    first = b.paused("2026-01-01T00:00:00Z")
    again = b.paused("2026-01-01T00:00:00Z")
    assert first.log and not again.log and first.action == NONE
    assert b.retry is None and not b.armed


# --- the breaker's window ------------------------------------------------------------------------


def test_the_breaker_opens_on_the_restart_past_max_within_the_window() -> None:
    b = brain(max_restarts=2, window_s=100.0)
    exited = obs(units={"spark-2": "failed"})
    assert b.decide(exited, 0).action == RESTART
    assert b.decide(exited, 30).action == RESTART
    d = b.decide(exited, 60)
    assert (d.kind, d.action) == ("unit-exited", OPEN) and b.breaker.is_open and b.breaker.open_since == 60
    assert "2 restarts within 100 s, then unit-exited on spark-2: rank 2 unit failed" in (b.breaker.why or "")
    # Open: nothing else happens, whatever the nodes say.
    assert b.decide(obs(units=dict.fromkeys(NODES, "failed")), 61).action == NONE


def test_restarts_older_than_the_window_no_longer_count() -> None:
    b = brain(max_restarts=2, window_s=100.0)
    exited = obs(units={"spark-2": "failed"})
    # At 120 the restart at 0 has left the window (one left in it); at 140 two are in it.
    assert [b.decide(exited, t).action for t in (0, 50, 120, 140)] == [RESTART, RESTART, RESTART, OPEN]
    assert b.breaker.restarts == [50, 120]


# --- the loop with fakes ---------------------------------------------------------------------------


class World:
    """Four nodes whose units the fake `down` and `up` set, with a clock that only sleeps move."""

    def __init__(self) -> None:
        self.units = dict.fromkeys(NODES, "active")
        self.now = 1_000_000.0
        self.calls: list[str] = []
        self.notified: list[dict[str, Any]] = []
        self.start_fails = False

    def snapshot(self) -> Snapshot:
        self.calls.append("probe")
        return snap(units=self.units)

    def stop(self) -> str:
        self.calls.append("down")
        self.units = dict.fromkeys(NODES, "inactive")
        return "all 4 ranks stopped"

    def start(self) -> str:
        self.calls.append("up")
        if self.start_fails:
            raise RuntimeError("preflight refused the start: spark-3 unreachable")
        self.units = dict.fromkeys(NODES, "active")
        return "ready"

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def actions(self) -> supervisor.Actions:
        return supervisor.Actions(self.snapshot, lambda: (True, "2 tokens in 0.01 s"), self.stop, self.start,
                                  self.notify, self.sleep, lambda: self.now)

    def notify(self, record: Any) -> list[str]:
        self.notified.append(dict(record))
        return []


def make(world: World, **settings: Any) -> supervisor.Supervisor:
    conf = Settings(**({"interval_s": 5, "settle_s": 2, "max_restarts": 2, "window_s": 600} | settings))
    return supervisor.Supervisor("lab", conf, False, FLOOR_GIB, world.actions())


def test_a_killed_rank_is_detected_then_the_group_goes_down_then_up_in_that_order() -> None:
    world = World()
    sup = make(world)
    assert sup.tick().kind == "serving"
    world.units["spark-2"] = "failed"
    d = sup.tick()
    assert d.action == RESTART
    assert world.calls == ["probe", "probe", "down", "up"]
    log = events.EventLog("lab").read()
    kinds = [r["kind"] for r in log]
    assert kinds == ["serving", "unit-exited", "restart", "down", "up"]
    times = [r["time"] for r in log]
    assert times == sorted(times)
    up = log[-1]
    assert up["seconds"] == 0 and up["action"] == "start"
    assert log[-2]["evidence"] == "all 4 ranks stopped"
    # The settle pause sat between down and up.
    assert world.now == 1_000_000.0 + 2
    assert [r["kind"] for r in world.notified] == ["restart"]


def test_the_breaker_opens_stops_the_group_and_the_foreground_exits_3(state: Path) -> None:
    world = World()
    sup = make(world, max_restarts=1)
    stop = threading.Event()

    def kill_again(seconds: float) -> None:
        world.now += seconds
        if all(u == "active" for u in world.units.values()):
            world.units["spark-2"] = "failed"

    sup.act.sleep = kill_again
    world.units["spark-2"] = "failed"
    rc = sup.run(stop.is_set)
    assert rc == 3
    assert world.calls.count("up") == 1 and world.calls[-1] == "down"
    assert set(world.units.values()) == {"inactive"}
    saved = events.load_breaker("lab")
    assert saved.is_open and "1 restarts within 600 s" in (saved.why or "")
    assert [r["kind"] for r in world.notified] == ["restart", "breaker-open"]
    reason = events.breaker_reason(events.supervisor_notes("lab")) or ""
    assert reason.startswith("supervisor: circuit breaker open since")
    # A new supervisor reads the breaker from disk: it does nothing and exits 3 at once.
    world.calls.clear()
    assert make(world, max_restarts=1).run(stop.is_set) == 3
    assert world.calls == []


def test_the_breaker_counts_across_supervisor_restarts() -> None:
    world = World()
    world.units["spark-1"] = "failed"
    make(world, max_restarts=2).tick()
    world.units["spark-1"] = "failed"
    d = make(world, max_restarts=2).tick()  # a fresh process: the first restart is on disk
    assert d.action == RESTART
    world.units["spark-1"] = "failed"
    assert make(world, max_restarts=2).tick().action == OPEN


def test_a_failed_start_is_retried_and_counts() -> None:
    world = World()
    world.start_fails = True
    sup = make(world, max_restarts=2)
    world.units["spark-2"] = "failed"
    sup.tick()
    assert sup.brain.retry and "preflight refused" in sup.brain.retry
    d = sup.tick()
    assert (d.kind, d.action) == ("retry", RESTART)
    assert sup.tick().action == OPEN
    ups = [r for r in events.EventLog("lab").read() if r["kind"] == "up"]
    assert ups and all(r["evidence"].startswith("failed: preflight refused") for r in ups)


def test_the_admins_down_pauses_healing_until_the_next_up() -> None:
    world = World()
    sup = make(world)
    events.pause("lab", "sparkctl down")
    world.units = dict.fromkeys(NODES, "failed")
    d = sup.tick()
    assert d.kind == "paused" and world.calls == []  # not even probed
    events.resume("lab")
    assert sup.tick().action == RESTART


def test_a_start_or_stop_in_progress_is_never_judged() -> None:
    world = World()
    sup = make(world)
    world.units["spark-2"] = "failed"
    with events.lifecycle("lab", "sparkctl up"):
        d = sup.tick()
    assert d.kind == "busy" and "sparkctl up" in d.evidence and world.calls == []


def test_a_restart_that_finds_the_group_busy_is_not_done_and_not_counted() -> None:
    world = World()
    sup = make(world)
    world.units["spark-2"] = "failed"
    decision = sup.brain.decide(supervisor.observe(world.snapshot(), None, FLOOR_GIB), world.now)
    assert decision.action == RESTART and len(sup.brain.breaker.restarts) == 1
    with events.lifecycle("lab", "sparkctl down"):
        sup._act(decision)
    assert "down" not in world.calls and sup.brain.breaker.restarts == []
    assert events.EventLog("lab").read()[-1]["kind"] == "busy"


def test_a_second_supervisor_is_refused() -> None:
    with events.single_watch("lab"), pytest.raises(events.Busy) as busy, events.single_watch("lab"):
        pass
    assert "sparkctl watch" in busy.value.holder


# --- events file -----------------------------------------------------------------------------------


def test_events_are_jsonl_with_the_documented_fields(state: Path) -> None:
    log = events.EventLog("lab")
    log.append(events.Event("unit-exited", "rank 2 unit failed", "restart", "spark-2"))
    log.append(events.Event("up", "ready", "start", None, 12.345))
    path = state / "supervisor" / "lab" / "events.jsonl"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert list(lines[0]) == ["time", "kind", "node", "evidence", "action"]
    assert lines[1]["seconds"] == 12.35 and lines[0]["time"].endswith("Z")
    assert events.format_event(lines[0]).endswith("spark-2: rank 2 unit failed → restart")


def test_follow_prints_what_is_appended(state: Path) -> None:
    log = events.EventLog("lab")
    log.append(events.Event("serving", "canary ok"))
    seen: list[str] = []
    done = threading.Event()

    def emit(record: dict[str, Any]) -> None:
        seen.append(record["kind"])
        if len(seen) == 3:
            done.set()

    t = threading.Thread(target=log.follow, args=(emit, done.is_set, 0.02), daemon=True)
    t.start()
    time.sleep(0.1)
    log.append(events.Event("unit-exited", "rank 2"))
    log.append(events.Event("restart", "unit-exited"))
    t.join(5)
    assert seen == ["serving", "unit-exited", "restart"]


# --- canary and notification --------------------------------------------------------------------


class Cluster:
    """Just what canary() reads."""

    def __init__(self) -> None:
        from sparkctl.model.cluster import Ports

        self.ports = Ports(dist_init=5000, api=30000, nccl_test=5001)
        self.head = type("H", (), {"mgmt_ip": "192.0.2.10"})()


def _client(handler: Any) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(("answer", "ok", "says"), [
    ({"choices": [{"message": {"content": "OK"}}], "usage": {"completion_tokens": 2}}, True, "2 tokens"),
    ({"choices": [{"message": {"content": ""}}], "usage": {"completion_tokens": 0}}, False, "zero tokens"),
    ({"error": "x"}, False, "not a chat completion"),
])
def test_canary_must_produce_tokens_and_never_shows_the_key(
    monkeypatch: pytest.MonkeyPatch, answer: dict[str, Any], ok: bool, says: str
) -> None:
    monkeypatch.setattr(supervisor, "api_url", lambda c: "http://head:30000")
    monkeypatch.setattr(supervisor, "served_model_name", lambda c: "m")
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, json=answer)

    result = supervisor.canary(object(), _client(handler), "sk-secret-key")
    assert result[0] is ok and says in result[1] and "sk-secret" not in result[1]
    assert seen[0].headers["authorization"] == "Bearer sk-secret-key"
    assert json.loads(seen[0].content)["max_tokens"] <= 8


def test_canary_says_why_http_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "api_url", lambda c: "http://head:30000")
    monkeypatch.setattr(supervisor, "served_model_name", lambda c: "m")
    assert supervisor.canary(object(), _client(lambda r: httpx.Response(503)), None) == (False, "HTTP 503")


def test_notify_runs_the_command_without_a_shell_with_the_event_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "got.json"
    script = tmp_path / "hook.py"
    script.write_text(f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read())\n")
    conf = Settings(notify_command=[sys.executable, str(script), "$(touch /tmp/never)"])
    record = {"time": "t", "kind": "restart", "node": "spark-2", "evidence": "e", "action": "restart"}
    assert supervisor.notify(conf, record, "lab", _client(lambda r: httpx.Response(200))) == []
    assert json.loads(out.read_text()) == {"cluster": "lab", **record}


def test_notify_posts_the_webhook_and_reports_failures_without_the_url() -> None:
    got: list[dict[str, Any]] = []

    def handler(req: httpx.Request) -> httpx.Response:
        got.append(json.loads(req.content))
        return httpx.Response(500)

    conf = Settings.model_validate({"notify_webhook": "https://hooks.example.net/T0KEN",
                                    "notify_command": ["/nonexistent/hook"]})
    failed = supervisor.notify(conf, {"kind": "breaker-open"}, "lab", _client(handler))
    assert got == [{"cluster": "lab", "kind": "breaker-open"}]
    assert failed == ["notify_command: FileNotFoundError", "notify_webhook: HTTP 500"]
    assert not any("T0KEN" in f for f in failed)
