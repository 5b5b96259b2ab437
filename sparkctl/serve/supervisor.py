"""The supervisor behind `sparkctl watch`: decide from each probe whether the group must restart.

A TP group cannot heal one rank: a restarted worker cannot rejoin running peers, which notice a
dead one only through the watchdog. So every heal is a **whole-group** restart — down, a settle
pause, then the same gated `up` an admin runs (preflight, ranks 1..n, rank 0, readiness gates) —
bounded by a circuit breaker, and never while the admin paused healing with `sparkctl down`.

* ``observe``: what one probe (``verdict.snapshot``, the one `status` takes) and the canary say.
* ``Brain.decide``: pure decision logic, the clock passed in (unit-tested with fakes):
  a rank unit that exited, a node that stopped answering SSH while the others answer and the canary
  fails too (a dead rank: the rest of the group is stopped at once, the restart waits for the node;
  a probe that times out on a node while the canary completes is not acted on), a rank OOM-killed
  or restarted since `up` made the group ready (``verdict.rank_faults``), MemAvailable
  under the profile's floor, or ``canary_failures`` failed canaries in a row → restart; a group
  that is entirely down waits for `up`, or with autostart comes up once every node answers again
  after being unreachable (or when the supervisor itself starts, i.e. at boot).
* ``Supervisor``: the loop; the probe, the canary, stopping and starting the group and both clocks
  are callables (the CLI wires `down`'s and `up`'s own code paths in), so the loop runs against
  fakes in tests. It paces itself and judges the breaker's window on the monotonic clock (the wall
  clock only stamps events), and acts only through ``events.supervisor_turn``: the lifecycle lock
  taken without waiting, healing not paused, no admin command (``up``, ``down``, ``upgrade``,
  ``reset``) since the probe it decided on. An admin command that resumed healing resets its count.
* ``canary``, ``notify``: the tiny completion that must produce tokens; the notification hook.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from sparkctl.model import secretenv
from sparkctl.render.rank import api_url, served_model_name
from sparkctl.serve import events
from sparkctl.serve.events import BreakerState, Event, EventLog
from sparkctl.serve.http import auth_headers, http_reason
from sparkctl.serve.verdict import GIB, Snapshot

if TYPE_CHECKING:
    from sparkctl.model import Cluster

# systemd ActiveState values of a unit whose rank is (still) running.
RUNNING = ("active", "activating", "reloading", "deactivating")

NONE, RESTART, STOP, START, OPEN = "none", "restart", "stop", "start", "open-breaker"


# --- one observation --------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeView:
    name: str
    rank: int
    reachable: bool
    state: str = "unknown"
    result: str = ""
    mem_available: int | None = None
    error: str | None = None
    faults: tuple[str, ...] = ()  # OOM-killed or restarted (verdict.rank_faults), in words


@dataclass(frozen=True)
class Observation:
    nodes: dict[str, NodeView]
    canary: tuple[bool, str] | None  # None: not tried (the group is not all running)
    floor_bytes: int


def observe(snap: Snapshot, canary: tuple[bool, str] | None, floor_gib: float) -> Observation:
    views = {}
    for f in snap.nodes.values():
        views[f.name] = NodeView(f.name, f.rank, f.reachable and not f.error, f.active,
                                 str(f.unit.get("result") or ""), f.mem_available, f.error,
                                 tuple(snap.faults.get(f.name) or ()))
    return Observation(views, canary, int(float(floor_gib) * GIB))


def all_running(snap: Snapshot) -> bool:
    """Whether every rank unit runs."""
    return all(f.reachable and f.active == "active" for f in snap.nodes.values())


def canary_worth_trying(snap: Snapshot) -> bool:
    """Every rank unit that the probe saw runs (a node whose probe failed or timed out is not seen):
    the canary is what confirms, or not, that such a node is really gone."""
    seen = [f for f in snap.nodes.values() if f.reachable and not f.error]
    return bool(seen) and all(f.active == "active" for f in seen)


# --- the decision -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    kind: str
    evidence: str
    action: str = NONE
    node: str | None = None
    log: bool = True  # write an event (a state that lasts is logged once, when it begins)


@dataclass
class Brain:
    """The supervisor's judgement between two probes; the breaker's memory is ``breaker``."""

    max_restarts: int
    window_s: float
    failures: int  # canary_failures: misses in a row before acting
    autostart: bool
    breaker: BreakerState = field(default_factory=BreakerState)
    canary_misses: int = 0
    node_misses: dict[str, int] = field(default_factory=dict)
    retry: str | None = None  # why the group still owes a restart (a failed one, a stopped partial group)
    armed: bool = False  # autostart: bring the group up once every node answers
    _last: str | None = None

    def __post_init__(self) -> None:
        self.armed = self.autostart  # the supervisor starting is a boot, for all it knows

    def _once(self, d: Decision) -> Decision:
        """Log a lasting state only when it begins (or changes)."""
        key = f"{d.kind}|{d.node}|{d.action}"
        log = key != self._last
        self._last = key
        return Decision(d.kind, d.evidence, d.action, d.node, log and d.log)

    def paused(self, why: str) -> Decision:
        self.canary_misses, self.node_misses, self.retry = 0, {}, None
        self.armed = False
        return self._once(Decision("paused", f"healing paused by the admin ({why})"))

    def busy(self, holder: str) -> Decision:
        return self._once(Decision("busy", f"the group is being started or stopped: {holder}"))

    def forget(self) -> int:
        """The admin's `up` (or a successful `upgrade`) resumed healing: restarts, misses and a
        pending retry start from nothing. Returns how many restarts were counted."""
        counted = len(self.breaker.restarts)
        self.breaker = BreakerState()
        self.canary_misses, self.node_misses, self.retry, self._last = 0, {}, None, None
        return counted

    def decide(self, obs: Observation, now: float, wall: float | None = None) -> Decision:
        """``now``: monotonic seconds (the breaker's window); ``wall``: epoch seconds (when it
        opened, for people; ``now`` when not given)."""
        if self.breaker.is_open:
            return self._once(Decision("breaker-open", self.breaker.why or "open", NONE))
        nodes = sorted(obs.nodes.values(), key=lambda v: v.rank)
        gone = [v for v in nodes if not v.reachable]
        running = [v for v in nodes if v.reachable and v.state in RUNNING]
        if len(gone) == len(nodes):
            self.armed = self.autostart or self.armed
            self.canary_misses = 0
            return self._once(Decision("unreachable", "the controller reaches no node (its own network, "
                                       "or every node is off); waiting", NONE))
        if gone:
            self.armed = self.autostart or self.armed
            for v in gone:
                self.node_misses[v.name] = self.node_misses.get(v.name, 0) + 1
            worst = max(gone, key=lambda v: self.node_misses[v.name])
            misses = self.node_misses[worst.name]
            if obs.canary is not None and obs.canary[0]:
                # The probe could not see the node, but a real completion went through every rank:
                # the group serves. One witness saying unhealthy is not enough to stop it.
                self.canary_misses = 0
                return Decision("probe-miss", f"{worst.name} (rank {worst.rank}) did not answer the probe "
                                f"({worst.error}; {misses} in a row) but the canary completed "
                                f"({obs.canary[1]}): serving, not acting", NONE, worst.name, log=misses == 1)
            if misses < self.failures:
                why = f"{worst.name} (rank {worst.rank}) did not answer ({worst.error})"
                why += f"; {misses}/{self.failures}"
                return Decision("suspect", why, NONE, worst.name, log=misses == 1)
            names = ", ".join(v.name for v in gone)
            if running:
                self.retry = f"{names} answers again"
                return self._once(Decision(
                    "dead-rank", f"{names} not answering for {misses} checks ({worst.error}); the rest of "
                    "the group cannot serve without it", STOP, worst.name))
            return self._once(Decision("waiting", f"the group is down; waiting for {names} to answer", NONE,
                                       worst.name))
        self.node_misses = {}
        exited = [v for v in nodes if v.state not in RUNNING and (running or v.state == "failed")]
        if exited:
            v = exited[0]
            result = f", result {v.result}" if v.result not in ("", "success") else ""
            exited_d = Decision("unit-exited", f"rank {v.rank} unit {v.state}{result} while "
                                f"{len(running)} of {len(nodes)} ranks run", RESTART, v.name)
            return self._restart(exited_d, now, wall)
        faulted = [v for v in nodes if v.faults and v.state in RUNNING]
        if faulted:
            # A rank that was OOM-killed or restarted runs, but cannot be part of its TP group any more.
            v = faulted[0]
            fault_d = Decision("rank-restarted", f"rank {v.rank}: {'; '.join(v.faults)}", RESTART, v.name)
            return self._restart(fault_d, now, wall)
        if not running:
            if self.retry:
                return self._restart(Decision("retry", self.retry, RESTART), now, wall)
            if self.armed:
                return self._restart(Decision("autostart", f"all {len(nodes)} nodes answer and no rank runs",
                                              START), now, wall)
            return self._once(Decision("down", "no rank runs; waiting for `sparkctl up` (autostart is off)"))
        low = [(v, v.mem_available) for v in nodes
               if v.mem_available is not None and v.mem_available < obs.floor_bytes]
        if low:
            v, mem = low[0]
            low_d = Decision("memory", f"MemAvailable {mem / GIB:.2f} GiB under the "
                             f"floor {obs.floor_bytes / GIB:.2f} GiB", RESTART, v.name)
            return self._restart(low_d, now, wall)
        if obs.canary is None:
            return self._once(Decision("starting", "ranks running, not all active yet"))
        ok, detail = obs.canary
        if ok:
            self.canary_misses, self.retry, self.armed = 0, None, False
            return self._once(Decision("serving", f"canary: {detail}"))
        self.canary_misses += 1
        if self.canary_misses < self.failures:
            return Decision("canary-miss", f"canary failed {self.canary_misses}/{self.failures}: {detail}",
                            NONE, None, log=True)
        why = f"canary failed {self.canary_misses} times in a row: {detail}"
        return self._restart(Decision("canary", why, RESTART), now, wall)

    def _restart(self, d: Decision, now: float, wall: float | None) -> Decision:
        """A restart (or a start) unless the breaker's window already holds max_restarts of them."""
        recent = self.breaker.in_window(now, self.window_s)
        self.breaker.restarts = recent
        if len(recent) >= self.max_restarts:
            why = (f"{len(recent)} restarts within {self.window_s:g} s, then {d.kind}"
                   f"{' on ' + d.node if d.node else ''}: {d.evidence}")
            self.breaker.open_since, self.breaker.why = (now if wall is None else wall), why
            self._last = None
            return Decision(d.kind, d.evidence, OPEN, d.node)
        self.breaker.restarts.append(now)
        self.canary_misses, self._last = 0, None
        return d


