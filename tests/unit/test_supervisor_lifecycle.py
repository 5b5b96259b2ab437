"""The supervisor (its real loop and decisions) against the admin's lifecycle commands, a probe that
times out on one node, and clock steps — with a stand-in fleet, probe, canary and clocks.

* every admin command that stops, replaces or removes ranks runs in ``serve.admin.lifecycle``: the
  lock held and healing paused while it runs (a tick does nothing, autostart never fires), healing
  left as the command promises, and a supervisor action decided before it is void;
* a probe error on one node is acted on only when the canary fails too;
* pacing and the breaker's window are on the monotonic clock; the wall clock only stamps events.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from sparkctl.model.cluster import Supervisor as Settings
from sparkctl.serve import admin, events, supervisor
from sparkctl.serve.probe import NodeFacts
from sparkctl.serve.supervisor import NONE, OPEN, RESTART, START, STOP
from sparkctl.serve.verdict import GIB, Snapshot

NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]
FLOOR_GIB = 4.0
NAME = "lab"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


class World:
    """Four nodes; `down` and `up` set their units. Two clocks: ``mono`` moves only with sleeps (and
    what a test adds), ``wall`` is the controller's clock, which a test may step."""

    def __init__(self, units: str = "active") -> None:
        self.units = dict.fromkeys(NODES, units)
        self.gone: dict[str, str] = {}
        self.canary_ok = True
        self.mono = 5_000.0
        self.wall = 1_780_000_000.0
        self.calls: list[str] = []
        self.slept: list[float] = []
        self.during_probe: Any = None

    def snapshot(self) -> Snapshot:
        self.calls.append("probe")
        nodes = {}
        for rank, name in enumerate(NODES):
            if name in self.gone:
                nodes[name] = NodeFacts(name, rank, False, self.gone[name])
                continue
            nodes[name] = NodeFacts(name, rank, True, None, {
                "unit": {"active": self.units[name], "sub": "running", "result": "success"},
                "mem": {"MemAvailable": 20 * GIB}})
        if self.during_probe is not None:  # what happens while the probe's answers travel back
            self.during_probe()
        return Snapshot(nodes, None, "ready", [])

    def canary(self) -> tuple[bool, str]:
        self.calls.append("canary")
        return (True, "2 tokens in 0.10 s") if self.canary_ok else (False, "ReadTimeout")

    def stop(self) -> str:
        self.calls.append("down")
        self.units = dict.fromkeys(NODES, "inactive")
        return "all 4 ranks stopped"

    def start(self) -> str:
        self.calls.append("up")
        self.units = dict.fromkeys(NODES, "active")
        return "ready"

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.mono += seconds
        self.wall += seconds

    def actions(self) -> supervisor.Actions:
        return supervisor.Actions(self.snapshot, self.canary, self.stop, self.start, lambda record: [],
                                  self.sleep, clock=lambda: self.mono, wall=lambda: self.wall)

    def acted(self) -> list[str]:
        return [c for c in self.calls if c in ("down", "up")]


def make(world: World, autostart: bool = False, **settings: Any) -> supervisor.Supervisor:
    conf = Settings(**({"interval_s": 10, "settle_s": 0, "max_restarts": 2, "window_s": 600,
                        "canary_failures": 2} | settings))
    return supervisor.Supervisor(NAME, conf, autostart, FLOOR_GIB, world.actions())


def kinds() -> list[str]:
    return [r["kind"] for r in events.EventLog(NAME).read()]


# --- one lifecycle path: lock held, healing paused, a stated end ----------------------------------

VERBS = {  # verb: (healing on success, on failure)
    "up": (admin.RESUMED, admin.AS_BEFORE),
    "down": (admin.PAUSED, admin.PAUSED),
    "upgrade": (admin.RESUMED, admin.PAUSED),
    "reset": (admin.PAUSED, admin.PAUSED),
}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_tick_while_an_admin_command_runs_does_nothing_and_autostart_never_fires(verb: str) -> None:
    world = World(units="inactive")  # the group down (nodes rebooting, units removed): autostart's case
    sup = make(world, autostart=True)
    after, failure = VERBS[verb]
    with admin.lifecycle(NAME, verb, healing_after=after, healing_on_failure=failure):
        assert (events.lifecycle_busy(NAME) or "").startswith(f"sparkctl {verb} (pid")
        decisions = [sup.tick() for _ in range(3)]
        # A decision taken just before the command started finds the lock held: nothing is done.
        sup._act(supervisor.Decision("autostart", "all 4 nodes answer", START))
    assert {d.kind for d in decisions} == {"paused"} and {d.action for d in decisions} == {NONE}
    assert world.calls == [] and world.units == dict.fromkeys(NODES, "inactive")
    assert "autostart" not in kinds() and kinds()[-1] == f"admin-{verb}"


