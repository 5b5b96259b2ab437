"""`up`'s router gate on a site of several serving groups behind the router: after the last group is
ready, an `up` that covered every group waits (polled, bounded) until the router lists every
group's rank 0, and fails naming the router and the missing groups when it does not."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from sparkctl.errors import EXIT_FAILED, SparkctlError
from sparkctl.model import load_inventory
from sparkctl.render import plan_document
from sparkctl.serve import router_status, routergate
from sparkctl.serve.tools import Tools

REPO = Path(__file__).resolve().parents[2]
TWO_GROUPS = REPO / "inventory" / "examples" / "switch-2xtp4"
ROUTER = {"node": "spark-0", "port": 8889, "metrics_port": 29000, "policy": "round_robin",
          "package": "smg==1.13.0", "wheel_dir": "wheels"}


class Recorded:
    """An ``Output`` that keeps the lines it is told and draws nothing."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []

    def say(self, text: str, mark: str = "") -> None:
        self.said.append((mark, text))

    def note(self, text: str, mark: str = "") -> None: ...

    def falling_back(self, why: str) -> None: ...

    def preflight(self, checks: list[Any]) -> None: ...

    def playbook_event(self, ev: Any) -> None: ...

    @contextlib.contextmanager
    def watching(self, state: Any) -> Iterator[Callable[[Any], None]]:
        yield lambda s: None


class Closable:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Clock:
    """Time that moves only when the gate sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _rows(monkeypatch: pytest.MonkeyPatch, listed: Callable[[int, dict[str, str]], list[str] | None]
          ) -> list[int]:
    """``router_status.probe`` answering, on its Nth round, a router that lists ``listed(N,
    expected)`` (group -> rank-0 URL); the rounds asked, in order."""
    rounds: list[int] = []

    def probe(doc: dict[str, Any], fleet: Any, http: Any, api_key: str | None,
              timeout: float = 5.0) -> router_status.RouterFacts:
        entry = doc["router"]
        expected = {w["group"]: w["url"] for w in entry["workers"]}
        rounds.append(len(rounds) + 1)
        return router_status.RouterFacts(
            node=entry["node"], url=entry["url"], policy=entry["policy"], expected=expected,
            unit={"ActiveState": "active", "SubState": "running", "Result": "success"}, health=200,
            workers=listed(len(rounds), expected))

    monkeypatch.setattr(router_status, "probe", probe)
    return rounds


@pytest.fixture
def gate() -> Iterator[tuple[routergate.RouterGate, Clock, list[Closable]]]:
    site = load_inventory(TWO_GROUPS)
    opened: list[Closable] = []

    def closable(*_: Any) -> Any:
        opened.append(Closable())
        return opened[-1]

    clock = Clock()
    tools = Tools(fleet=closable, http=closable)
    yield (routergate.RouterGate(site, plan_document(site), tools, bound_s=30.0, poll_s=3.0,
                                 sleep=clock.sleep, clock=clock), clock, opened)


def test_the_gate_passes_once_the_router_lists_every_groups_rank_0(
        gate: tuple[routergate.RouterGate, Clock, list[Closable]], monkeypatch: pytest.MonkeyPatch) -> None:
    the_gate, clock, opened = gate
    # the router started with group a: it lists only a's rank 0 for two rounds, then both
    rounds = _rows(monkeypatch, lambda n, exp: [exp["a"]] if n < 3 else list(exp.values()))
    record = the_gate.wait()
    assert rounds == [1, 2, 3] and clock.sleeps == [3.0, 3.0]
    assert record["gate"] == "router" and record["seconds"] == 6.0 and record["rounds"] == 3
    assert record["node"] == "spark-0" and sorted(record["workers"]) == ["a", "b"]
    assert opened and all(c.closed for c in opened)


def test_a_router_that_never_lists_group_b_fails_naming_it(
        gate: tuple[routergate.RouterGate, Clock, list[Closable]], monkeypatch: pytest.MonkeyPatch) -> None:
    the_gate, clock, opened = gate
    rounds = _rows(monkeypatch, lambda n, exp: [exp["a"]])
    with pytest.raises(SparkctlError) as err:
        the_gate.wait()
    assert err.value.exit_code == EXIT_FAILED
    message = str(err.value)
    assert "router on spark-0" in message and "group b" in message and "group a" not in message
    assert "30 s" in message  # waited the whole bound, no longer
    assert len(rounds) == 11 and clock.now == 30.0
    assert "sparkctl up" in (err.value.hint or "") and "sparkctl-router" in (err.value.hint or "")
    assert any("does not list group b's rank 0" in d for d in err.value.details)
    assert all(c.closed for c in opened)


def test_a_router_that_lists_no_worker_misses_every_group(
        gate: tuple[routergate.RouterGate, Clock, list[Closable]], monkeypatch: pytest.MonkeyPatch) -> None:
    the_gate, _clock, _opened = gate
    _rows(monkeypatch, lambda n, exp: None)
    with pytest.raises(SparkctlError) as err:
        the_gate.wait()
    assert "group a" in str(err.value) and "group b" in str(err.value)


class JournalFleet(Closable):
    """A fleet whose router node answers ``journalctl`` with ``journal``; the commands it was given."""

    def __init__(self, journal: str) -> None:
        super().__init__()
        self.journal = journal
        self.asked: list[dict[str, str]] = []

    def run(self, cmds: dict[str, str], timeout: float = 0.0,
            only: list[str] | None = None) -> dict[str, Any]:
        self.asked.append(dict(cmds))
        return {node: SimpleNamespace(reachable=True, stdout=self.journal, error=None) for node in cmds}


def _gate_over(fleet: JournalFleet, bound_s: float) -> routergate.RouterGate:
    site = load_inventory(TWO_GROUPS)
    clock = Clock()
    tools = Tools(fleet=lambda *_: fleet, http=lambda *_: Closable())
    return routergate.RouterGate(site, plan_document(site), tools, bound_s=bound_s, poll_s=3.0,
                                 sleep=clock.sleep, clock=clock)


def test_a_router_that_keeps_exiting_fails_with_its_journal_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    last = "2026-12-06T20:00:00 sparkctl-router[7]: ERROR smg::server: Address already in use (os error 98)"
    # The gateway colours its log whatever it writes to (NO_COLOR or not): the tail shows the words.
    coloured = (last.replace("ERROR", "\x1b[31mERROR\x1b[0m")
                .replace("smg::server:", "\x1b[2msmg::server\x1b[0m\x1b[2m:\x1b[0m"))
    fleet = JournalFleet("".join(f"line {i}\n" for i in range(40)) + coloured + "\n")
    the_gate = _gate_over(fleet, bound_s=6.0)

    def probe(doc: dict[str, Any], *_: Any, **__: Any) -> router_status.RouterFacts:
        entry = doc["router"]
        return router_status.RouterFacts(
            node=entry["node"], url=entry["url"], policy=entry["policy"],
            expected={w["group"]: w["url"] for w in entry["workers"]},
            unit={"ActiveState": "activating", "SubState": "auto-restart", "Result": "exit-code"},
            error="ConnectError")

    monkeypatch.setattr(router_status, "probe", probe)
    with pytest.raises(SparkctlError) as err:
        the_gate.wait()
    details = err.value.details
    assert "router on spark-0: unit not running (activating/auto-restart, result exit-code)" in details
    at = details.index("log tail of the router on spark-0:")
    tail = details[at + 1:]
    assert len(tail) == routergate.JOURNAL_LINES and tail[-1] == f"    {last}"
    journal = ("journalctl -u sparkctl-router.service -n 15 --no-pager -o short-iso --no-hostname "
               "2>&1 || true\n")
    assert fleet.asked == [{"spark-0": journal}]
    assert fleet.closed


def test_a_running_router_that_misses_a_group_reads_no_journal(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = JournalFleet("not asked\n")
    the_gate = _gate_over(fleet, bound_s=3.0)
    _rows(monkeypatch, lambda n, exp: [exp["a"]])
    with pytest.raises(SparkctlError) as err:
        the_gate.wait()
    assert fleet.asked == [] and not any("log tail" in d for d in err.value.details)


# --- within `up` ------------------------------------------------------------------------------------


@pytest.fixture
def routed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The lab-shaped two-group site (``support.groups_site``) with the router on spark-0."""
    from support.groups_site import TwoGroupSite

    site = TwoGroupSite(tmp_path, monkeypatch)
    gv = next(site.inventory.glob("group_vars/all/*.yml"))
    doc = yaml.safe_load(gv.read_text())
    doc["sparkctl_router"] = ROUTER
    gv.write_text(yaml.safe_dump(doc))
    site.cluster = load_inventory(site.inventory)
    monkeypatch.setattr(routergate, "POLL_S", 0.0)
    return site


