"""What the admin's lifecycle commands and `status` mean to the supervisor (`sparkctl watch`).

Every command typed by a person that stops, replaces or removes ranks (`up`, `down`, `upgrade`,
`reset`) runs inside ``lifecycle``, the one way in: it waits for the lifecycle lock (the supervisor
may be restarting the group), pauses healing for as long as it runs (a command killed halfway leaves
healing paused, never a supervisor starting a half-upgraded group), counts itself in the admin's
generation (a supervisor action decided before it is void), and leaves healing in the state the
command promises, said on the terminal and in the event log:

* ``resumed`` (`up`, and `upgrade` once its final gated `up` passed): the pause removed, the circuit
  breaker closed, the running supervisor's restart count reset (it sees the generation);
* ``paused`` (`down`; `reset`, which leaves nothing to heal; a failed `upgrade`, with its reason);
* ``as-before`` (an `up` that was refused, declined or failed): the pause and the breaker as they
  were before the command.

The supervisor's own restarts go through ``events.supervisor_turn`` (the same lock, never waited
for, and void when an admin command ran since its probe). `status` names an open breaker.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sparkctl.serve import events, verdict
from sparkctl.serve.events import Event, EventLog, breaker_reason, supervisor_notes

RESUMED, PAUSED, AS_BEFORE = "resumed", "paused", "as-before"


@dataclass
class Turn:
    """One admin lifecycle command in progress. ``reason``: why it ends paused, when the command
    knows better than its exception; ``healing``: the state it left (set at the end)."""

    verb: str
    reason: str | None = None
    healing: str | None = None
    note: str = ""


@contextlib.contextmanager
def lifecycle(cluster_name: str, verb: str, *, healing_after: str, healing_on_failure: str = AS_BEFORE,
              paused_why: str | None = None, on_wait: Callable[[str], None] | None = None,
              say: Callable[[str], None] | None = None) -> Iterator[Turn]:
    """Run the admin's ``verb`` under the lifecycle lock with healing paused; leave healing as
    ``healing_after`` when the block succeeds, ``healing_on_failure`` when it raises (a typer exit
    with code 0 is a success). ``paused_why``: the pause's reason when it ends paused on success."""
    turn = Turn(verb)
    with events.lifecycle(cluster_name, f"sparkctl {verb}", on_wait=on_wait):
        before = events.paused(cluster_name)
        events.bump_generation(cluster_name, verb, "running")
        events.pause(cluster_name, f"`sparkctl {verb}` in progress (pid {os.getpid()}); if it was killed, "
                                   "`sparkctl up` resumes healing")
        try:
            yield turn
        except BaseException as exc:
            if _succeeded(exc):
                _leave(cluster_name, turn, healing_after, before, paused_why, say)
            else:
                turn.reason = turn.reason or _why(exc)
                _leave(cluster_name, turn, healing_on_failure, before, None, say)
            raise
        _leave(cluster_name, turn, healing_after, before, paused_why, say)


def _succeeded(exc: BaseException) -> bool:
    if isinstance(exc, SystemExit):
        return exc.code in (0, None)
    return type(exc).__name__ == "Exit" and getattr(exc, "exit_code", None) == 0  # typer.Exit(0)


def _why(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return str(message).splitlines()[0][:300]


def _leave(cluster_name: str, turn: Turn, healing: str, before: dict[str, object] | None,
           paused_why: str | None, say: Callable[[str], None] | None) -> None:
    verb = turn.verb
    failed = turn.reason is not None
    if healing == RESUMED:
        events.resume(cluster_name)
        was_open = events.close_breaker(cluster_name)
        evidence = "healing resumed" + ("; circuit breaker closed" if was_open else "")
        note = ("supervisor: healing resumed, circuit breaker closed" + (" (it was open)" if was_open else "")
                + ", restart count reset")
    elif healing == PAUSED:
        why = (f"`sparkctl {verb}` failed: {turn.reason}" if failed
               else paused_why or f"sparkctl {verb}")
        events.pause(cluster_name, why)
        evidence = "healing paused until the next `sparkctl up`" + (
            "" if why == "sparkctl down" else f" ({why})")
        note = f"supervisor: healing paused until the next `sparkctl up` ({why})"
    else:
        events.restore_pause(cluster_name, before)
        breaker = events.load_breaker(cluster_name)
        state = (f"paused ({before.get('why') or 'by the admin'})" if before is not None else "active")
        state += f"; circuit breaker {'open' if breaker.is_open else 'closed'}"
        evidence = f"`sparkctl {verb}` did not succeed ({turn.reason}); healing left as it was: {state}"
        note = f"supervisor: healing left as it was before `sparkctl {verb}`: {state}"
    events.bump_generation(cluster_name, verb, healing)
    EventLog(cluster_name).append(Event(f"admin-{verb}", evidence))
    turn.healing, turn.note = healing, note
    if say is not None:
        say(note)


def note_supervisor(cluster_name: str, snap: verdict.Snapshot) -> None:
    """An open circuit breaker (`sparkctl watch`) is a reason of its own: status names it, exits 3."""
    reason = breaker_reason(supervisor_notes(cluster_name))
    if reason is not None:
        snap.reasons.insert(0, reason)
        if snap.verdict == verdict.READY:
            snap.verdict = verdict.DEGRADED
