"""Live per-node staging bars on the controller: bytes, rate, ETA, and the task each node is in.

The transfer agents write ``<run_dir>/stage-progress.json`` on every node (see transfer.py); a
poller thread reads them over SSH (``sparkctl.ssh.fleet``, host keys verified) once a second while
the playbook runs, and the runner's events say which task each node is in.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from sparkctl.ansible import runner
from sparkctl.ssh import fleet as remote

if TYPE_CHECKING:
    from sparkctl.model import Cluster

PROGRESS_FILE = "stage-progress.json"

# read_all() -> {node: raw JSON text or None}
Reader = Callable[[], dict[str, str | None]]


def parse(text: str | None, since: float) -> dict[str, Any] | None:
    """A progress document written during this run (older ones are from a previous run)."""
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or float(doc.get("updated", 0)) < since:
        return None
    return doc


def fleet_reader(cluster: Cluster) -> tuple[Reader, Callable[[], None]]:
    """A reader over SSH for every node of ``cluster``, and the function that closes it."""
    fleet = remote.Fleet(remote.targets_for(cluster))
    path = f"{cluster.paths.run_dir}/{PROGRESS_FILE}"
    script = f"cat {shlex.quote(path)} 2>/dev/null || true"

    def read() -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for name, res in fleet.run(script, timeout=5.0).items():
            out[name] = res.stdout if res.ok else None
        return out

    return read, fleet.close


class StageBars:
    """An ``on_event`` handler plus a poller; use as a context manager around ``runner.execute``."""

    def __init__(
        self,
        nodes: list[str],
        reader: Reader | None,
        console: Console,
        enabled: bool = True,
        interval: float = 1.0,
    ):
        self.nodes = nodes
        self.reader = reader
        self.enabled = enabled
        self.interval = interval
        self.started = time.time() - 5.0
        self.progress = Progress(
            TextColumn("[bold]{task.fields[node]:<10}"),
            TextColumn("{task.fields[phase]:<34}", style="dim"),
            BarColumn(bar_width=28),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
            disable=not enabled,
            transient=False,
        )
        self.tasks: dict[str, TaskID] = {
            n: self.progress.add_task("", total=None, node=n, phase="waiting") for n in nodes
        }
        self.latest: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StageBars:
        if self.enabled:
            self.progress.start()
        if self.reader is not None and self.enabled:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.enabled:
            self.progress.stop()

    def __call__(self, ev: runner.RunnerEvent) -> None:
        if ev.host not in self.tasks:
            return
        task = self.tasks[ev.host]
        if ev.kind == runner.TASK and ev.task:
            self.progress.update(task, phase=ev.task[:34])
        elif ev.kind in (runner.FAILED, runner.UNREACHABLE) and not ev.ignored:
            self.progress.update(task, phase=f"[red]failed: {ev.task or ''}"[:40])

    def apply(self, docs: dict[str, str | None]) -> None:
        for node, text in docs.items():
            doc = parse(text, self.started)
            if doc is None or node not in self.tasks:
                continue
            self.latest[node] = doc
            total = int(doc.get("bytes_total") or 0) or None
            self.progress.update(self.tasks[node], total=total, completed=int(doc.get("bytes_done") or 0))

    def _poll(self) -> None:
        assert self.reader is not None
        while not self._stop.wait(self.interval):
            try:
                self.apply(self.reader())
            except Exception:  # a broken poll must never break the run; the next one may work
                continue
