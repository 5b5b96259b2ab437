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
from typing import Annotated, Any

import typer
from rich.table import Table

from sparkctl import ui
from sparkctl.ansible import plan, results, runner
from sparkctl.cli.common import kit_reference
from sparkctl.cli.shell import STAGE, example
from sparkctl.errors import InputError, SparkctlError
from sparkctl.model import load_inventory
from sparkctl.ssh import fleet as remote
from sparkctl.stage import faststage, progress


class What(StrEnum):
    kit = "kit"
    image = "image"
    weights = "weights"
    engram = "engram"
    all = "all"


def _fleet(cluster: Any) -> Any:
    """The fast path's SSH connections (the one place a test wires a fake site)."""
    return remote.Fleet(remote.targets_for(cluster))


def _fast_check(cluster: Any, what: str) -> faststage.StageCheck:
    """One check round; cheap reasons (a checkpoint the head must read, an unpinned pull) are found
    before any connection is made."""
    todo = faststage.parts(cluster, what)
    kit = kit_reference(cluster) if "kit" in todo else None
    fleet = _fleet(cluster)
    try:
        return faststage.check(cluster, what, fleet, kit)
    finally:
        fleet.close()


def _say_path(fast: faststage.StageCheck, nodes: int) -> None:
    if fast.ok:
        ui.console.print(f"{ui.OK} nothing to stage on {nodes} nodes (checked in {fast.seconds:.1f} s "
                         "over SSH; --full runs the playbook)")
        return
    for line in fast.playbook_lines("playbooks/stage.yml"):
        ui.console.print(line)


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
    # playbooks/stage.yml reports the serving kit per node under results.KIT (set_stats).
    for host, rep in results.per_host(result, results.KIT).items():
        kit = {k: rep.get(k) for k in ("version", "tree_sha256", "verified", "files", "current", "switched")}
        transfer, image = rep.get("transfer") or {}, rep.get("image") or {}
        if transfer and not transfer.get("skipped"):
            kit["transfer"] = {
                k: transfer.get(k) for k in ("counts", "bytes_moved", "bytes_total", "seconds")
            }
        if image and not image.get("skipped"):
            kit["image"] = {k: image.get(k) for k in ("checked", "image_id", "reason")}
        out.setdefault(host, {})["kit"] = kit
    # playbooks/stage.yml reports the engine image per node under results.IMAGE (set_stats).
    for host, rep in results.per_host(result, results.IMAGE).items():
        if isinstance(rep, dict):
            out.setdefault(host, {})["image"] = dict(rep)
    for failure in result.failures:
        out.setdefault(failure.host, {})["error"] = failure.msg
    return out


def _kit_cell(kit: dict[str, Any] | None) -> str:
    if not kit:
        return ui.SKIP
    version = str(kit.get("version") or "?")
    short = version[:12] if not version.startswith("tree-") else version
    if kit.get("verified") and kit.get("current") == kit.get("version"):
        return f"{ui.OK} {short} verified"
    if kit.get("verified"):
        return f"{ui.OK} {short} verified (current: {kit.get('current') or 'none'})"
    return f"{ui.FAIL} {short} not verified"


def _image_cell(image: dict[str, Any] | None) -> str:
    """The image ID (short) and what this node received; a dash when the image was not staged."""
    if not image:
        return ui.SKIP
    ident = str(image.get("id") or "")
    if not ident:
        return f"{ui.FAIL} none"
    text = f"{ui.OK} {ident.split(':')[-1][:12]}"
    moved = int(image.get("bytes_moved") or 0)
    if moved:
        text += f" ({moved / (1 << 30):.2f} GiB @ {float(image.get('rate_mib_s') or 0):.0f} MiB/s)"
    elif "bytes_moved" in image:
        text += " (moved 0 B)"
    return text


def _flag(section: dict[str, Any] | None) -> str:
    if not section:
        return ui.SKIP
    if section.get("verified"):
        return ui.OK + " verified"
    if section.get("present"):
        return ui.FAIL + " present, not verified"
    return ui.FAIL + " missing"


def summary_table(
    cluster: Any, summaries: dict[str, dict[str, Any]], verify_only: bool, what: str = "all"
) -> Table:
    """One row per node; a node's error goes under the kit when the kit was staged and did not
    report (its play failed there), else under the checkpoint."""
    kit_staged = what == "kit" or (what == "all" and getattr(cluster, "kit", None) is not None)
    title = "stage --verify-only" if verify_only else "stage"
    table = Table(title=f"{title}: {cluster.name}", title_justify="left")
    for col in ("node", "rank", "kit", "image", "checkpoint", "engram shards", "moved", "packed"):
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
        kit = s.get("kit")
        if kit and kit.get("transfer") and kit["transfer"].get("bytes_moved"):
            kit_moved = f"kit {kit['transfer']['bytes_moved'] / (1 << 20):.1f} MiB"
            moved = f"{kit_moved} + {moved}" if moved else kit_moved
        row = [
            node.name, str(node.rank), _kit_cell(kit), _image_cell(s.get("image")),
            _flag(s.get("weights")), eng_text, moved, packed,
        ]
        if s.get("error"):
            image_staged = what == "image" or (what == "all" and cluster.runtime.kind == "container")
            if kit_staged and not kit:
                row[2] = f"{ui.FAIL} {s['error']}"[:100]
            elif image_staged and not s.get("image"):
                row[3] = f"{ui.FAIL} {s['error']}"[:100]
            else:
                row[4] = f"{ui.FAIL} {s['error']}"[:100]
        table.add_row(*row)
    return table


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
    ] = 120.0,
    full: Annotated[
        bool,
        typer.Option("--full", help="Run the playbook even when one SSH check round finds nothing to stage."),
    ] = False,
) -> None:
    """Stage the serving kit and the checkpoint over the fabric and pack each rank's Engram shards
    (verified, resumable)."""
    state = ctx.obj
    cluster = load_inventory(state.inventory_dir())
    if what is What.kit and getattr(cluster, "kit", None) is None:
        raise InputError(
            "stage kit: the inventory configures no serving kit (sparkctl_kit)",
            hint="add sparkctl_kit (source: git with url + commit, or dir/tar with path) to "
                 "group_vars/all/sparkctl.yml; inventory/example documents it",
        )
    if what is What.image and cluster.runtime.kind != "container":
        raise InputError(
            f"stage image: sparkctl_runtime.kind is {cluster.runtime.kind}; only the container runtime "
            "runs an image",
            hint="set sparkctl_runtime.kind: container with image (and image_source) in "
            "group_vars/all/sparkctl.yml",
        )
    # --verify-only and --force are the playbook's own modes: the path is said only with --verbose.
    quiet_path = verify_only or force
    if verify_only or force or full:
        why = "--verify-only" if verify_only else "--force" if force else "--full"
        fast = faststage.StageCheck([why])
    else:
        fast = _fast_check(cluster, what.value)
    if not state.json and (state.verbose or not quiet_path):
        _say_path(fast, len(cluster.nodes))
    if fast.ok:
        if state.json:
            ui.print_json({"ok": True, "what": what.value, "verify_only": False, "path": fast.as_dict(),
                           "nodes": fast.nodes, "run": None})
        else:
            ui.console.print(summary_table(cluster, fast.nodes, False, what.value))
        return
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
                "path": fast.as_dict(),
                "nodes": summaries,
                "run": result.as_dict(),
            }
        )
    else:
        ui.console.print(summary_table(cluster, summaries, verify_only, what.value))
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
