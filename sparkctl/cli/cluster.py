"""Commands about the site as described: `sparkctl validate` (and, alongside it, plan/profiles).

Nothing here contacts a host: each command loads the inventory, then prints.
Add a command by writing its function and one line in ``register``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from sparkctl import render, ui
from sparkctl.cli import plan_cmd
from sparkctl.cli.shell import INVENTORY, example
from sparkctl.errors import EXIT_USAGE, SparkctlError
from sparkctl.model import Cluster, load_inventory
from sparkctl.model.offline import validate_inventory
from sparkctl.qa import sglang_check


def load_cluster(ctx: typer.Context) -> Cluster:
    """The checked cluster of the chosen inventory (InputError, exit 2, when it has problems)."""
    return load_inventory(ctx.obj.inventory_dir())


def cluster_summary(cluster: Cluster) -> dict[str, Any]:
    """What `validate --json` reports about a good inventory: the cluster's one exported dict, the
    same one the vars plugin hands Ansible as ``sparkctl_cluster``."""
    return render.cluster_facts(cluster)


def validate_table(cluster: Cluster) -> Table:
    prof = cluster.profile
    table = Table(title=f"{ui.OK} inventory {cluster.inventory_dir} is valid", title_justify="left")
    table.add_column("")
    table.add_column("what", style="bold")
    table.add_column("value")
    head = cluster.head
    ranks = ", ".join(f"{n.rank}={n.name}" for n in cluster.nodes)
    sw = cluster.switch
    rows = [
        ("site", f"{cluster.name}  (ssh as {cluster.ssh_user}, runtime {cluster.runtime.kind})"),
        (
            "profile",
            f"{prof.name}: TP{prof.tp_size}/EP{prof.ep_size}, context {prof.context_length:,}, "
            f"chunk {prof.chunk:,}, KV pin {prof.max_total_tokens:,}",
        ),
        ("nodes", f"{len(cluster.nodes)}  (head {head.name}, fabric {head.fabric_ip})"),
        ("ranks", ranks),
        (
            "fabric",
            f"{', '.join(map(str, cluster.fabric.subnets))}, MTU {cluster.fabric.mtu}, "
            f"QoS {'on' if cluster.fabric.host_qos else 'off'}, "
            f"bootstrap over {cluster.fabric.bootstrap_over}",
        ),
        ("switch", f"{sw.name} ({sw.type}, {sw.host}, MTU {sw.mtu})" if sw else "none"),
        *_runtime_rows(cluster),
        (
            "memory",
            f"KV {prof.kv_pool_gib:.2f} GiB + weights {prof.memory.weights_gib_per_rank:g} GiB "
            f"≤ pool {prof.static_pool_gib:.2f} GiB; prefill transient {prof.prefill_transient_gib:.2f} "
            f"≤ {prof.transient_limit_gib:.2f} GiB",
        ),
    ]
    summary = cluster_summary(cluster)
    if summary["disk_need_gib"] is not None:
        sizes = sorted({n.nvme_gib for n in cluster.nodes if n.nvme_gib is not None})
        have = f" ≤ {', '.join(f'{s:g}' for s in sizes)} GiB" if sizes else " (NVMe size not given)"
        rows.append(("disk", f"{summary['disk_need_gib']:g} GiB per node{have}"))
    for what, value in rows:
        table.add_row(ui.OK, what, value)
    for warning in cluster.warnings:
        table.add_row(ui.SKIP, "note", warning)
    return table


def _runtime_rows(cluster: Cluster) -> list[tuple[str, str]]:
    """What the ranks run: the image and where it comes from, and the serving kit."""
    rt = cluster.runtime
    if rt.kind != "container":
        return []
    pin = f", pinned {rt.image_id[:19]}…" if rt.image_id else ""
    rows = [("image", f"{rt.image} ({rt.image_source}{pin})")]
    kit, pk = cluster.kit, cluster.profile.kit
    if kit is not None and pk is not None:
        where = f"{kit.url} @ {kit.commit}" if kit.source == "git" else f"{kit.source} {kit.path} on {kit.on}"
        rows.append(("kit", f"{where} → {pk.mount}, {len(pk.overlays)} overlays over {pk.overlay_target}"))
    return rows


def validate(
    ctx: typer.Context,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Require SGLang's own parser (`make sglang`); exit 2 without it."),
    ] = False,
) -> None:
    """Check the inventory: every field, cross-checks, memory and disk budgets. Nothing is contacted.

    The files it names on this controller are checked too (known_hosts, SSH keys, secret files:
    present, readable, private; relative paths from the inventory directory), and no placeholder
    may stand in for a commit, digest or secret.

    Every flag is checked against SGLang's flag catalogue; with SGLang installed (`make sglang`) the
    rendered command lines also go through SGLang's own parser, and the output says whether it ran."""
    state = ctx.obj
    try:
        # The inventory's values and what they name on this controller (files, secrets, placeholders).
        cluster = validate_inventory(state.inventory_dir())
        parser_ran = sglang_check.ensure_accepted_if_available(cluster)
        if strict and not parser_ran:
            raise SparkctlError(
                f"SGLang {sglang_check.SGLANG_VERSION}'s own parser is not installed; --strict asks for it",
                hint="run `make sglang` (or point SPARKCTL_SGLANG_PYTHON at an interpreter with SGLang)",
                exit_code=EXIT_USAGE,
            )
    except SparkctlError as exc:
        if not state.json:
            raise
        errors = exc.details or [exc.message + (f" — {exc.hint}" if exc.hint else "")]
        ui.print_json({"ok": False, "message": exc.message, "errors": errors})
        raise typer.Exit(exc.exit_code if exc.exit_code else EXIT_USAGE) from None
    sglang = f"SGLang {sglang_check.SGLANG_VERSION}'s own parser"
    parser = (f"{sglang} accepted every rank's command line" if parser_ran else
              f"{sglang} did not run (not installed: `make sglang`); every flag was checked against "
              "its flag catalogue")
    if state.json:
        ui.print_json({"ok": True, "sglang_parser": parser_ran, **cluster_summary(cluster)})
        return
    ui.console.print(validate_table(cluster))
    ui.console.print(f"{ui.OK if parser_ran else ui.SKIP} {parser}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the main app."""
    app.command(
        "validate", rich_help_panel=INVENTORY, epilog=example("sparkctl -i inventory/site validate --json")
    )(validate)
    plan_cmd.register(app)  # plan, profiles [show NAME]
