"""What the serving verbs (`up`, `down`, `status`, `logs`, `bundle`, the supervisor) work with.

``Tools`` holds every collaborator that touches the world — the playbook runner, the SSH fleet, the
HTTP client, the run directory, the person at the terminal, the qualify step, the kit reference,
the memory guard — so the verbs (``serve.up.Up``, ``serve.down.Down``) take them as arguments and
the CLI tests hand in fakes through the one factory the CLI builds them with
(``sparkctl.cli.common.tools``). ``Output`` is how a verb tells the person what it does; the CLI
implements it with rich (serve itself prints nothing and imports no terminal library).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import httpx

from sparkctl.ansible import runner
from sparkctl.ansible.plan import Plan
from sparkctl.ansible.runner import EventHandler, RunResult
from sparkctl.errors import SparkctlError
from sparkctl.serve.guard import MemoryGuard
from sparkctl.ssh import fleet as remote

if TYPE_CHECKING:
    from sparkctl.model import Cluster
    from sparkctl.serve import bootwatch, preflight
    from sparkctl.serve.fastup import KitReference

# The marks an ``Output`` puts before a line (the CLI draws them).
OK, FAIL, SKIP = "ok", "fail", "skip"

Qualify = Callable[[], tuple[bool, str]]


def execute(plan: Plan, on_event: EventHandler | None = None, run_dir: Path | None = None) -> RunResult:
    """The playbook runner; ``run_dir``: the verb's own run directory (the playbook's records go
    inside it), else the runner makes one."""
    if run_dir is None:
        return runner.execute(plan, on_event)
    return runner.execute(plan, on_event, run_dir=run_dir)


def fleet(cluster: Cluster) -> remote.Fleet:
    """SSH connections to every node."""
    return remote.Fleet(remote.targets_for(cluster))


def http() -> httpx.Client:
    return httpx.Client(timeout=5.0)


def interactive() -> bool:
    """Whether a person can be asked (stdin and stderr are a terminal)."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def _refuse(question: str) -> bool:
    return False


def _no_qualify(cluster: Cluster, run_dir: Path) -> Qualify | None:
    return None


def _no_kit(cluster: Cluster) -> KitReference | str | None:
    return None


@dataclass
class Tools:
    """The collaborators of the serving verbs (the real ones by default; the CLI adds the ones that
    live above serve: the terminal's question, the qualify step, the kit reference)."""

    execute: Callable[..., RunResult] = execute
    fleet: Callable[[Cluster], remote.Fleet] = fleet
    http: Callable[[], httpx.Client] = http
    new_run_dir: Callable[[str], Path] = runner.new_run_dir
    interactive: Callable[[], bool] = interactive
    ask: Callable[[str], bool] = _refuse
    qualify: Callable[[Cluster, Path], Qualify | None] = _no_qualify
    kit_reference: Callable[[Cluster], KitReference | str | None] = _no_kit
    memory_guard: Callable[..., MemoryGuard] = MemoryGuard


class Output(Protocol):
    """How a verb tells the person what it does (the CLI draws it)."""

    def say(self, text: str, mark: str = "") -> None:
        """A line of the verb's progress (stdout; stderr when stdout carries JSON)."""

    def note(self, text: str, mark: str = "") -> None:
        """A line on stderr (rich markup allowed)."""

    def falling_back(self, why: str) -> None:
        """Stopping over SSH failed (``why``, literal text): playbooks/down.yml runs instead."""

    def preflight(self, checks: list[preflight.Check]) -> None:
        """The preflight table (the failed checks, or all with --verbose)."""

    def playbook_event(self, ev: runner.RunnerEvent) -> None:
        """One event of a running playbook."""

    def watching(
        self, state: bootwatch.BootState
    ) -> AbstractContextManager[Callable[[bootwatch.BootState], None]]:
        """The live view of the readiness gates; yields what to call with each new state."""
        ...


def api_key(cluster: Cluster) -> str | None:
    """The API key's value (a missing secret is bad input: it raises, exit 2)."""
    ref = cluster.secrets.get("api_key")
    return ref.resolve() if ref is not None else None


def api_key_or_none(cluster: Cluster) -> str | None:
    """The API key, or None when it cannot be had (status still shows the rest; /v1/models says 401)."""
    try:
        return api_key(cluster)
    except SparkctlError:
        return None


def secrets(cluster: Cluster) -> list[str]:
    """Every secret value that resolves now (for redaction); unresolvable ones are skipped."""
    values = []
    for ref in cluster.secrets.values():
        try:
            values.append(ref.resolve())
        except SparkctlError:
            continue
    return values
