"""`sparkctl preflight`: the read-only checks every mutating playbook starts with, on their own.

Load the inventory (exit 2 on problems, nothing contacted) → ``plan.for_preflight`` →
``runner.execute(playbooks/preflight.yml)`` → one identity table (OS, kernel, NVIDIA driver, CUDA,
CX-7 firmware, BIOS per node; values that differ across nodes in red) → exit 0 when every node
answered and agrees, 1 otherwise (the message names the nodes and fields). Nothing is changed.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from sparkctl import ui
from sparkctl.ansible import plan as planning
from sparkctl.ansible import runner
from sparkctl.cli.shell import PROVISION, complete_hosts, example
from sparkctl.errors import EXIT_FAILED, SparkctlError
from sparkctl.model import Cluster, load_inventory


def identities(result: runner.RunResult) -> dict[str, dict[str, str]]:
    """{node: {field: value}} from the ``sparkctl_identity`` module's return value (its ``identity``
    key), whatever the task that ran it is called."""
    out: dict[str, dict[str, str]] = {}
    for per_host in result.results.values():
        for host, res in per_host.items():
            ident = res.get("identity")
            if isinstance(ident, dict) and "missing_netdevs" in res:
                out[host] = {str(k): str(v) for k, v in ident.items()}
    return out


def mismatched(ids: dict[str, dict[str, str]]) -> list[str]:
    """The identity fields whose value is not the same on every node that answered."""
    fields = list(dict.fromkeys(f for ident in ids.values() for f in ident))
    return [f for f in fields if len({ident.get(f) for ident in ids.values()}) > 1]


def identity_table(cluster: Cluster, ids: dict[str, dict[str, str]], unreachable: dict[str, str]) -> Table:
    """One row per identity field, one column per node (rank order); a value that differs from the
    most common one is red, and so is the mark of its row."""
    fields = list(dict.fromkeys(f for ident in ids.values() for f in ident))
    differ = set(mismatched(ids))
    table = Table(title=f"node identity · {cluster.name}", title_justify="left")
    table.add_column("")
    table.add_column("", style="bold", no_wrap=True)
    for node in cluster.nodes:
        table.add_column(node.name, overflow="fold")
    table.add_row("", "rank", *(str(node.rank) for node in cluster.nodes))
    answered = [Text("yes") if node.name in ids else
                Text(f"no: {unreachable.get(node.name, 'no answer')}", style="red") for node in cluster.nodes]
    table.add_row(ui.OK if len(ids) == len(cluster.nodes) else ui.FAIL, "answered", *answered)
    for f in fields:
        usual = Counter(ident.get(f) for ident in ids.values()).most_common(1)[0][0]
        cells = []
        for node in cluster.nodes:
            value = ids.get(node.name, {}).get(f)
            odd = f in differ and value is not None and value != usual
            cells.append(Text("–" if value is None else value, style="bold red" if odd else ""))
        table.add_row(ui.FAIL if f in differ else ui.OK, f.replace("_", " "), *cells)
    return table


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