# --- canary and notification ------------------------------------------------------------------


def canary(cluster: Cluster, http: httpx.Client, api_key: str | None,
           timeout: float = 20.0) -> tuple[bool, str]:
    """A tiny chat completion on rank 0 that must produce tokens (HTTP alive with zero tokens
    fails). The key goes in the header only; nothing of it reaches the detail."""
    body = {"model": served_model_name(cluster), "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Say OK."}]}
    started = time.monotonic()
    try:
        resp = http.post(f"{api_url(cluster)}/v1/chat/completions", json=body, headers=auth_headers(api_key),
                         timeout=timeout)
    except httpx.HTTPError as exc:
        return False, http_reason(exc)
    if resp.status_code != 200:
        return False, f"HTTP {resp.status_code}"
    try:
        doc = resp.json()
        text = doc["choices"][0]["message"].get("content") or ""
        tokens = int((doc.get("usage") or {}).get("completion_tokens") or 0)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return False, "not a chat completion"
    if tokens <= 0 and not text.strip():
        return False, "answered with zero tokens"
    return True, f"{tokens or 'some'} tokens in {time.monotonic() - started:.2f} s"


def hook_environment(secret_env: Iterable[str]) -> dict[str, str]:
    """This process's environment less the declared secret variables (the API key's, the Hugging
    Face token's: ``ansible.plan.secret_env_names``) and the runner's secrets fd: what a
    notification hook runs with."""
    withheld = {*secret_env, secretenv.SECRETS_FD_ENV}
    return {k: v for k, v in os.environ.items() if k not in withheld}


