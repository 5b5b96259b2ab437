"""`sparkctl upgrade` and `sparkctl reset`: the lifecycle verbs of a site that already runs.

upgrade: load the inventory (exit 2 on problems, or when ``sparkctl_upgrade`` pins nothing) → ask
         (the group goes down and nodes may reboot; ``--yes``, required without a terminal) →
         playbooks/upgrade.yml with the live host table: the group down, then one node at a time
         (the pinned update, a reboot when it changed the node, its identity equal to the nodes before
         it, its fabric check), then the identity preflight across all nodes → a per-node table and
         the identity table → ``stage all --verify-only`` (the stage playbook, read-only) → the gated
         ``up`` (``serve.up.Up``, as `sparkctl up` runs it: the same preflight, gates and memory guard).
         The first node that fails stops the run: exit 1, naming the node, the reason, and the nodes
         left untouched.
         ``--check`` runs the playbook in check mode and stops there (nothing is stopped or started).
reset:   load → ask (``--yes``) → playbooks/reset.yml → per-node summary. ``--purge-data`` also
         removes the checkpoint and the Engram shards; ``--check`` says what would go.

Both run (after the question, check mode aside) inside ``serve.admin.lifecycle``, as `up` and `down`
do: the lifecycle lock held and the supervisor's healing paused for the whole run (no restart, no
autostart while nodes reboot or units go). `upgrade` resumes healing (breaker closed, restart count
reset) only when its final gated `up` passed, else leaves it paused with the reason; `reset` leaves it
paused (nothing to heal until `provision` and `up`).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from sparkctl import ui
from sparkctl.ansible import failures, outcome
from sparkctl.ansible import plan as planning
from sparkctl.cli import common
from sparkctl.cli.common import YesOption, confirm, run_with_table
from sparkctl.cli.identity import identity_table
from sparkctl.cli.serving import by_admin, start_group
from sparkctl.cli.shell import PROVISION, example
from sparkctl.cli.stage_view import summary_table
from sparkctl.model import Cluster, load_inventory
from sparkctl.serve import admin
from sparkctl.stage.summaries import node_summaries


def _nodes(cluster: Cluster) -> list[str]:
    return [n.name for n in cluster.nodes]


# --- upgrade --------------------------------------------------------------------------------------


def upgrade_table(cluster: Cluster, done: dict[str, Any], failed: str | None, untouched: list[str]) -> Table:
    table = Table(title=f"upgrade · {cluster.name} (one node at a time, in this order)", title_justify="left")
    for col in ("", "node", "installed", "commands", "rebooted"):
        table.add_column(col)
    for name in sorted(_nodes(cluster)):
        rep = done.get(name)
        if rep is not None:
            moved = [f"{p} {rep.get('before', {}).get(p, '–')} → {rep.get('after', {}).get(p, '–')}"
                     for p in rep.get("installed") or []]
            table.add_row(ui.OK, name, "; ".join(moved) or "already at the pinned versions",
                          str(rep.get("commands", 0)), "yes" if rep.get("rebooted") else "no")
        elif name == failed:
            table.add_row(ui.FAIL, name, Text("stopped here", style="red"), "", "")
        elif name in untouched:
            table.add_row(ui.SKIP, name, Text("untouched", style="dim"), "", "")
    return table


def upgrade(
    ctx: typer.Context,
    check: Annotated[bool, typer.Option("--check", help="Change nothing; say what each node gets.")] = False,
    yes: YesOption = False,
) -> None:
    """Rolling upgrade as the inventory pins it, one node at a time, then the gated `up`.

    The group goes down; each node gets its pinned update, reboots when it changed, must agree with
    the nodes before it and pass a fabric check; the first node that fails stops the run."""
    state = ctx.obj
    cluster = load_inventory(state.inventory_dir())
    plan = planning.for_upgrade(cluster, check=check)
    if check:
        _upgrade(ctx, cluster, plan, check)
        return
    confirm(f"`upgrade` stops every rank of {cluster.name} and updates (and may reboot) "
            f"{len(cluster.nodes)} nodes one at a time", yes)
    with by_admin(state, cluster.name, "upgrade", healing_after=admin.RESUMED,
                  healing_on_failure=admin.PAUSED):
        _upgrade(ctx, cluster, plan, check)
        verify_staged(ctx, cluster)
        start_group(ctx.obj, common.tools(), yes=True)  # inside the admin's lifecycle: as `sparkctl up`


def _upgrade(ctx: typer.Context, cluster: Cluster, plan: planning.Plan, check: bool) -> None:
    """The rolling playbook and its tables; raises on the first node that fails."""
    state = ctx.obj
    verb = "upgrade (check mode)" if check else "upgrade"
    result = run_with_table(ctx, plan, f"{verb} · {cluster.name}", _nodes(cluster))
    run = outcome.rolling(result, _nodes(cluster))
    done, failed_node, untouched = run.done, run.failed_node, run.untouched
    ids = outcome.identities(result)
    if state.json:
        ui.print_json({"ok": result.ok, "check": check, "cluster": cluster.name, "nodes": done,
                       "failed_node": failed_node, "untouched": untouched, "identity": ids,
                       "mismatched": outcome.mismatched(ids), "run": result.as_dict()})
    else:
        ui.console.print(upgrade_table(cluster, done, failed_node, untouched))
        if ids:
            ui.console.print(identity_table(cluster, ids, {}))
    if not result.ok:
        where = failed_node or ", ".join(result.failed_hosts) or "the controller"
        why = run.why(result)
        raise failures.error_for(
            result, cluster, f"upgrade stopped at {where}: {why}",
            hint=(f"{'nodes left untouched: ' + ', '.join(untouched) + '; ' if untouched else ''}"
                  "the group stays down; fix the node, then run `sparkctl upgrade` again (nodes already "
                  f"at the pinned versions are not changed again); the run log is in {result.artifact_dir}"),
        )
    if check:
        if not state.json:
            ui.console.print(f"{ui.OK} {verb}: {result.changed_total} change(s) would be made; nothing was "
                             "stopped, installed or rebooted")
        return
    if not state.json:
        ui.console.print(f"{ui.OK} every node upgraded and agreeing; verifying the staged files")


def verify_staged(ctx: typer.Context, cluster: Cluster) -> None:
    """`stage all --verify-only`: the stage playbook re-hashes the kit, the image IDs, the weights
    and the shards on every node; any difference stops the upgrade before `up`."""
    plan = planning.for_stage(cluster, "all", verify_only=True)
    result = common.tools().execute(plan, common.event_printer(ctx.obj.verbose))
    summaries = node_summaries(result)
    if not ctx.obj.json:
        ui.console.print(summary_table(cluster, summaries, True, "all"))
    if not result.ok:
        raise failures.error_for(
            result, cluster,
            f"stage verification after the upgrade {failures.what_failed(result, cluster)}; "
            "the group stays down",
            hint=f"run `sparkctl stage all` to repair, then `sparkctl up`; artifacts: {result.artifact_dir}",
        )


# --- reset ----------------------------------------------------------------------------------------


def reset(
    ctx: typer.Context,
    purge_data: Annotated[
        bool, typer.Option("--purge-data", help="Also remove the checkpoint and the Engram shards from NVMe.")
    ] = False,
    check: Annotated[bool, typer.Option("--check", help="Change nothing; say what would go.")] = False,
    yes: YesOption = False,
) -> None:
    """Remove everything sparkctl put on the nodes; management, SSH and NVMe data stay.

    --purge-data removes the checkpoint and Engram shards too; `provision` rebuilds the same state."""
    state = ctx.obj
    cluster = load_inventory(state.inventory_dir())
    plan = planning.for_reset(cluster, purge_data=purge_data, check=check)
    if not check:
        data = "and the checkpoint and Engram shards" if purge_data else "(the NVMe data stays)"
        confirm(f"`reset` stops every rank of {cluster.name} and removes everything sparkctl put on its "
                f"{len(cluster.nodes)} nodes {data}", yes)
    verb = "reset (check mode)" if check else "reset"
    if check:
        result = run_with_table(ctx, plan, f"{verb} · {cluster.name}", _nodes(cluster))
    else:
        why = ("`sparkctl reset` removed the ranks; nothing to heal until `sparkctl provision` and "
               "`sparkctl up`")
        with by_admin(state, cluster.name, "reset", healing_after=admin.PAUSED,
                      healing_on_failure=admin.PAUSED, paused_why=why):
            result = run_with_table(ctx, plan, f"{verb} · {cluster.name}", _nodes(cluster))
    if state.json:
        ui.print_json({**result.as_dict(), "purge_data": purge_data, "check": check})
    if not result.ok:
        raise failures.error_for(
            result, cluster, f"{verb} {failures.what_failed(result, cluster)}",
            hint=f"fix the cause and re-run (it is safe to repeat); the run log is in {result.artifact_dir}",
        )
    if not state.json:
        what = "would be removed" if check else "removed"
        ui.console.print(f"{ui.OK} {verb}: {len(cluster.nodes)} nodes, {result.changed_total} item(s) {what}"
                         + ("" if check else "; run `sparkctl provision` to set them up again"))


def register(app: typer.Typer) -> None:
    app.command("upgrade", rich_help_panel=PROVISION, epilog=example("sparkctl upgrade --check"))(upgrade)
    app.command("reset", rich_help_panel=PROVISION, epilog=example("sparkctl reset --yes"))(reset)
