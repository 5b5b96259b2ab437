"""`sparkctl provision` and `sparkctl check fabric`.

provision: load the model (exit 2 on a bad inventory, nothing contacted) -> plan.for_provision ->
(a plain run: serve.provfast.check, one SSH round; nothing due anywhere ends here, 0 changed) ->
runner.execute(playbooks/provision.yml) with a live per-host table -> per-host summary, artifacts
path, exit code (0 ok, 1 a host failed or was unreachable); a whole run that succeeded leaves
provfast what its decision was made from (provfast.save).

check fabric: read-only. runner.execute(playbooks/check_fabric.yml) -> qa.fabric.judge -> port and
pair tables, "skipped: why" for what cannot run here -> exit 1 naming node, port and pair.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from sparkctl import ui
from sparkctl.ansible import failures, outcome, results, runner
from sparkctl.ansible import plan as planning
from sparkctl.cli.common import run_with_table
from sparkctl.cli.completion import complete_hosts, complete_tags
from sparkctl.cli.shell import PROVISION, OrderedGroup, example
from sparkctl.errors import SparkctlError
from sparkctl.model import Cluster, load_inventory
from sparkctl.qa import fabric as fabric_check
from sparkctl.qa.fabricrun import judge_run
from sparkctl.serve import provfast

check_app = typer.Typer(help="Read-only checks of the cluster.", cls=OrderedGroup, no_args_is_help=True)


def _cluster(ctx: typer.Context) -> Cluster:
    return load_inventory(ctx.obj.inventory_dir())


def _hosts(cluster: Cluster, limit: str | None) -> list[str]:
    hosts = [n.name for n in cluster.nodes] + ([cluster.switch.name] if cluster.switch else [])
    if limit:
        wanted = set(limit.split(","))
        hosts = [h for h in hosts if h in wanted]
    return hosts


def provision(
    ctx: typer.Context,
    check: Annotated[bool, typer.Option("--check", help="Change nothing; report what would change.")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="Show the file changes.")] = False,
    limit: Annotated[
        str | None,
        typer.Option("--limit", help="Only these hosts (comma-separated inventory names).",
                     autocompletion=complete_hosts),
    ] = None,
    tags: Annotated[
        list[str] | None,
        typer.Option("--tags", help=f"Only these parts: {', '.join(planning.PROVISION_TAGS)} (repeatable).",
                     autocompletion=complete_tags),
    ] = None,
    full: Annotated[
        bool,
        typer.Option("--full", help="Run every role, even where the node's record says nothing changed."),
    ] = False,
) -> None:
    """Configure the nodes and the switch: base system, fabric, RoCE QoS, runtime, firewall (idempotent).

    A role whose inputs and on-node state match what the node recorded when the role last ran is
    skipped after one read per node; a file edited by hand or a changed inventory runs it again.
    When no role is due anywhere and nothing changed on this controller since the last whole run,
    that read is one SSH round and the playbook does not run at all.
    """
    cluster = _cluster(ctx)
    plan = planning.for_provision(cluster, check=check, diff=diff, limit=limit, tags=tags or [], full=full)
    verb = "provision (check mode)" if check else "provision"
    whole = not (check or diff or plan.limit or plan.tags)
    fast = None
    if whole and not full:  # one SSH round instead of the playbook when no role is due anywhere
        fast = provfast.check(cluster, None, plan.extravars)
        if fast.ok:
            _fast_done(ctx, cluster, fast)
            return
        # why the playbook runs, where the round found something due; a host that did not answer
        # is the playbook's to name (once, with its cause)
        if not ctx.obj.json and (ctx.obj.verbose or (fast.applied and not fast.dark)):
            for line in fast.playbook_lines("playbooks/provision.yml"):
                ui.console.print(f"[dim]{line}[/dim]")
    before = provfast.controller_key(cluster, plan.extravars, []) if whole else ""
    result = run_with_table(ctx, plan, f"{verb} · {cluster.name}", _hosts(cluster, plan.limit))
    if whole and result.ok:
        provfast.save(cluster, plan.extravars, results.per_host(result, results.APPLIED_SPECS), before)
    applied = results.per_host(result, results.APPLIED)
    if ctx.obj.json:
        doc = result.as_dict()
        doc["applied"] = applied
        why = "--full" if full else "--check, --diff, --limit or --tags"
        doc["path"] = (fast or provfast.ProvisionCheck([why])).as_dict()
        ui.print_json(doc)
    elif result.ok:
        changed = result.changed_total
        what = "would change" if check else "changed"
        ui.console.print(f"{ui.OK} {verb}: {len(result.stats)} hosts ok, {changed} {what}")
        for line in outcome.applied_lines(applied):
            ui.console.print(f"[dim]{line}[/dim]")
    if not result.ok:
        raise failures.error_for(result, cluster, f"{verb} {failures.what_failed(result, cluster)}",
                                 hint=_hint(result))


def _fast_done(ctx: typer.Context, cluster: Cluster, fast: provfast.ProvisionCheck) -> None:
    """Nothing due anywhere: say so as the playbook's summary would (0 changed on every host)."""
    hosts = _hosts(cluster, None)
    if ctx.obj.json:
        zero = dict.fromkeys(("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored"), 0)
        ui.print_json({"playbook": None, "command": None, "rc": 0, "status": "successful", "ok": True,
                       "duration_s": round(fast.seconds, 2), "hosts": {h: dict(zero) for h in sorted(hosts)},
                       "failures": [], "artifact_dir": None, "applied": fast.applied, "path": fast.as_dict()})
        return
    switch = f" and {cluster.switch.name}" if cluster.switch is not None else ""
    ui.console.print(f"{ui.OK} provision: {len(cluster.nodes)} nodes{switch} up to date, 0 changed "
                     f"(checked in {fast.seconds:.1f} s over SSH; --full runs the playbook)")
    for line in outcome.applied_lines(fast.applied):
        ui.console.print(f"[dim]{line}[/dim]")


