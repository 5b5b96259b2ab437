"""What an admin's `up`, `down` and `status` mean to the supervisor (`sparkctl watch`).

`down` typed by a person pauses the supervisor's healing until the next `up`; `up` resumes it and
closes the circuit breaker; both wait while the supervisor is restarting the group. (The supervisor
calls ``serve.up.Up`` and ``serve.down.Down`` itself, so its own restarts change none of this.)
`status` names an open circuit breaker as a reason of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from sparkctl.serve import verdict
from sparkctl.serve.events import (
    Event,
    EventLog,
    breaker_reason,
    close_breaker,
    lifecycle,
    pause,
    resume,
    supervisor_notes,
)


@contextlib.contextmanager
def by_admin(cluster_name: str, verb: str, on_wait: Callable[[str], None]) -> Iterator[None]:
    """Hold the group's lifecycle lock for the admin's ``verb`` ("up" or "down") and tell the
    supervisor: `down` pauses healing, `up` resumes it and closes the breaker."""
    with lifecycle(cluster_name, f"sparkctl {verb}", on_wait=on_wait):
        if verb == "down":
            pause(cluster_name, "sparkctl down")
            EventLog(cluster_name).append(Event("admin-down", "healing paused until the next `sparkctl up`"))
        else:
            was_open = close_breaker(cluster_name)
            if resume(cluster_name) or was_open:
                EventLog(cluster_name).append(Event("admin-up", "healing resumed" + (
                    "; circuit breaker closed" if was_open else "")))
        yield


def note_supervisor(cluster_name: str, snap: verdict.Snapshot) -> None:
    """An open circuit breaker (`sparkctl watch`) is a reason of its own: status names it, exits 3."""
    reason = breaker_reason(supervisor_notes(cluster_name))
    if reason is not None:
        snap.reasons.insert(0, reason)
        if snap.verdict == verdict.READY:
            snap.verdict = verdict.DEGRADED