def test_an_admin_command_that_started_after_the_probe_voids_the_supervisors_action() -> None:
    world = World()
    sup = make(world, autostart=True)
    world.units["spark-2"] = "failed"

    def upgrade_runs_and_finishes() -> None:  # between the probe and the action
        world.during_probe = None
        with admin.lifecycle(NAME, "upgrade", healing_after=admin.RESUMED, healing_on_failure=admin.PAUSED):
            world.units = dict.fromkeys(NODES, "active")

    world.during_probe = upgrade_runs_and_finishes
    d = sup.tick()
    assert d.action == RESTART  # judged on the probe taken before the upgrade…
    assert world.acted() == []  # …and not done: the admin's command came since
    assert kinds()[-1] == "busy" and sup.brain.breaker.restarts == []


@pytest.mark.parametrize(("verb", "ok", "paused_after", "breaker_open_after"), [
    ("up", True, False, False),
    ("up", False, True, True),       # refused, declined, failed: as it was (paused, breaker open)
    ("down", True, True, True),
    ("reset", True, True, True),
    ("upgrade", True, False, False),  # its final gated `up` passed
    ("upgrade", False, True, True),   # stopped at a node: paused, with the reason
])
def test_each_admin_command_leaves_healing_as_it_promises(
        verb: str, ok: bool, paused_after: bool, breaker_open_after: bool) -> None:
    events.pause(NAME, "sparkctl down")
    events.save_breaker(NAME, events.BreakerState([1.0], 1_780_000_000.0, "2 restarts within 600 s"))
    before = events.paused(NAME)
    said: list[str] = []
    after, failure = VERBS[verb]
    fails = pytest.raises(RuntimeError) if not ok else contextlib.nullcontext()
    with fails, admin.lifecycle(NAME, verb, healing_after=after, healing_on_failure=failure,
                                say=said.append) as turn:
        assert events.paused(NAME) is not None  # paused for the whole run
        if not ok:
            raise RuntimeError(f"{verb} stopped at spark-2: different identity")
    assert (events.paused(NAME) is not None) is paused_after
    assert events.load_breaker(NAME).is_open is breaker_open_after
    assert len(said) == 1 and said[0].startswith("supervisor: healing")
    if verb == "up" and not ok:
        assert events.paused(NAME) == before and turn.healing == admin.AS_BEFORE
        assert "as it was" in said[0] and "circuit breaker open" in said[0]
    if verb == "upgrade" and not ok:
        assert "stopped at spark-2" in str((events.paused(NAME) or {}).get("why"))
    if ok and after == admin.RESUMED:
        assert said[0] == ("supervisor: healing resumed, circuit breaker closed (it was open), "
                           "restart count reset")
    assert events.admin_record(NAME)["state"] == turn.healing


def test_a_declined_up_leaves_healing_active_and_the_breaker_closed_as_they_were() -> None:
    with pytest.raises(RuntimeError), admin.lifecycle(NAME, "up", healing_after=admin.RESUMED):
        raise RuntimeError("the running ranks were left as they were")
    assert events.paused(NAME) is None and not events.load_breaker(NAME).is_open


def test_the_admins_up_resets_the_running_supervisors_restart_count() -> None:
    world = World()
    sup = make(world, max_restarts=1)
    world.units["spark-2"] = "failed"
    assert sup.tick().action == RESTART and len(sup.brain.breaker.restarts) == 1
    with admin.lifecycle(NAME, "up", healing_after=admin.RESUMED):
        pass
    world.units["spark-2"] = "failed"
    d = sup.tick()
    assert d.action == RESTART, d  # a fresh count: not the breaker
    assert "admin-seen" in kinds() and world.acted() == ["down", "up", "down", "up"]