def test_up_of_every_group_waits_for_the_router_after_the_last_group(
        routed: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkctl.serve.up import up_groups

    rounds = _rows(monkeypatch, lambda n, exp: [exp["a"]] if n < 2 else list(exp.values()))
    out = Recorded()
    gates: dict[str, Any] = {}
    seen = []
    for t, _per, _result in up_groups(routed.cluster, routed.tools, out, gates=gates):
        seen.append((t.group, list(rounds)))
    assert seen == [("a", []), ("b", [])]  # no round before the last group is up
    assert rounds == [1, 2] and gates["router"]["rounds"] == 2
    assert any("routes to every group (a, b)" in text for _, text in out.said)


def test_up_of_one_group_does_not_wait_for_the_router(routed: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkctl.serve.up import up_groups

    rounds = _rows(monkeypatch, lambda n, exp: [exp["a"]])
    gates: dict[str, Any] = {}
    assert [t.group for t, _, _ in up_groups(routed.cluster, routed.tools, Recorded(), ["a"], gates=gates)] \
        == ["a"]
    assert rounds == [] and gates == {}


def test_up_json_records_the_router_gate_and_fails_naming_the_missing_group(
        routed: Any, monkeypatch: pytest.MonkeyPatch, run_cli: Callable[..., Any]) -> None:
    rounds = _rows(monkeypatch, lambda n, exp: list(exp.values()))
    res = run_cli("-i", str(routed.inventory), "--json", "up", "--yes")
    assert res.code == 0, res.out + res.err
    doc = json.loads(res.out)
    assert sorted(doc["groups"]) == ["a", "b"] and rounds == [1]
    assert doc["router"]["gate"] == "router" and doc["router"]["seconds"] >= 0

    monkeypatch.setattr(routergate, "GATE_S", 0.0)
    rounds = _rows(monkeypatch, lambda n, exp: [exp["a"]])
    res = run_cli("-i", str(routed.inventory), "--json", "up", "--yes")
    assert res.code == EXIT_FAILED, res.out + res.err
    error = json.loads(res.out)["error"]
    assert "group b" in error["message"] and "router on spark-0" in error["message"], error
    assert rounds == [1]  # a bound of 0 s: one look, no wait
