"""What `status` prints as a table: one serving group's nodes, rank 0's endpoints, the router, the
verdict and its reasons; several groups under the site's verdict. Kept apart from the `up`/`down`
views (``cli.serving``), so that `status` imports none of the start and stop machinery."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from sparkctl import ui
from sparkctl.serve import verdict
from sparkctl.serve.thermals import CRIT
from sparkctl.serve.thermals import gpu_text as gpu_cell

if TYPE_CHECKING:
    from sparkctl.serve.router_status import RouterFacts

VERDICT_STYLE = {verdict.READY: "green", verdict.DEGRADED: "yellow", verdict.DOWN: "red"}


def gib(value: int | None) -> str:
    return f"{value / verdict.GIB:.1f}" if value is not None else "–"


def uptime(seconds: float) -> str:
    """A unit's time up, short: ``45s``, ``12m``, ``3h12m``, ``4d3h``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def fabric_cell(links: dict[str, Any]) -> str:
    """The node's fabric ports: ``2× up 9000`` where they agree, else each one's state and MTU (a
    missing port by name)."""
    shown = []
    for dev, link in links.items():
        if not link.get("present"):
            shown.append(f"[red]{escape(dev)} missing[/red]")
        else:
            c = "green" if link.get("state") in ("up", "unknown") else "red"
            shown.append(f"[{c}]{escape(str(link.get('state')))}[/{c}] {link.get('mtu')}")
    if len(shown) > 1 and len(set(shown)) == 1 and "missing" not in shown[0]:
        return f"{len(shown)}× {shown[0]}"
    return " ".join(shown) or "–"


def status_table(snap: verdict.Snapshot) -> Table:
    """One row per node, within 80 columns for four `spark-N` nodes: no cell wraps."""
    table = ui.compact_table(columns=("rank", "node", "unit", "mem GiB", "GPU", "fabric", "shards"),
                             wrap=("rank", "node", "unit", "shards"))
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
            unit += f" {uptime(up_s)}"
        faults = snap.faults.get(f.name)
        if faults:  # OOM-killed or restarted, in words (verdict.rank_faults)
            unit += " [red]" + escape("; ".join(faults)) + "[/red]"
        shards = f.data.get("shards")
        # verified or not; why not is among the reasons under the table
        shard_text = "–" if shards is None else (ui.OK if shards.get("verified") else ui.FAIL)
        table.add_row(str(f.rank), f.name, unit, gib(f.mem_available), gpu_cell(f),
                      fabric_cell(f.data.get("links") or {}), shard_text)
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
