"""Live per-host progress of an Ansible run, and the summary printed after it.

``HostTable`` is an ``on_event`` handler for :func:`sparkctl.ansible.runner.execute`: while the run goes,
a rich ``Live`` table shows each host's current task and its ok/changed/failed counts; afterwards
:func:`print_summary` prints the per-host totals, the failures and the artifacts path.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from sparkctl import ui
from sparkctl.ansible import runner


@dataclass
class _Row:
    task: str = ""
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    state: str = "waiting"        # waiting | running | done | failed | unreachable
    msg: str = ""
    diffs: list[str] = field(default_factory=list)


class HostTable:
    """Live table of hosts × (current task, ok, changed, failed); use as a context manager.

    With ``enabled=False`` (JSON output, no terminal) it only counts, printing nothing.
    """

    def __init__(
        self,
        title: str,
        hosts: list[str] | None = None,
        console: Console | None = None,
        enabled: bool = True,
        show_diff: bool = False,
    ):
        self.title = title
        self.console = console or ui.console
        self.enabled = enabled
        self.show_diff = show_diff
        self.rows: dict[str, _Row] = {h: _Row() for h in hosts or []}
        self.play = ""
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._live: Any = None

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> HostTable:
        if self.enabled:
            self._live = ui.live(self._render(), self.console, refresh_per_second=8, transient=False)
            self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            for row in self.rows.values():
                if row.state == "running":
                    row.state = "done"
                    row.task = ""
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(exc_type, exc, tb)
            self._live = None

    # -- the event handler -----------------------------------------------------------------------
    def __call__(self, ev: runner.RunnerEvent) -> None:
        with self._lock:
            self._apply(ev)
        if self._live is not None:
            self._live.update(self._render())

    def _apply(self, ev: runner.RunnerEvent) -> None:
        if ev.kind == runner.PLAY:
            self.play = ev.task or ""
            return
        if not ev.host:
            return
        row = self.rows.setdefault(ev.host, _Row())
        if row.state in ("failed", "unreachable") and ev.kind != runner.DIFF:
            return
        if ev.kind == runner.TASK:
            row.task = ev.task or ""
            row.state = "running"
        elif ev.kind == runner.OK:
            row.ok += 1
        elif ev.kind == runner.CHANGED:
            row.ok += 1
            row.changed += 1
        elif ev.kind == runner.SKIPPED:
            row.skipped += 1
        elif ev.kind == runner.FAILED:
            if ev.ignored:
                row.ok += 1
                return
            row.failed += 1
            row.state = "failed"
            row.msg = ev.task or ""  # the task; why is printed once, one line per node, after the run
        elif ev.kind == runner.UNREACHABLE:
            row.failed += 1
            row.state = "unreachable"
            row.msg = ev.msg or "unreachable"
        elif ev.kind == runner.DIFF and self.show_diff:
            row.diffs.extend(_diff_text(ev.task or "", ev.res.get("diff")))

    # -- rendering -------------------------------------------------------------------------------
    def _render(self) -> Group:
        elapsed = time.monotonic() - self.started
        title = f"{self.title} · {self.play}" if self.play else self.title
        table = Table(title=f"{title} · {elapsed:.0f}s", title_justify="left", expand=False)
        table.add_column("host", style="bold")
        table.add_column("task", overflow="fold", max_width=56)  # wraps at words, never cut
        table.add_column("ok", justify="right")
        table.add_column("changed", justify="right")
        table.add_column("failed", justify="right")
        for host in self.rows:  # in the order given (rank order); hosts the run adds come after
            row = self.rows[host]
            table.add_row(
                host,
                _state_text(row),
                str(row.ok),
                Text(str(row.changed), style="yellow" if row.changed else ""),
                Text(str(row.failed), style="red" if row.failed else ""),
            )
        return Group(table)


def _state_text(row: _Row) -> Text:
    if row.state == "failed":
        return Text("⨯ failed in " + row.msg, style="red")
    if row.state == "unreachable":
        return Text("⨯ unreachable", style="red")
    if row.state == "done":
        return Text("✓ done", style="green")
    if row.state == "waiting":
        return Text("…", style="dim")
    return Text(row.task)


def _diff_text(task: str, diff: Any) -> list[str]:
    """Unified-ish text of an Ansible diff payload (dict or list of dicts)."""
    import difflib

    items = diff if isinstance(diff, list) else [diff]
    out: list[str] = []
    for d in items:
        if not isinstance(d, dict):
            continue
        if "prepared" in d:
            out.append(f"--- {task}\n{d['prepared']}")
            continue
        before, after = d.get("before", ""), d.get("after", "")
        if not isinstance(before, str) or not isinstance(after, str):
            before, after = str(before), str(after)
        name_a = d.get("before_header", "before")
        name_b = d.get("after_header", "after")
        lines = difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), str(name_a), str(name_b)
        )
        text = "".join(lines)
        if text:
            out.append(f"# {task}\n{text}")
    return out


def print_summary(
    result: runner.RunResult, table: HostTable | None = None, console: Console | None = None
) -> None:
    """Per-host totals, the failures by host, diffs when asked for, and where the artifacts are."""
    con = console or ui.console
    if table is not None and table.show_diff:
        for host in sorted(table.rows):
            for chunk in table.rows[host].diffs:
                con.print(f"[bold]{host}[/bold]")
                con.print(Text(chunk))
    summary = Table(title=f"{result.plan.playbook} · {result.duration_s:.1f}s", title_justify="left")
    summary.add_column("")
    summary.add_column("host", style="bold")
    for col in ("ok", "changed", "failed", "unreachable", "skipped"):
        summary.add_column(col, justify="right")
    failed_hosts = set(result.failed_hosts)
    order = [h for h in (table.rows if table is not None else ()) if h in result.stats]
    for host in order + sorted(set(result.stats) - set(order)):  # the table's (rank) order
        s = result.stats[host]
        mark = ui.FAIL if host in failed_hosts or not s.healthy else ui.OK
        summary.add_row(
            mark,
            host,
            str(s.ok),
            f"[yellow]{s.changed}[/yellow]" if s.changed else "0",
            f"[red]{s.failed}[/red]" if s.failed else "0",
            f"[red]{s.unreachable}[/red]" if s.unreachable else "0",
            str(s.skipped),
        )
    con.print(summary)
    # The failures themselves are printed once, one line per node in rank order, by the error the
    # verb raises (sparkctl.ansible.failures.error_for): not here, and not as they happen.
    con.print(f"[dim]artifacts: {result.artifact_dir}[/dim]")
