"""What the supervisor keeps on the controller, per cluster, under the state directory.

``<state>/supervisor/<cluster>/`` (the state directory rule is ``sparkctl.ansible.content``):

* ``events.jsonl``: every decision, one JSON object a line — ``time`` (UTC, ISO 8601), ``kind``,
  ``node`` (or null), ``evidence``, ``action``, sometimes ``seconds``. ``sparkctl events`` shows it.
* ``paused``: written by the admin's ``sparkctl down`` (and ``reset``, a failed ``upgrade``, and
  every admin lifecycle command while it runs: ``serve.admin.lifecycle``), removed by the next
  successful ``sparkctl up``; while it is there the supervisor heals nothing (it never fights a human).
* ``breaker.json``: the restarts counted in the breaker's window and, once it opened, why and since
  when. Kept on disk so a restarted supervisor still counts (no restart storm after a controller
  reboot or a network loss). ``sparkctl up`` closes it. The window is judged on the monotonic clock
  (``restarts_mono`` with this boot's ``boot_id``; ``restarts`` in wall-clock seconds is what another
  boot falls back on), so a clock step neither empties nor stretches it.
* ``admin.json``: the admin's lifecycle commands, counted: ``generation`` goes up when one starts and
  when it ends, with the verb and the healing it left (``resumed``/``paused``). The supervisor acts
  only when the generation it probed under is still the current one, and forgets its restart count
  when it sees a command that resumed healing.
* ``lifecycle.lock``: held by whoever is starting, stopping, replacing or removing the ranks (``up``,
  ``down``, ``upgrade``, ``reset``, the supervisor's restart), so the supervisor never judges a group
  that is being started.
* ``watch.lock``: held by the one running supervisor (a second one refuses).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import getpass
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sparkctl.ansible import content

EVENTS = "events.jsonl"
PAUSED = "paused"
BREAKER = "breaker.json"
ADMIN = "admin.json"
LIFECYCLE_LOCK = "lifecycle.lock"
WATCH_LOCK = "watch.lock"


def supervisor_dir(cluster_name: str) -> Path:
    """``<state>/supervisor/<cluster>`` (not created here)."""
    return content.state_dir() / "supervisor" / cluster_name


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def now_iso(at: float | None = None) -> str:
    when = dt.datetime.fromtimestamp(time.time() if at is None else at, tz=dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# --- the event log ----------------------------------------------------------------------------


@dataclass
class Event:
    kind: str
    evidence: str
    action: str = "none"
    node: str | None = None
    seconds: float | None = None
    time: str = field(default_factory=now_iso)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"time": self.time, "kind": self.kind, "node": self.node,
                               "evidence": self.evidence, "action": self.action}
        if self.seconds is not None:
            out["seconds"] = round(self.seconds, 2)
        return out


class EventLog:
    """Append-only JSONL of the supervisor's decisions (one ``write`` per line, so lines never mix)."""

    def __init__(self, cluster_name: str):
        self.path = supervisor_dir(cluster_name) / EVENTS

    def append(self, event: Event) -> dict[str, Any]:
        record = event.as_dict()
        _ensure(self.path.parent)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
        finally:
            os.close(fd)
        return record

    def read(self, last: int | None = None) -> list[dict[str, Any]]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        records = [r for r in (_parse(line) for line in lines) if r is not None]
        return records[-last:] if last else records

    def follow(self, emit: Callable[[dict[str, Any]], None], stop: Callable[[], bool],
               poll_s: float = 0.5, last: int | None = 20) -> None:
        """Emit the last ``last`` records, then every new one until ``stop()`` (a rotated or
        truncated file is read again from its start)."""
        for record in self.read(last):
            emit(record)
        offset = self.path.stat().st_size if self.path.exists() else 0
        pending = b""
        while not stop():
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size < offset:
                offset, pending = 0, b""
            if size > offset:
                with self.path.open("rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read(size - offset)
                offset = size
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    parsed = _parse(line.decode(errors="replace"))
                    if parsed is not None:
                        emit(parsed)
                continue
            time.sleep(poll_s)


def _parse(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def format_event(record: dict[str, Any]) -> str:
    """One line for people: time, kind, node, evidence, action."""
    node = f" {record['node']}" if record.get("node") else ""
    secs = f" ({record['seconds']:.1f} s)" if isinstance(record.get("seconds"), int | float) else ""
    action = record.get("action") or "none"
    act = "" if action == "none" else f" → {action}"
    head = f"{record.get('time', '?')}  {record.get('kind', '?'):<14}{node}"
    return f"{head}: {record.get('evidence', '')}{secs}{act}"


# --- the admin's pause ------------------------------------------------------------------------


def pause(cluster_name: str, why: str) -> None:
    """Pause healing (the admin ran `down`) until the next `up`."""
    d = _ensure(supervisor_dir(cluster_name))
    _write_atomic(d / PAUSED, json.dumps({"since": now_iso(), "by": _user(), "why": why}) + "\n")


def restore_pause(cluster_name: str, record: dict[str, Any] | None) -> None:
    """Put the pause back as it was (``record`` from ``paused``; None: no pause)."""
    if record is None:
        resume(cluster_name)
        return
    d = _ensure(supervisor_dir(cluster_name))
    _write_atomic(d / PAUSED, json.dumps(record) + "\n")


def resume(cluster_name: str) -> bool:
    """Remove the pause; True when there was one."""
    try:
        (supervisor_dir(cluster_name) / PAUSED).unlink()
    except FileNotFoundError:
        return False
    return True


def paused(cluster_name: str) -> dict[str, Any] | None:
    try:
        data = json.loads((supervisor_dir(cluster_name) / PAUSED).read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        data = {}
    return data if isinstance(data, dict) else {}


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


# --- the circuit breaker's memory ---------------------------------------------------------------


@dataclass
class BreakerState:
    """Restart times (monotonic seconds of the supervisor's clock) and, when open, since when (wall
    clock, epoch seconds: for people) and why."""

    restarts: list[float] = field(default_factory=list)
    open_since: float | None = None
    why: str | None = None

    @property
    def is_open(self) -> bool:
        return self.open_since is not None

    def in_window(self, now: float, window_s: float) -> list[float]:
        return [t for t in self.restarts if now - t < window_s]

    def as_dict(self, mono: Callable[[], float] = time.monotonic,
                wall: Callable[[], float] = time.time) -> dict[str, Any]:
        offset = wall() - mono()  # a monotonic time as wall-clock seconds (for people, other boots)
        return {"restarts": [round(t + offset, 3) for t in self.restarts],
                "restarts_mono": [round(t, 3) for t in self.restarts], "boot_id": boot_id(),
                "open_since": self.open_since,
                "open_since_iso": now_iso(self.open_since) if self.open_since is not None else None,
                "why": self.why}


def boot_id() -> str | None:
    """This boot of the controller (the monotonic clock starts again at each one)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def load_breaker(cluster_name: str, mono: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> BreakerState:
    """The breaker on disk, its restarts on the monotonic clock (``mono``): as saved within this
    boot, else moved over from their wall-clock times."""
    try:
        data = json.loads((supervisor_dir(cluster_name) / BREAKER).read_text())
        same_boot = data.get("boot_id") is not None and data.get("boot_id") == boot_id()
        if same_boot and isinstance(data.get("restarts_mono"), list):
            restarts = [float(t) for t in data["restarts_mono"]]
        else:
            offset = wall() - mono()
            restarts = [float(t) - offset for t in data.get("restarts") or []]
        return BreakerState(restarts, data.get("open_since"), data.get("why"))
    except (FileNotFoundError, ValueError, TypeError, AttributeError):
        return BreakerState()


def save_breaker(cluster_name: str, state: BreakerState, mono: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
    d = _ensure(supervisor_dir(cluster_name))
    _write_atomic(d / BREAKER, json.dumps(state.as_dict(mono, wall), indent=1) + "\n")


def close_breaker(cluster_name: str) -> bool:
    """Forget the restarts and close the breaker (the admin's `up`); True when it was open."""
    was_open = load_breaker(cluster_name).is_open
    (supervisor_dir(cluster_name) / BREAKER).unlink(missing_ok=True)
    return was_open


# --- the admin's lifecycle commands, counted ------------------------------------------------------


def admin_record(cluster_name: str) -> dict[str, Any]:
    """The last admin lifecycle command: ``generation`` (0: none yet), ``verb``, ``state``
    (``running``, or the healing it left: ``resumed``/``paused``/``as-before``), ``at``."""
    try:
        data = json.loads((supervisor_dir(cluster_name) / ADMIN).read_text())
    except (FileNotFoundError, ValueError):
        return {"generation": 0}
    if not isinstance(data, dict) or not isinstance(data.get("generation"), int):
        return {"generation": 0}
    return data


def generation(cluster_name: str) -> int:
    return int(admin_record(cluster_name)["generation"])


def bump_generation(cluster_name: str, verb: str, state: str) -> int:
    """Count one step of an admin lifecycle command (call it holding the lifecycle lock)."""
    d = _ensure(supervisor_dir(cluster_name))
    gen = generation(cluster_name) + 1
    _write_atomic(d / ADMIN, json.dumps({"generation": gen, "verb": verb, "state": state, "at": now_iso(),
                                         "by": _user()}) + "\n")
    return gen


def supervisor_notes(cluster_name: str) -> dict[str, Any]:
    """What `status` says about the supervisor: the breaker (when open) and the admin's pause."""
    breaker = load_breaker(cluster_name)
    return {"breaker": breaker.as_dict() if breaker.is_open else None, "paused": paused(cluster_name)}


def breaker_reason(notes: dict[str, Any]) -> str | None:
    b = notes.get("breaker")
    if not b:
        return None
    return (f"supervisor: circuit breaker open since {b['open_since_iso']} ({b['why']}); the group stays "
            "down until `sparkctl up`")


# --- locks ------------------------------------------------------------------------------------


class Busy(Exception):
    """The lock is held by another process (its note says who)."""

    def __init__(self, holder: str):
        super().__init__(holder)
        self.holder = holder


@contextlib.contextmanager
def _flock(path: Path, note: str, wait: bool, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    _ensure(path.parent)
    fh: IO[str] = path.open("a+")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            if not wait:
                raise Busy(holder) from None
            if on_wait is not None:
                on_wait(holder)
            fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        fh.truncate()
        fh.write(f"{note} (pid {os.getpid()}, since {now_iso()})\n")
        fh.flush()
        try:
            yield
        finally:
            fh.seek(0)
            fh.truncate()
            fh.flush()
            fcntl.flock(fh, fcntl.LOCK_UN)
    finally:
        fh.close()


def lifecycle(cluster_name: str, who: str, wait: bool = True,
              on_wait: Callable[[str], None] | None = None) -> contextlib.AbstractContextManager[None]:
    """Held while the group is started or stopped (``up``, ``down``, a supervisor restart)."""
    return _flock(supervisor_dir(cluster_name) / LIFECYCLE_LOCK, who, wait, on_wait)


def lifecycle_busy(cluster_name: str) -> str | None:
    """Who is starting or stopping the group right now, or None."""
    try:
        with lifecycle(cluster_name, "probe", wait=False):
            return None
    except Busy as exc:
        return exc.holder


def single_watch(cluster_name: str) -> contextlib.AbstractContextManager[None]:
    """Held by the running supervisor; a second one gets ``Busy`` naming the first."""
    return _flock(supervisor_dir(cluster_name) / WATCH_LOCK, "sparkctl watch", wait=False)


@contextlib.contextmanager
def supervisor_turn(cluster_name: str, who: str, probed_generation: int) -> Iterator[str | None]:
    """The supervisor's way into the lifecycle: the lock without waiting (``Busy`` when an admin
    command or another start holds it), then the reason it must not act, or None: the admin paused
    healing, or an admin command ran since the probe it decided on (its ``up`` may have just brought
    the group up; its ``down`` stopped it on purpose)."""
    with lifecycle(cluster_name, who, wait=False):
        pause = paused(cluster_name)
        if pause is not None:
            yield f"healing is paused ({pause.get('why') or 'by the admin'})"
            return
        record = admin_record(cluster_name)
        if record["generation"] != probed_generation:
            yield (f"`sparkctl {record.get('verb') or '?'}` ran since the probe "
                   f"({record.get('state') or '?'} at {record.get('at') or '?'})")
            return
        yield None
