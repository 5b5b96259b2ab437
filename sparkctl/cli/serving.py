"""How the serving verbs look on a terminal: the status, phase and preflight tables, the ``Output``
that `up` and `down` report through, and `up`/`down` run and printed — the same for the commands,
the supervisor (`sparkctl watch`) and `upgrade`; ``by_admin``: the admin's lifecycle commands (`up`,
`down`, `upgrade`, `reset`) inside ``serve.admin.lifecycle``, its waiting and final healing printed."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from sparkctl import ui
from sparkctl.ansible.runner import RunnerEvent
from sparkctl.cli.common import event_printer
from sparkctl.model import load_inventory
from sparkctl.render import plan_document
from sparkctl.serve import admin, bootwatch, preflight, verdict
from sparkctl.serve.down import Down, DownResult
from sparkctl.serve.guard import R4_MIN_MEM_AVAILABLE_GIB
from sparkctl.serve.thermals import CRIT
from sparkctl.serve.thermals import gpu_text as gpu_cell
from sparkctl.serve.tools import FAIL, OK, SKIP, Tools
from sparkctl.serve.up import Up, UpResult

MARK = {OK: ui.OK, FAIL: ui.FAIL, SKIP: ui.SKIP}
VERDICT_STYLE = {verdict.READY: "green", verdict.DEGRADED: "yellow", verdict.DOWN: "red"}
PHASE_MARK = {bootwatch.OK: ui.OK, bootwatch.FAIL: ui.FAIL, bootwatch.WAIT: "[cyan]…[/cyan]",
              bootwatch.SKIP: ui.SKIP, bootwatch.PENDING: "[dim]·[/dim]"}


def gib(value: int | None) -> str:
    return f"{value / verdict.GIB:.1f}" if value is not None else "–"


# --- tables ---------------------------------------------------------------------------------------


def status_table(snap: verdict.Snapshot) -> Table:
    table = Table(title=None, expand=False)
    for col in ("rank", "node", "unit", "MemAvail GiB", "GPU", "fabric", "shards"):
        table.add_column(col)
    for f in sorted(snap.nodes.values(), key=lambda f: f.rank):
        if not f.reachable:
            table.add_row(str(f.rank), f.name, f"[red]unreachable[/red] {f.error}", "", "", "", "")
            continue
        state = f.active
        color = "green" if state == "active" else "red" if state in ("failed",) else "yellow"
        unit = f"[{color}]{state}[/{color}]"
        up_s = f.unit.get("up_s")
        if state == "active" and up_s is not None:
            unit += f" {int(up_s)}s"
        faults = snap.faults.get(f.name)
        if faults:  # OOM-killed or restarted, in words (verdict.rank_faults)
            unit += " [red]" + escape("; ".join(faults)) + "[/red]"
        links = []
        for dev, link in (f.data.get("links") or {}).items():
            if not link.get("present"):
                links.append(f"[red]{dev} missing[/red]")
            else:
                c = "green" if link.get("state") in ("up", "unknown") else "red"
                links.append(f"[{c}]{link.get('state')}[/{c}] {link.get('mtu')}")
        shards = f.data.get("shards")
        shard_text = "–" if shards is None else ("[green]verified[/green]" if shards.get("verified")
                                                 else "[red]not verified[/red]")
        table.add_row(str(f.rank), f.name, unit, gib(f.mem_available), gpu_cell(f), " ".join(links),
                      shard_text)
    return table


def render_status(snap: verdict.Snapshot) -> Group:
    style = VERDICT_STYLE[snap.verdict]
    lines: list[Any] = [status_table(snap)]
    head = snap.head
    if head is not None:
        parts = [f"{p} {a.code if a.code is not None else a.error}"
                 for p, a in (("/health", head.health), ("/ready", head.ready), ("/v1/models", head.models))]
        lines.append(Text(f"rank 0 {head.url}: " + ", ".join(parts)))
    lines.append(Text.from_markup(f"[bold {style}]{snap.verdict}[/bold {style}]  ({snap.seconds:.2f} s)"))
    for reason in snap.reasons:
        lines.append(Text(f"  • {reason}"))
    for w in snap.warnings:
        color = "red" if w.level == CRIT else "yellow"
        lines.append(Text.from_markup(f"  [{color}]![/{color}] ") + Text(w.describe()))
    return Group(*lines)


def phase_table(state: bootwatch.BootState) -> Table:
    table = Table(title=f"gate: {state.gate}  ({state.elapsed:.0f} s, {state.samples} memory samples)")
    for col in ("rank", "node", "unit", *bootwatch.PHASES[1:], "MemAvail min GiB", "note"):
        table.add_column(col.replace("_", " "))
    for row in sorted(state.rows.values(), key=lambda r: r.rank):
        table.add_row(
            str(row.rank), row.name, f"{PHASE_MARK[row.phases['unit']]} {row.unit}",
            *(PHASE_MARK[row.phases[p]] for p in bootwatch.PHASES[1:]),
            gib(row.mem_min), row.note,
        )
    return table


def preflight_table(checks: list[preflight.Check]) -> Table:
    table = Table(title="preflight")
    for col in ("node", "check", "", "detail"):
        table.add_column(col)
    for c in checks:
        mark = ui.SKIP if c.skipped else ui.OK if c.ok else ui.FAIL
        table.add_row(c.node, c.name, mark, c.detail)
    return table


# --- the Output of `up` and `down` -----------------------------------------------------------------


class ConsoleOutput:
    """``serve.tools.Output`` on the terminal: progress on stdout (stderr under --json), failures of
    playbook tasks always and every task with --verbose, the live phase table (none under --json)."""

    def __init__(self, as_json: bool, verbose: bool):
        self.as_json, self.verbose = as_json, verbose
        self.progress = ui.err_console if as_json else ui.console
        self._events = event_printer(verbose)

    def say(self, text: str, mark: str = "") -> None:
        self.progress.print(f"{MARK[mark]} {text}" if mark else text)

    def note(self, text: str, mark: str = "") -> None:
        ui.err_console.print(f"{MARK[mark]} {text}" if mark else text)

    def falling_back(self, why: str) -> None:
        ui.err_console.print(f"{ui.SKIP} {escape(why)}: running playbooks/down.yml")

    def preflight(self, checks: list[preflight.Check]) -> None:
        ui.err_console.print(preflight_table(checks))

    def playbook_event(self, ev: RunnerEvent) -> None:
        self._events(ev)

    @contextlib.contextmanager
    def watching(self, state: bootwatch.BootState) -> Iterator[Callable[[bootwatch.BootState], None]]:
        if self.as_json:
            yield lambda s: None
            return
        with Live(phase_table(state), console=ui.console, refresh_per_second=4) as live:
            yield lambda s: live.update(phase_table(s))


# --- the admin's lifecycle commands ------------------------------------------------------------------


def by_admin(state: Any, cluster_name: str, verb: str, *, healing_after: str,
             healing_on_failure: str = admin.AS_BEFORE,
             paused_why: str | None = None) -> contextlib.AbstractContextManager[admin.Turn]:
    """``serve.admin.lifecycle`` for a command typed by a person (``state``: the global options):
    who it waits for and the healing it leaves go to stderr (under --json) or stdout."""
    out = ui.err_console if state.json else ui.console
    return admin.lifecycle(cluster_name, verb, healing_after=healing_after,
                           healing_on_failure=healing_on_failure, paused_why=paused_why,
                           on_wait=lambda who: ui.err_console.print(f"waiting for {escape(who)}"),
                           say=lambda note: out.print(escape(note)))


# --- `up` and `down`, run and printed ----------------------------------------------------------------


def start_group(state: Any, tools: Tools, *, force: bool = False, restart: bool = False, yes: bool = False,
                full: bool = False) -> UpResult:
    """`up` as the command runs it (``state``: the global options), printed."""
    cluster = load_inventory(state.inventory_dir())
    out = ConsoleOutput(state.json, state.verbose)
    up = Up(cluster, plan_document(cluster), tools, out, force=force, restart=restart, yes=yes, full=full,
            verbose=state.verbose)
    result = up.run()
    if state.json:
        ui.print_json(result.as_dict(cluster.name))
    elif result.changed:
        assert result.state is not None
        out.say(f"[bold green]ready[/bold green] in {result.seconds:.1f} s "
                f"(gates {result.state.elapsed:.1f} s, lowest MemAvailable {gib(result.lowest)} GiB against "
                f"R4's published {R4_MIN_MEM_AVAILABLE_GIB} GiB); records in {result.run_dir}", OK)
    return result


def stop_group(state: Any, tools: Tools, grace: int | None = None, full: bool = False) -> DownResult:
    """`down` as the command runs it, printed."""
    cluster = load_inventory(state.inventory_dir())
    result = Down(cluster, plan_document(cluster), tools, ConsoleOutput(state.json, state.verbose),
                  grace, full).run()
    if state.json:
        ui.print_json(result.as_dict(cluster.name))
    elif result.path == "fast":
        ui.console.print(f"{ui.OK} every rank is stopped (nothing was running: every rank unit inactive, "
                         f"checked in {result.checked_s:.1f} s over SSH)")
    elif result.path == "ssh":
        ui.console.print(f"{ui.OK} every rank is stopped (rank 0 first, over SSH without the playbook: every "
                         f"node answered; {result.seconds:.1f} s)")
    else:
        nothing = "" if result.stopped else " (nothing was running)"
        ui.console.print(f"{ui.OK} every rank is stopped{nothing}")
    return result
