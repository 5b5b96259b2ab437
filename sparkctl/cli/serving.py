"""How the serving verbs look on a terminal: the phase and preflight tables, the ``Output``
that `up` and `down` report through, and `up`/`down` run and printed — the same for the commands,
the supervisor (`sparkctl watch`) and `upgrade`; ``by_admin``: the admin's lifecycle commands (`up`,
`down`, `upgrade`, `reset`) inside ``serve.admin.lifecycle``, its waiting and final healing printed.
`status`'s own tables are ``cli.status_view``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rich import box
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from sparkctl import ui
from sparkctl.ansible.runner import RunnerEvent
from sparkctl.cli.common import event_printer
from sparkctl.cli.status_view import gib
from sparkctl.model import load_inventory
from sparkctl.serve import admin, bootwatch, preflight
from sparkctl.serve.down import DownResult, down_groups
from sparkctl.serve.guard import R4_MIN_MEM_AVAILABLE_GIB
from sparkctl.serve.tools import FAIL, OK, SKIP, Tools
from sparkctl.serve.up import UpResult, up_groups

MARK = {OK: ui.OK, FAIL: ui.FAIL, SKIP: ui.SKIP}
PHASE_MARK = {bootwatch.OK: ui.OK, bootwatch.FAIL: ui.FAIL, bootwatch.WAIT: "[cyan]…[/cyan]",
              bootwatch.SKIP: ui.SKIP, bootwatch.PENDING: "[dim]·[/dim]"}


# The phases' column headers: short, so that the table fits an 80-column terminal with node names of
# up to ~20 characters whole. A unit that is not active says its state, and each rank's note goes, under
# the table on a line of its own.
PHASE_HEADER = {"server_info": "info"}


def phase_table(state: bootwatch.BootState, width: int = 80) -> Group:
    headers = ["rank", "node", *(PHASE_HEADER.get(p, p) for p in bootwatch.PHASES), "MemAvail"]
    longest = max((len(r.name) for r in state.rows.values()), default=4)
    natural = sum(len(h) for h in headers) - len("node") + max(longest, len("node"))
    gap = 2 if natural + 2 * (len(headers) - 1) <= width else 1  # two spaces between columns where they fit
    table = Table(title=f"gate: {state.gate}  ({state.elapsed:.0f} s, {state.samples} memory samples)",
                  box=box.SIMPLE_HEAD, title_justify="left", padding=(0, gap - 1), pad_edge=False,
                  collapse_padding=True, show_edge=False)
    table.add_column("rank", no_wrap=True)
    table.add_column("node", no_wrap=True)
    for phase in bootwatch.PHASES:
        table.add_column(PHASE_HEADER.get(phase, phase), justify="center", no_wrap=True)
    table.add_column("MemAvail\nmin GiB", justify="right", no_wrap=True)
    rows = sorted(state.rows.values(), key=lambda r: r.rank)
    for row in rows:
        table.add_row(str(row.rank), row.name, *(PHASE_MARK[row.phases[p]] for p in bootwatch.PHASES),
                      gib(row.mem_min))
    notes = []
    for row in rows:
        said = [f"unit {row.unit}"] if row.unit not in ("active", "?") else []
        said += [row.note] if row.note else []
        if said:
            notes.append(Text(f"  rank {row.rank} ({row.name}): {'; '.join(said)}"))
    return Group(table, *notes)


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
        with ui.live(phase_table(state, ui.console.width), ui.console, refresh_per_second=4) as live:
            yield lambda s: live.update(phase_table(s, ui.console.width))


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
                full: bool = False, groups: list[str] | None = None) -> UpResult:
    """`up` as the command runs it (``state``: the global options), printed. On a site of several
    serving groups each group (``groups``: those named by --group, default all) comes up in turn, in
    the site's order (``serve.up.up_groups``); the result is the last group's."""
    cluster = load_inventory(state.inventory_dir())
    out = ConsoleOutput(state.json, state.verbose)
    done: dict[str, Any] = {}
    result: UpResult | None = None
    per_group = False
    gates: dict[str, Any] = {}  # the site's own gates after the groups (the router's)
    for t, per_group, result in up_groups(cluster, tools, out, groups, force=force, restart=restart, yes=yes,
                                          full=full, verbose=state.verbose, gates=gates):
        if state.json:
            done[t.group] = result.as_dict(t.cluster.name)
        elif result.changed:
            assert result.state is not None
            who = f"group {t.group} " if per_group else ""
            out.say(f"{who}[bold green]ready[/bold green] in {result.seconds:.1f} s "
                    f"(gates {result.state.elapsed:.1f} s, lowest MemAvailable {gib(result.lowest)} GiB "
                    f"against R4's published {R4_MIN_MEM_AVAILABLE_GIB} GiB); records in {result.run_dir}",
                    OK)
    assert result is not None
    if state.json:
        if per_group:
            ui.print_json({"cluster": cluster.name, "result": "ready",
                           "changed": any(d.get("changed") for d in done.values()), "groups": done,
                           **gates})
        else:
            ui.print_json(next(iter(done.values())))
    return result


def stop_group(state: Any, tools: Tools, grace: int | None = None, full: bool = False,
               groups: list[str] | None = None) -> DownResult:
    """`down` as the command runs it, printed; on a site of several serving groups each group named
    by --group (default all) is stopped in turn, rank 0 first in each (``serve.down.down_groups``)."""
    cluster = load_inventory(state.inventory_dir())
    out = ConsoleOutput(state.json, state.verbose)
    done: dict[str, Any] = {}
    result: DownResult | None = None
    per_group = False
    for t, per_group, result in down_groups(cluster, tools, out, groups, grace, full):
        done[t.group] = result.as_dict(t.cluster.name)
        if per_group and not state.json:
            how = {"fast": "nothing was running", "ssh": "rank 0 first, over SSH"}.get(result.path,
                                                                                      "playbook")
            ui.console.print(f"{ui.OK} group {t.group}: every rank is stopped ({how})")
    assert result is not None
    if per_group:
        if state.json:
            ui.print_json({"cluster": cluster.name, "result": "down",
                           "stopped": any(d.get("stopped") for d in done.values()), "groups": done})
    elif state.json:
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
