"""The memory guard: a thread that samples MemAvailable on every node every ~2 s for as long as a
command runs (`up`, `qualify`, `bench`), whatever the command itself is waiting on (a 30 s HTTP
call, a chat completion, the long-context request).

When a node falls below the profile's floor the guard calls ``on_breach`` once (the commands stop
every rank: a GB10 that runs out of unified memory takes the whole node down with it) and records
the breach. ``abort_ranks``, that action, checks its own kill on every node and escalates (the
unit's whole cgroup, the container removed, the unit stopped so it cannot restart) for up to
``KILL_ROUNDS`` rounds; what it achieved (``KillReport``) is recorded with the breach. It keeps the
lowest MemAvailable seen per node, written to ``memory-guard.json`` in the run record next to the
figure R4's published validation reports (19.52 GiB minimum reserve).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.serve.periodic import Periodic
from sparkctl.serve.probe import FleetLike, collect, rank_launch, unit_name

if TYPE_CHECKING:
    from sparkctl.model import Cluster

GIB = 1024**3
KILL_ROUNDS = 3
# systemd ActiveState values of a rank unit that still runs (or is about to again: auto-restart).
_ALIVE = ("active", "activating", "reloading", "deactivating")
# What the guard's probe leaves out of the watch mode: the HTTP health read (no request to the server).
MEMORY_ONLY: dict[str, Any] = {"health_port": None}
# R4's validation receipt: the lowest MemAvailable any node showed across its published run.
R4_MIN_MEM_AVAILABLE_GIB = 19.52


@dataclass
class Breach:
    node: str
    mem_available: int
    floor: int
    at: float
    kill: str | None = None  # what the breach action achieved (``KillReport.describe``)

    def describe(self) -> str:
        return (f"{self.node}: MemAvailable {self.mem_available / GIB:.2f} GiB below the floor "
                f"{self.floor / GIB:.2f} GiB") + (f"; {self.kill}" if self.kill else "")


@dataclass
class KillReport:
    """Per node after ``abort_ranks``: ``killed``, ``still running (…)`` or ``unreachable (…)``."""

    nodes: dict[str, str]
    rounds: int

    @property
    def ok(self) -> bool:
        return all(v == "killed" for v in self.nodes.values())

    def describe(self) -> str:
        if self.ok:
            return f"every rank killed (checked on {len(self.nodes)} nodes, {self.rounds} round(s))"
        bad = "; ".join(f"{n}: {v}" for n, v in sorted(self.nodes.items()) if v != "killed")
        return f"the kill did not take after {self.rounds} round(s), escalated: {bad}"


@dataclass
class MemoryGuard(Periodic):
    """Start with ``start()``, stop with ``stop()`` (or use it as a context manager)."""

    cluster: Cluster
    doc: Mapping[str, Any]
    fleet: FleetLike
    on_breach: Callable[[Breach], KillReport | None] | None = None
    record_dir: Path | None = None
    interval: float = 2.0
    first_after: float = 0.0
    lowest: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    breach: Breach | None = None
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.floor = int(float(self.cluster.profile.memory.floor_gib) * GIB)
        self._prepare("sparkctl-memory-guard")

    def stop(self) -> None:
        super().stop()
        self._write_summary()

    def sample_once(self) -> None:
        # The watch probe without its HTTP health read: the guard needs MemAvailable (with the unit
        # and container state) and nothing from the server or the GPU, so it can run through a
        # timed bench window without disturbing it (on rank 0 SGLang's /health generates a token).
        facts = collect(self.cluster, self.doc, self.fleet, "watch", timeout=max(5.0, 4 * self.interval),
                        extra=MEMORY_ONLY)
        now = time.time()
        for name, f in facts.items():
            mem = f.mem_available
            if mem is None:
                if not f.reachable or f.error:
                    self.errors.append(f"{name}: {f.error or 'no answer'}")
                continue
            self.lowest[name] = mem if name not in self.lowest else min(self.lowest[name], mem)
            if mem < self.floor and self.breach is None:
                self.breach = Breach(name, mem, self.floor, now)
                if self.on_breach is not None:
                    report = self.on_breach(self.breach)
                    if isinstance(report, KillReport):
                        self.breach.kill = report.describe()
                        if not report.ok:
                            self.errors.append(f"memory guard: {report.describe()}")
        self.samples += 1

    def finished(self) -> bool:
        return self.breach is not None

    def summary(self) -> dict[str, Any]:
        low = min(self.lowest.values(), default=None)
        return {
            "samples": self.samples,
            "interval_s": self.interval,
            "floor_gib": round(self.floor / GIB, 2),
            "lowest_mem_available_gib": {n: round(v / GIB, 2) for n, v in sorted(self.lowest.items())},
            "lowest_gib": round(low / GIB, 2) if low is not None else None,
            "r4_published_lowest_gib": R4_MIN_MEM_AVAILABLE_GIB,
            "breach": None if self.breach is None else self.breach.describe(),
            "kill": None if self.breach is None else self.breach.kill,
            "errors": self.errors[-20:],
        }

    def _write_summary(self) -> None:
        if self.record_dir is None:
            return
        self.record_dir.mkdir(parents=True, exist_ok=True)
        (self.record_dir / "memory-guard.json").write_text(json.dumps(self.summary(), indent=2) + "\n")


def abort_ranks(doc: Mapping[str, Any], fleet: FleetLike, rounds: int = KILL_ROUNDS) -> KillReport:
    """The breach action: kill every rank now, on every node, without a playbook (the command's
    own failure path runs `down` afterwards, which is idempotent). Each round checks the unit and
    the container on the node; a node where either still runs gets the next, harder round."""
    unit = unit_name(doc)
    containers = {entry["name"]: rank_launch(entry).container for entry in doc["nodes"]}
    state: dict[str, str] = {}
    pending = list(containers)
    done = 0
    for done in range(1, rounds + 1):
        scripts = {name: _kill_script(unit, containers[name], escalate=done > 1) for name in pending}
        answers = fleet.run(scripts, timeout=15 + 5 * done, only=pending)
        for name in pending:
            state[name] = _killed(answers.get(name))
        pending = [name for name in pending if state[name] != "killed"]
        if not pending:
            break
    return KillReport(state, done)


def _kill_script(unit: str, container: str | None, escalate: bool) -> str:
    if not escalate:
        kill = f"docker kill {container} >/dev/null 2>&1; " if container else ""
        kill += f"systemctl kill --signal=SIGKILL {unit} 2>/dev/null; "
    else:  # every process of the unit's cgroup, the container gone, the unit stopped (no auto-restart)
        kill = f"docker rm -f {container} >/dev/null 2>&1; " if container else ""
        kill += (f"systemctl kill --kill-whom=all --signal=SIGKILL {unit} 2>/dev/null; "
                 f"timeout 10 systemctl stop {unit} 2>/dev/null; ")
    check = f'sleep 1; echo "unit=$(systemctl is-active {unit} 2>/dev/null)"; '
    if container:
        check += (f"echo \"container=$(docker inspect -f '{{{{.State.Running}}}}' {container} 2>/dev/null "
                  '|| echo gone)"; ')
    return f"{kill}{check}true\n"


def _killed(res: Any) -> str:
    if res is None or not res.reachable:
        return f"unreachable ({getattr(res, 'error', None) or 'no answer'})"
    seen = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
    unit, container = seen.get("unit", "").strip(), seen.get("container", "gone").strip()
    alive = [f"unit {unit}"] if unit in _ALIVE else []
    alive += ["container running"] if container == "true" else []
    if not unit and "unit" not in seen:
        return "still running? (the node did not say)"
    return f"still running ({', '.join(alive)})" if alive else "killed"
