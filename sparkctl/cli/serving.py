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
from sparkctl.serve import admin, bootwatch, preflight, verdict
from sparkctl.serve.down import DownResult, down_groups
from sparkctl.serve.guard import R4_MIN_MEM_AVAILABLE_GIB
from sparkctl.serve.router_status import RouterFacts
from sparkctl.serve.thermals import CRIT
from sparkctl.serve.thermals import gpu_text as gpu_cell
from sparkctl.serve.tools import FAIL, OK, SKIP, Tools
from sparkctl.serve.up import UpResult, up_groups

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
            # why, and what to check, is its line among the reasons under the table (printed once)
            table.add_row(str(f.rank), f.name, "[red]unreachable[/red]", "", "", "", "")
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
    if snap.router is not None:
        lines.append(router_line(snap.router))
    lines.append(Text.from_markup(f"[bold {style}]{snap.verdict}[/bold {style}]  ({snap.seconds:.2f} s)"))
    for reason in snap.reasons:
        lines.append(Text(f"  • {reason}"))
    for w in snap.warnings:
        color = "red" if w.level == CRIT else "yellow"
        lines.append(Text.from_markup(f"  [{color}]![/{color}] ") + Text(w.describe()))
    return Group(*lines)


def router_line(rf: RouterFacts) -> Text:
    """The router's row: where it runs, its unit, /health, and the groups it routes to."""
    if not rf.reachable:
        return Text.from_markup(f"router {escape(rf.url)} on {escape(rf.node)}: [red]unreachable[/red]")
    color = "green" if rf.active == "active" else "red"
    health = rf.health if rf.health is not None else rf.error
    seen = "workers unread" if rf.workers is None else (
        f"routes to {len(rf.expected) - len(rf.missing)} of {len(rf.expected)} groups")
    return Text.from_markup(f"router {escape(rf.url)} on {escape(rf.node)} ({escape(rf.policy)}): "
                            f"[{color}]{escape(rf.active)}[/{color}], /health {escape(str(health))}, "
                            f"{escape(seen)}")


def render_groups_status(snaps: dict[str, verdict.Snapshot], overall: str,
                         router: RouterFacts | None = None) -> Group:
    """`status` of several serving groups: each group's table and verdict under its name, the router
    in front of them (sparkctl_router), then the site's verdict (ready only when every group is, and
    the router routes to each)."""
    parts: list[Any] = []
    for name, snap in snaps.items():
        style = VERDICT_STYLE[snap.verdict]
        parts.append(Text.from_markup(f"[bold]group {escape(name)}[/bold]: "
                                      f"[{style}]{snap.verdict}[/{style}]"))
        parts.append(render_status(snap))
    if router is not None:
        parts.append(router_line(router))
        parts += [Text(f"  • {reason}") for reason in router.reasons()]
    style = VERDICT_STYLE.get(overall, "red")
    ready = sum(1 for s in snaps.values() if s.verdict == verdict.READY)
    parts.append(Text.from_markup(f"[bold]site[/bold]: [bold {style}]{overall}[/bold {style}] "
                                  f"({ready} of {len(snaps)} groups ready)"))
    return Group(*parts)


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
