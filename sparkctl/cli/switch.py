"""`sparkctl switch show|diff|apply`: the RoCE switch (RouterOS, Cumulus NVUE or the lab's Linux bridge).

show:  the candidate configuration, rendered locally; nothing is contacted.
diff:  playbooks/switch.yml in check mode with --diff: what apply would change; nothing is changed.
apply: playbooks/switch.yml for real; every apply saves a timestamped backup first, and
       `apply --rollback` restores the newest one.
Both contact the switch only (limited to it): the switch can be done before the nodes answer.

``sparkctl provision --tags switch`` runs the same role as part of provision.yml.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sparkctl import ui
from sparkctl.ansible import failures
from sparkctl.ansible import plan as planning
from sparkctl.cli.common import run_with_table
from sparkctl.cli.plan_cmd import InventoryOpt, JsonOpt, command_options
from sparkctl.cli.shell import PROVISION, OrderedGroup, example
from sparkctl.model import Cluster, load_inventory
from sparkctl.render import switch_entry

switch_app = typer.Typer(
    name="switch",
    help="The RoCE switch: its candidate configuration, what would change, and applying it.",
    cls=OrderedGroup,
    no_args_is_help=True,
)


@switch_app.command("show", epilog=example("sparkctl switch show > crs812.rsc"))
def switch_show(ctx: typer.Context, inventory: InventoryOpt = None, json_out: JsonOpt = False) -> None:
    """Print the switch configuration sparkctl would apply (RouterOS, NVUE, Linux). Nothing is contacted."""
    inv, as_json, _ = command_options(ctx, inventory, json_out)
    entry = switch_entry(load_inventory(inv))
    if as_json:
        ui.print_json(entry)
        return
    if entry["type"] == "none":
        ui.console.print(f"{ui.SKIP} no switch in {inv} (a switchless site): nothing to configure")
        return
    # The configuration alone goes to stdout, so `sparkctl switch show > file` gives a usable file.
    where = f"{entry['type']}, {entry['host']}"
    ui.err_console.print(f"[bold]{entry['name']}[/bold] ({where}) — {entry['file']}:")
    sys.stdout.write(entry["config"])


def _run(ctx: typer.Context, cluster: Cluster, check: bool, diff: bool, rollback: bool = False) -> None:
    verb = "switch diff" if check else ("switch apply --rollback" if rollback else "switch apply")
    if cluster.switch is None:
        if ctx.obj.json:
            ui.print_json({"ok": True, "switch": None, "changed": 0})
        else:
            where = cluster.inventory_dir
            ui.console.print(f"{ui.SKIP} no switch in {where} (a switchless site): nothing to do")
        return
    plan = planning.for_switch(cluster, check=check, diff=diff, rollback=rollback)
    result = run_with_table(ctx, plan, f"{verb} · {cluster.switch.name}", [cluster.switch.name])
    changed = result.stats[cluster.switch.name].changed if cluster.switch.name in result.stats else 0
    if ctx.obj.json:
        ui.print_json({**result.as_dict(), "switch": cluster.switch.name, "changed": changed})
    elif result.ok:
        what = "would change" if check else "changed"
        ui.console.print(f"{ui.OK} {verb}: {cluster.switch.name} ({cluster.switch.type}) {changed} {what}")
    if not result.ok:
        hint = None if result.unreachable_hosts else (
            f"fix the cause above and re-run (safe to repeat); the run log is in {result.artifact_dir}")
        raise failures.error_for(result, cluster, f"{verb} {failures.what_failed(result, cluster)}", hint)


@switch_app.command("diff", epilog=example("sparkctl switch diff"))
def switch_diff(ctx: typer.Context) -> None:
    """What `switch apply` would change on the switch (check mode with --diff). Nothing is changed."""
    _run(ctx, load_inventory(ctx.obj.inventory_dir()), check=True, diff=True)


@switch_app.command("apply", epilog=example("sparkctl switch apply --diff"))
def switch_apply(
    ctx: typer.Context,
    diff: Annotated[bool, typer.Option("--diff", help="Show the changes as they are made.")] = False,
    rollback: Annotated[
        bool,
        typer.Option("--rollback", help="Restore the newest backup saved by an earlier apply (RouterOS "
                     "reboots into it; NVUE re-applies the revision before the current one)."),
    ] = False,
) -> None:
    """Configure the switch: MTU, ports, RoCE QoS (the switch alone; a backup first; idempotent)."""
    _run(ctx, load_inventory(ctx.obj.inventory_dir()), check=False, diff=diff, rollback=rollback)


def register(app: typer.Typer) -> None:
    app.add_typer(switch_app, rich_help_panel=PROVISION)
