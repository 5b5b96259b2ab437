"""`sparkctl preflight`: the read-only checks every mutating playbook starts with, on their own.

Load the inventory (exit 2 on problems, nothing contacted) → ``plan.for_preflight`` →
``runner.execute(playbooks/preflight.yml)`` → one identity table (OS, kernel, NVIDIA driver, CUDA,
CX-7 firmware, BIOS per node; values that differ across nodes in red) → exit 0 when every node
answered and agrees, 1 otherwise (the message names the nodes and fields). Nothing is changed.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from sparkctl import ui
from sparkctl.ansible import failures, runner
from sparkctl.ansible import plan as planning
from sparkctl.ansible.outcome import identities, mismatched
from sparkctl.cli.completion import complete_hosts
from sparkctl.cli.identity import identity_table
from sparkctl.cli.shell import PROVISION, example
from sparkctl.model import load_inventory


def preflight(
    ctx: typer.Context,
    limit: Annotated[
        str | None,
        typer.Option("--limit", help="Only these nodes (comma-separated inventory names).",
                     autocompletion=complete_hosts),
    ] = None,
) -> None:
    """Read-only: inventory asserts, every node answering, and one identity table that must agree."""
    state = ctx.obj
    cluster = load_inventory(state.inventory_dir())
    plan = planning.for_preflight(cluster, limit)
    if state.verbose and not state.json:
        ui.console.print(Text("$ " + " ".join(plan.argv()), style="dim"))
    if state.json:
        result = runner.execute(plan)
    else:
        with ui.console.status("preflight: reading every node …"):
            result = runner.execute(plan)
    ids = identities(result)
    failed = failures.for_cluster(result.failures, cluster)
    unreachable = {nf.host: nf.reason() for nf in failed if nf.unreachable}
    differ = mismatched(ids)  # over the nodes that answered: one that did not is no level
    if state.json:
        ui.print_json({"ok": result.ok, "cluster": cluster.name, "nodes": ids, "mismatched": differ,
                       "unreachable": unreachable, "run": result.as_dict()})
    else:
        short = {nf.host: nf.short() for nf in failed if nf.unreachable}
        ui.console.print(identity_table(cluster, ids, short))
        ui.console.print(f"[dim]artifacts: {result.artifact_dir}[/dim]")
    if not result.ok:
        parts = [f"node identity differs in {', '.join(differ)}"] if differ else []
        what = "; ".join([*parts, failures.what_failed(result, cluster)] if failed else parts) or "failed"
        todo = []
        if unreachable:
            todo.append(f"reach {', '.join(unreachable)} (the cause and what to check are on each line)")
        if differ:
            todo.append("bring the nodes to one level (the identity table shows which differ)")
        if not todo:
            todo.append("fix the cause on each line")
        raise failures.error_for(result, cluster, f"preflight: {what}",
                                 hint="; ".join(todo) + ", then re-run `sparkctl preflight`")
    if not state.json:
        ui.console.print(f"{ui.OK} preflight: {len(ids)} nodes answered and agree")


def register(app: typer.Typer) -> None:
    app.command(
        "preflight", rich_help_panel=PROVISION, epilog=example("sparkctl -i inventory/site preflight")
    )(preflight)
