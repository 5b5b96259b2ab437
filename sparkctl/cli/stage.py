"""`sparkctl stage [kit|image|weights|engram|all] [--verify-only] [--force] [--full]`: the serving
kit, the engine image, the checkpoint and the Engram shards.

Load the inventory (exit 2 on problems) → the fast path's one SSH check round per node
(``sparkctl.stage.faststage``): when every node already holds what the playbook would leave there,
say so and stop → otherwise ``plan.for_stage`` → ``runner.execute`` of playbooks/stage.yml with live
per-node bars → a per-node summary. ``--verify-only``, ``--force`` and ``--full`` always run the
playbook. Exit 1 when a node failed (the message names the node and the file), 0 otherwise.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from sparkctl import ui
from sparkctl.ansible import failures, plan, runner
from sparkctl.cli import common
from sparkctl.cli.shell import STAGE, example
from sparkctl.cli.stage_view import summary_table
from sparkctl.model import load_inventory
from sparkctl.stage import faststage, progress, shards, verb
from sparkctl.stage.summaries import node_summaries


class What(StrEnum):
    kit = "kit"
    image = "image"
    weights = "weights"
    engram = "engram"
    all = "all"


def _say_path(fast: faststage.StageCheck, nodes: int) -> None:
    if fast.ok:
        ui.console.print(f"{ui.OK} nothing to stage on {nodes} nodes (checked in {fast.seconds:.1f} s "
                         "over SSH; --full runs the playbook)")
        return
    for line in fast.playbook_lines("playbooks/stage.yml"):
        ui.console.print(line)


def stage(
    ctx: typer.Context,
    what: Annotated[
        What,
        typer.Argument(help="kit: the serving kit · image: the engine image · weights: fan the checkpoint "
                       "out · engram: pack shards · all (the kit and the image first, when configured)"),
    ] = What.all,
    verify_only: Annotated[
        bool,
        typer.Option(
            "--verify-only", help="Re-hash everything on every node against the manifests; change nothing."
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Delete unmanifested or .partial Engram leftovers instead of refusing."),
    ] = False,
    bwlimit: Annotated[
        float, typer.Option("--bwlimit", min=0, help="Cap each node's receive rate (MiB/s; 0 = none).")
    ] = 0.0,
    stall_timeout: Annotated[
        float,
        typer.Option(
            "--stall-timeout", min=1, help="Fail when a peer sends nothing this long (s); re-runs resume."
        ),
    ] = verb.STALL_TIMEOUT_S,
    full: Annotated[
        bool,
        typer.Option("--full", help="Run the playbook even when one SSH check round finds nothing to stage."),
    ] = False,
) -> None:
    """Stage the serving kit and the checkpoint over the fabric and pack each rank's Engram shards
    (verified, resumable)."""
    state = ctx.obj
    cluster = load_inventory(state.inventory_dir())
    verb.refuse_what_cannot_be_staged(cluster, what.value)
    resident = shards.resident_note(cluster, what.value)
    if resident is not None:  # engram: resident profiles pack nothing on NVMe
        if state.json:
            ui.print_json({"ok": True, "what": what.value, "verify_only": verify_only, "path": None,
                           "nodes": {}, "run": None, "note": resident})
        else:
            ui.console.print(resident)
        return
    mixed = shards.resident_nodes_note(cluster, what.value)
    if mixed is not None:  # some groups keep Engram resident: their nodes pack nothing
        (ui.err_console if state.json else ui.console).print(mixed)
    tools = common.tools()
    fast = verb.fast_check(cluster, what.value, verify_only=verify_only, force=force, full=full,
                           fleet=tools.fleet, kit_reference=tools.kit_reference)
    # --verify-only and --force are the playbook's own modes: the path is said only with --verbose.
    quiet_path = verify_only or force
    if not state.json and (state.verbose or not quiet_path):
        _say_path(fast, len(cluster.nodes))
    if fast.ok:
        if state.json:
            ui.print_json({"ok": True, "what": what.value, "verify_only": False, "path": fast.as_dict(),
                           "nodes": fast.nodes, "run": None})
        else:
            ui.console.print(summary_table(cluster, fast.nodes, False, what.value))
        return
    settings = verb.playbook_settings(bwlimit, stall_timeout)
    the_plan = plan.for_stage(cluster, what.value, verify_only=verify_only, force=force, settings=settings)
    if state.verbose and not state.json:
        ui.console.print(f"[dim]$ {' '.join(the_plan.argv())}[/dim]")
    # Progress: bars at a terminal, a line now and then elsewhere; on stderr under --json.
    with progress.watch(cluster, ui.err_console if state.json else ui.console, tools.fleet) as bars:
        result = runner.execute(the_plan, bars)
    summaries = node_summaries(result)
    if state.json:
        ui.print_json(
            {
                "ok": result.ok,
                "what": what.value,
                "verify_only": verify_only,
                "path": fast.as_dict(),
                "nodes": summaries,
                "run": result.as_dict(),
            }
        )
    else:
        ui.console.print(summary_table(cluster, summaries, verify_only, what.value))
    if not result.ok:
        raise failures.error_for(
            result, cluster,
            f"stage {what.value}{' --verify-only' if verify_only else ''} "
            f"{failures.what_failed(result, cluster)}",
            hint=f"fix the cause, then re-run (transfers resume); artifacts in {result.artifact_dir}",
        )


def register(app: typer.Typer) -> None:
    app.command("stage", rich_help_panel=STAGE, epilog=example("sparkctl stage engram --verify-only"))(stage)