def _hint(result: runner.RunResult) -> str | None:
    if result.unreachable_hosts:
        return None  # failures.error_for's: each node's cause and what to check
    return f"fix the cause above and re-run (it is safe to repeat); the run log is in {result.artifact_dir}"


# --- check fabric ----------------------------------------------------------------------------------


def _verdict_tables(verdict: fabric_check.Verdict, mtu: int) -> tuple[Table, Group]:
    """The ports (one line each) and the ping matrix under its heading: within 80 columns for four
    Sparks (the port names and addresses were cut: "enP2p1s0f0…", "10.251.0.…")."""
    columns = ("", "node", "port", "switch", "state", "speed", "mtu", "address", "gid")
    ports = ui.compact_table("fabric ports", columns, wrap=columns)
    for p in verdict.ports:
        ports.add_row(
            ui.OK if p.ok else ui.FAIL,
            p.node,
            p.netdev,
            p.switch_port or "-",
            p.state,
            f"{p.speed_mbps // 1000}G" if p.speed_mbps else "n/a",
            Text(str(p.mtu), style="" if p.mtu == mtu else "red"),
            ", ".join(p.addresses) or "-",
            "n/a" if p.gid_index is None else str(p.gid_index),
        )
    nodes = sorted({p.src for p in verdict.pairs} | {p.dst for p in verdict.pairs})
    halves = sorted({p.half for p in verdict.pairs})
    absent = {frozenset(pair) for pair in verdict.absent_pairs}
    pairs = ui.compact_table()
    pairs.add_column("src \\ dst")
    for dst in nodes:
        pairs.add_column(dst, justify="center")
    index = {(p.src, p.dst, p.half): p for p in verdict.pairs}
    for src in nodes:
        cells = []
        for dst in nodes:
            if src == dst:
                cells.append("·")
                continue
            if frozenset((src, dst)) in absent:
                cells.append("[dim]–[/dim]")
                continue
            marks = []
            for h in verdict.expected.get((src, dst), halves):
                row = index.get((src, dst, h))
                marks.append("?" if row is None else ("✓" if row.ok else "⨯"))
            text = " ".join(marks)
            cells.append(f"[red]{text}[/red]" if "⨯" in marks else f"[green]{text}[/green]")
        pairs.add_row(src, *cells)
    heading = Text(f"jumbo ping ({mtu - 28} B, DF) src → dst, one mark per source port")
    if absent:
        heading.append(" (– no direct path, as the topology expects)")
    return ports, Group(Text(""), heading, pairs)


def skipped_lines(skipped: list[str]) -> list[str]:
    """The checks skipped for one reason on one line ("RoCE v2 GID index, ib_write_bw per pair, …:
    skipped: no RDMA device …"), in the order they were skipped."""
    by_why: dict[str, list[str]] = {}
    for line in skipped:
        what, sep, why = line.partition(": skipped: ")
        by_why.setdefault(why if sep else line, []).append(what if sep else "")
    return [f"{', '.join(w for w in whats if w)}: skipped: {why}" if any(whats) else why
            for why, whats in by_why.items()]


@check_app.command("fabric", epilog=example("sparkctl check fabric --json"))
def check_fabric(ctx: typer.Context) -> None:
    """Read-only: link state, speed and MTU of every fabric port, jumbo ping for every pair, RoCE GIDs."""
    cluster = _cluster(ctx)
    plan = planning.for_check_fabric(cluster)
    if ctx.obj.json:
        result = runner.execute(plan)
    else:
        with ui.console.status("probing the fabric from every node…"):
            result = runner.execute(plan)
    verdict = judge_run(cluster, result)
    if ctx.obj.json:
        doc: dict[str, Any] = verdict.as_dict()
        doc["artifact_dir"] = str(result.artifact_dir)
        ui.print_json(doc)
    else:
        ports, pairs = _verdict_tables(verdict, int(cluster.fabric.mtu))
        ui.console.print(ports)
        ui.console.print(pairs)
        for line in verdict.passed:
            ui.console.print(f"{ui.OK} {line}")
        for line in verdict.absent:
            ui.console.print(f"[dim]–[/dim] {line}")
        for line in skipped_lines(verdict.skipped):
            ui.console.print(f"{ui.SKIP} {line}")
        for line in verdict.problems:
            ui.console.print(Text.assemble(("⨯ ", "red"), line))
        ui.console.print(f"[dim]artifacts: {result.artifact_dir}[/dim]")
    if not verdict.ok:
        culprit = [p for p in verdict.problems if p.startswith("likely culprit")]
        first = culprit[0] if culprit else verdict.problems[0]
        dark = failures.unreachable(result.failures, cluster)
        hint = ("fix the port or switch named above, then re-run `sparkctl check fabric`" if not dark else
                f"reach {', '.join(dark)} first (the cause and what to check are on its line), then re-run "
                "`sparkctl check fabric`")
        raise SparkctlError(
            f"fabric check failed: {first}",
            hint=hint,
            exit_code=failures.exit_code(result.failures),
            details=verdict.problems[:12] if ctx.obj.json else [],
            nodes=dark,
        )
    if not ctx.obj.json:
        ui.console.print(f"{ui.OK} fabric ok ({len(verdict.pairs)} pairs, {len(verdict.ports)} ports)")


def register(app: typer.Typer) -> None:
    app.command(
        "provision",
        rich_help_panel=PROVISION,
        epilog=example("sparkctl provision --check --diff --limit spark-1,spark-2 --tags fabric,qos"),
    )(provision)
    app.add_typer(check_app, name="check", rich_help_panel=PROVISION)
