"""`sparkctl stage [weights|engram|all] [--verify-only] [--force]`: the checkpoint and the Engram shards.

Load the inventory (exit 2 on problems) → ``plan.for_stage`` → ``runner.execute`` of
playbooks/stage.yml with live per-node bars → a per-node summary. Exit 1 when a node failed
(the message names the node and the file), 0 otherwise.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.table import Table

from sparkctl import ui
from sparkctl.ansible import plan, results, runner
from sparkctl.cli.shell import STAGE, example
from sparkctl.errors import SparkctlError
from sparkctl.model import load_inventory
from sparkctl.stage import progress


class What(StrEnum):
    weights = "weights"
    engram = "engram"
    all = "all"


def node_summaries(result: runner.RunResult) -> dict[str, dict[str, Any]]:
    """Per node: the staging summary (spark_stage_verify's ``stage``), transfer and packing figures.

    ``status`` can build the same per-node view by running the role's ``facts`` tasks
    (``include_role: {name: spark_stage, tasks_from: facts}``) and reading ``stage``.
    """
    out: dict[str, dict[str, Any]] = {}
    # playbooks/stage.yml reports {stage, transfer, pack} per node under results.STAGE (set_stats).
    for host, rep in results.per_host(result, results.STAGE).items():
        node = out.setdefault(host, {})
        if isinstance(rep.get("stage"), dict):
            node.update(rep["stage"])
        transfer, pack = rep.get("transfer") or {}, rep.get("pack") or {}
        if transfer and not transfer.get("skipped"):
            node["transfer"] = {
                k: transfer.get(k) for k in ("counts", "bytes_moved", "bytes_total", "seconds", "rate_mib_s")
            }
        if pack and not pack.get("skipped"):
            node["pack"] = {
                k: pack.get(k) for k in ("changed", "bytes_written", "seconds", "rate_mib_s", "actions")
            }
    for failure in result.failures:
        out.setdefault(failure.host, {})["error"] = failure.msg
    return out


def _flag(section: dict[str, Any] | None) -> str:
    if not section:
        return ui.SKIP
    if section.get("verified"):
        return ui.OK + " verified"
    if section.get("present"):
        return ui.FAIL + " present, not verified"
    return ui.FAIL + " missing"


def summary_table(cluster: Any, summaries: dict[str, dict[str, Any]], verify_only: bool) -> Table:
    title = "stage --verify-only" if verify_only else "stage"
    table = Table(title=f"{title}: {cluster.name}", title_justify="left")
    for col in ("node", "rank", "checkpoint", "engram shards", "moved", "packed"):
        table.add_column(col)
    for node in cluster.nodes:
        s = summaries.get(node.name, {})
        moved = ""
        if s.get("transfer"):
            t = s["transfer"]
            moved = (
                f"{(t.get('bytes_moved') or 0) / (1 << 30):.2f} GiB @ {t.get('rate_mib_s') or 0:.0f} MiB/s"
            )
        packed = ""
        if s.get("pack"):
            p = s["pack"]
            packed = (
                f"{(p.get('bytes_written') or 0) / (1 << 30):.2f} GiB @ {p.get('rate_mib_s') or 0:.0f} MiB/s"
                if p.get("bytes_written")
                else "kept"
            )
        eng = s.get("engram")
        eng_text = _flag(eng)
        if eng and eng.get("files"):
            eng_text += f" ({len(eng['files'])} × r{s.get('rank')}of{s.get('tp')})"
        row = [node.name, str(node.rank), _flag(s.get("weights")), eng_text, moved, packed]
        if s.get("error"):
            row[2] = f"{ui.FAIL} {s['error']}"[:100]
        table.add_row(*row)
    return table


def stage(
    ctx: typer.Context,
    what: Annotated[
        What, typer.Argument(help="weights: fan the checkpoint out · engram: pack shards · all")
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
    ] = 120.0,
) -> None:
    """Stage the checkpoint over the fabric and pack each rank's Engram shards (verified, resumable)."""
    state = ctx.obj
    cluster = load_inventory(state.inventory_dir())
    settings: dict[str, Any] = {}
    if bwlimit:
        settings["spark_stage_bwlimit_mib_s"] = bwlimit
    if stall_timeout != 120.0:
        settings["spark_stage_stall_timeout_s"] = stall_timeout
    the_plan = plan.for_stage(cluster, what.value, verify_only=verify_only, force=force, settings=settings)
    if state.verbose and not state.json:
        ui.console.print(f"[dim]$ {' '.join(the_plan.argv())}[/dim]")
    live = not state.json and ui.console.is_terminal
    reader, close = (None, None)
    if live:
        try:
            reader, close = progress.fleet_reader(cluster)
        except Exception:  # no SSH reader (e.g. no keys here): bars show tasks, not bytes
            reader, close = None, None
    try:
        with progress.StageBars([n.name for n in cluster.nodes], reader, ui.console, enabled=live) as bars:
            result = runner.execute(the_plan, bars)
    finally:
        if close is not None:
            close()
    summaries = node_summaries(result)
    if state.json:
        ui.print_json(
            {
                "ok": result.ok,
                "what": what.value,
                "verify_only": verify_only,
                "nodes": summaries,
                "run": result.as_dict(),
            }
        )
    else:
        ui.console.print(summary_table(cluster, summaries, verify_only))
    if not result.ok:
        details = [str(f) for f in result.failures]
        raise SparkctlError(
            f"stage {what.value}{' --verify-only' if verify_only else ''} failed on "
            f"{', '.join(result.failed_hosts) or 'the controller'}",
            hint=f"fix the cause, then re-run (transfers resume); artifacts in {result.artifact_dir}",
            details=details,
        )


def register(app: typer.Typer) -> None:
    app.command("stage", rich_help_panel=STAGE, epilog=example("sparkctl stage engram --verify-only"))(stage)