def notify(sup: Any, record: Mapping[str, Any], cluster_name: str, http: httpx.Client, *,
           secret_env: Iterable[str] = ()) -> list[str]:
    """Tell the inventory's hook (``notify_command``: no shell, the event JSON on stdin, an
    environment without the ``secret_env`` variables; ``notify_webhook``: POSTed). Returns what
    failed, without the webhook's URL (it may hold a token)."""
    payload = json.dumps({"cluster": cluster_name, **record})
    failed = []
    if sup.notify_command:
        try:
            proc = subprocess.run(list(sup.notify_command), input=payload, text=True, capture_output=True,
                                  timeout=30, check=False, env=hook_environment(secret_env))
            if proc.returncode != 0:
                failed.append(f"notify_command exited {proc.returncode}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            failed.append(f"notify_command: {type(exc).__name__}")
    if sup.notify_webhook:
        try:
            resp = http.post(str(sup.notify_webhook), content=payload,
                             headers={"Content-Type": "application/json"}, timeout=10)
            if resp.status_code >= 300:
                failed.append(f"notify_webhook: HTTP {resp.status_code}")
        except httpx.HTTPError as exc:
            failed.append(f"notify_webhook: {http_reason(exc)}")
    return failed


# --- the loop ---------------------------------------------------------------------------------


@dataclass
class Actions:
    """What the loop does to the world (the CLI wires the real ones, tests fakes)."""

    snapshot: Callable[[], Snapshot]
    canary: Callable[[], tuple[bool, str]]
    stop: Callable[[], str]  # stops every rank; returns a summary, raises on failure
    start: Callable[[], str]  # preflight + the gated up; returns a summary, raises on failure
    notify: Callable[[Mapping[str, Any]], list[str]]
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic  # pacing, durations, the breaker's window
    wall: Callable[[], float] = time.time  # event timestamps, when the breaker opened (for people)


class Supervisor:
    def __init__(self, cluster_name: str, settings: Any, autostart: bool, floor_gib: float, actions: Actions,
                 on_event: Callable[[dict[str, Any]], None] | None = None):
        self.name = cluster_name
        self.settings = settings
        self.floor_gib = floor_gib
        self.act = actions
        self.log = EventLog(cluster_name)
        self.on_event = on_event or (lambda record: None)
        self.brain = Brain(settings.max_restarts, settings.window_s, settings.canary_failures, autostart,
                           self._load_breaker())
        # The admin's lifecycle commands seen so far: an action decided under an older count is void.
        self.generation = events.generation(cluster_name)

    def _load_breaker(self) -> BreakerState:
        return events.load_breaker(self.name, self.act.clock, self.act.wall)

    def _save_breaker(self) -> None:
        events.save_breaker(self.name, self.brain.breaker, self.act.clock, self.act.wall)

    def event(self, kind: str, evidence: str, action: str = NONE, node: str | None = None,
              seconds: float | None = None) -> dict[str, Any]:
        at = events.now_iso(self.act.wall())
        record = self.log.append(Event(kind, evidence, action, node, seconds, at))
        self.on_event(record)
        return record

    def see_admin(self) -> None:
        """Catch up with the admin's lifecycle commands: one that resumed healing (`up`, a
        successful `upgrade`) leaves a group the admin vouched for, so the count starts again."""
        record = events.admin_record(self.name)
        if record["generation"] == self.generation:
            return
        self.generation = record["generation"]
        if record.get("state") != "resumed":
            return
        pending = self.brain.retry
        counted = self.brain.forget()
        self.brain.breaker = self._load_breaker()  # closed by the admin (or open again since)
        if counted or pending:
            self.event("admin-seen", f"`sparkctl {record.get('verb')}` resumed healing: "
                       f"{counted} restart(s) in the window forgotten"
                       + (f", no retry owed ({pending})" if pending else ""))

    def tick(self) -> Decision:
        """One probe and what follows from it."""
        name = self.name
        self.see_admin()
        pause = events.paused(name)
        if pause is not None:
            d = self.brain.paused(str(pause.get("why") or pause.get("since") or ""))
        elif (holder := events.lifecycle_busy(name)) is not None:
            d = self.brain.busy(holder)
        else:
            snap = self.act.snapshot()
            tried = self.act.canary() if canary_worth_trying(snap) else None
            d = self.brain.decide(observe(snap, tried, self.floor_gib), self.act.clock(), self.act.wall())
        if d.log:
            self.event(d.kind, d.evidence, d.action, d.node)
        if d.action == OPEN:
            self._open_breaker(d)
        elif d.action in (RESTART, START, STOP):
            self._act(d)
        return d

    def run(self, stop: Callable[[], bool], service: bool = False) -> int:
        """Probe every interval (monotonic) until ``stop()``. The breaker open: 3 in the foreground;
        as a service, wait (quietly) until the admin's `up` closes it."""
        self.event("watch", f"supervising {self.name} every {self.settings.interval_s:g} s"
                   f"{' (autostart on)' if self.brain.autostart else ''}")
        while not stop():
            started = self.act.clock()
            if self.brain.breaker.is_open:
                if not service:
                    return 3
                fresh = self._load_breaker()
                if not fresh.is_open:
                    self.brain.breaker = fresh
                    self.brain.retry = None
                    self.event("breaker-closed", "closed by `sparkctl up`; supervising again")
            else:
                self.tick()
                if self.brain.breaker.is_open and not service:
                    return 3
            elapsed = self.act.clock() - started
            self.act.sleep(min(self.settings.interval_s, max(0.0, self.settings.interval_s - elapsed)))
        return 0

    def _not_acting(self, d: Decision, why: str) -> None:
        if d.action in (RESTART, START) and self.brain.breaker.restarts:
            self.brain.breaker.restarts.pop()  # not done: it does not count
        self.event("busy", f"not acting on {d.kind}: {why}")

    def _act(self, d: Decision) -> None:
        try:
            with events.supervisor_turn(self.name, f"sparkctl watch ({d.kind})", self.generation) as refused:
                if refused is not None:
                    self._not_acting(d, refused)
                    return
                self._save_breaker()
                if d.action in (RESTART, START):
                    self._tell(self.event("restart" if d.action == RESTART else "autostart",
                                          f"{d.kind}: {d.evidence}", d.action, d.node))
                if d.action in (RESTART, STOP):
                    t0 = self.act.clock()
                    try:
                        summary = self.act.stop()
                    except Exception as exc:
                        self.event("down", f"stopping the group failed: {_what(exc)}", "stop", None,
                                   self.act.clock() - t0)
                        self.brain.retry = f"stopping the group failed ({_what(exc)})"
                        return
                    self.event("down", summary, "stop", None, self.act.clock() - t0)
                if d.action == STOP:
                    return
                if d.action == RESTART and self.settings.settle_s:
                    self.act.sleep(self.settings.settle_s)
                t0 = self.act.clock()
                try:
                    summary = self.act.start()
                except Exception as exc:
                    self.brain.retry = f"the last start failed ({_what(exc)})"
                    self.event("up", f"failed: {_what(exc)}", "start", None, self.act.clock() - t0)
                    return
                self.brain.retry, self.brain.armed = None, False
                self.event("up", summary, "start", None, self.act.clock() - t0)
        except events.Busy as exc:
            self._not_acting(d, f"the group is being started or stopped: {exc.holder}")

    def _open_breaker(self, d: Decision) -> None:
        """Open the breaker and stop the group, unless an admin command holds the lifecycle or ran
        since the probe (its `up` may just have brought the group up): then nothing is stopped and
        the breaker stays closed; the next probe judges the group the admin left."""
        why = self.brain.breaker.why or d.evidence
        try:
            turn = events.supervisor_turn(self.name, "sparkctl watch (breaker open)", self.generation)
            with turn as refused:
                if refused is None:
                    self._save_breaker()
                    self._tell(self.event("breaker-open", why, "stay-down", d.node))
                    t0 = self.act.clock()
                    try:
                        summary = self.act.stop()
                        self.event("down", summary, "stop", None, self.act.clock() - t0)
                    except Exception as exc:
                        self.event("down", f"stopping the group failed: {_what(exc)}; run `sparkctl down`",
                                   "stop", None, self.act.clock() - t0)
                    return
        except events.Busy as exc:
            refused = f"the group is being started or stopped: {exc.holder}"
        self.brain.breaker.open_since, self.brain.breaker.why = None, None
        self.event("busy", f"not opening the circuit breaker ({why}): {refused}")

    def _tell(self, record: Mapping[str, Any]) -> None:
        for problem in self.act.notify(record):
            self.event("notify-failed", problem)


def _what(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return message.splitlines()[0][:300]
