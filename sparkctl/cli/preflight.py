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
from sparkctl.ansible import plan as planning
from sparkctl.ansible import runner
from sparkctl.ansible.outcome import identities, mismatched
from sparkctl.cli.identity import identity_table
from sparkctl.cli.shell import PROVISION, complete_hosts, example
from sparkctl.errors import EXIT_FAILED, SparkctlError
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
    unreachable = {f.host: f.msg for f in result.failures if f.unreachable}
    differ = mismatched(ids)
    if state.json:
        ui.print_json({"ok": result.ok, "cluster": cluster.name, "nodes": ids, "mismatched": differ,
                       "unreachable": unreachable, "run": result.as_dict()})
    else:
        ui.console.print(identity_table(cluster, ids, unreachable))
        ui.console.print(f"[dim]artifacts: {result.artifact_dir}[/dim]")
    if not result.ok:
        details = [str(f) for f in result.failures][:12]
        parts = [f"node identity differs in {', '.join(differ)}"] if differ else []
        parts += [f"unreachable: {', '.join(sorted(unreachable))}"] if unreachable else []
        what = "; ".join(parts) or f"failed on {', '.join(result.failed_hosts) or 'the controller'}"
        raise SparkctlError(
            f"preflight: {what}",
            hint="bring the nodes to one level (or power on / fix SSH), then re-run `sparkctl preflight`",
            exit_code=EXIT_FAILED,
            details=details,
        )
    if not state.json:
        ui.console.print(f"{ui.OK} preflight: {len(ids)} nodes answered and agree")


def register(app: typer.Typer) -> None:
    app.command(
        "preflight", rich_help_panel=PROVISION, epilog=example("sparkctl -i inventory/site preflight")
    )(preflight)