def test_the_breaker_does_not_stop_a_group_the_admin_brought_up_since_the_probe() -> None:
    world = World()
    sup = make(world, max_restarts=1)
    world.units["spark-2"] = "failed"
    sup.tick()  # one restart counted: the next failure opens the breaker
    world.units["spark-2"] = "failed"

    def admin_up() -> None:
        world.during_probe = None
        with admin.lifecycle(NAME, "up", healing_after=admin.RESUMED):
            world.units = dict.fromkeys(NODES, "active")

    world.during_probe = admin_up
    world.calls.clear()
    d = sup.tick()
    assert d.action == OPEN  # decided on the probe the admin's up came after
    assert world.acted() == [] and set(world.units.values()) == {"active"}
    assert not sup.brain.breaker.is_open and not events.load_breaker(NAME).is_open
    assert kinds()[-1] == "busy"
    assert sup.tick().kind == "serving"


# --- a probe miss is confirmed by the canary --------------------------------------------------------


def test_a_probe_timeout_on_one_node_with_a_serving_canary_is_not_acted_on() -> None:
    world = World()
    sup = make(world, canary_failures=2)
    world.gone = {"spark-2": "probe timed out after 10 s"}
    decisions = [sup.tick() for _ in range(6)]
    assert {d.action for d in decisions} == {NONE}, decisions
    assert {d.kind for d in decisions} == {"probe-miss"}
    assert world.calls.count("canary") == 6 and world.acted() == []
    assert kinds().count("probe-miss") == 1  # logged when it begins


def test_a_probe_timeout_confirmed_by_a_failing_canary_stops_the_rest_of_the_group() -> None:
    world = World()
    sup = make(world, canary_failures=2)
    world.gone = {"spark-2": "probe timed out after 10 s"}
    world.canary_ok = False
    first, second = sup.tick(), sup.tick()
    assert (first.kind, first.action) == ("suspect", NONE)
    assert (second.kind, second.action) == ("dead-rank", STOP)
    assert world.acted() == ["down"]


def test_a_failed_rank_unit_is_conclusive_without_the_canary() -> None:
    world = World()
    sup = make(world)
    world.units["spark-1"] = "failed"
    assert sup.tick().action == RESTART and "canary" not in world.calls


# --- monotonic pacing and breaker window ------------------------------------------------------------


def test_a_backward_clock_step_does_not_stretch_the_time_to_the_next_probe() -> None:
    world = World()
    sup = make(world, interval_s=10)
    stepped: list[bool] = []

    def step_back() -> None:  # NTP steps the controller's clock back an hour during a probe
        if not stepped:
            stepped.append(True)
            world.wall -= 3600

    world.during_probe = step_back
    ticks = iter(range(3))
    assert sup.run(lambda: next(ticks, None) is None) == 0
    assert world.slept and max(world.slept) <= 10, world.slept
    times = [r["time"] for r in events.EventLog(NAME).read()]
    assert times[0] > times[-1]  # the events carry the (stepped) wall clock, as it is


@pytest.mark.parametrize("step_s", [-3600.0, 7200.0])
def test_the_breakers_window_is_unaffected_by_clock_steps(step_s: float) -> None:
    world = World()
    sup = make(world, max_restarts=1, window_s=600)
    world.units["spark-2"] = "failed"
    assert sup.tick().action == RESTART
    # 700 s later by the monotonic clock, whatever the wall clock did: out of the window.
    world.mono += 700
    world.wall += 700 + step_s
    world.units["spark-2"] = "failed"
    assert sup.tick().action == RESTART
    # 100 s later: in the window, whatever the wall clock did: the breaker opens.
    world.mono += 100
    world.wall -= step_s
    world.units["spark-2"] = "failed"
    assert sup.tick().action == OPEN


def test_a_restarted_supervisor_keeps_counting_on_the_monotonic_clock() -> None:
    world = World()
    world.units["spark-2"] = "failed"
    make(world).tick()  # a restart on disk, saved with this boot's monotonic time
    world.wall -= 3600  # the wall clock steps back before the next supervisor starts
    world.mono += 30
    world.units["spark-2"] = "failed"
    fresh = make(world, max_restarts=1, window_s=600)
    assert fresh.brain.breaker.restarts == [pytest.approx(5_000.0)]
    assert fresh.tick().action == OPEN
