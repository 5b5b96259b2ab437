"""`sparkctl status`: where every rank stands — options in, one call, output.

``serve.verdict.snapshot`` (one SSH probe per node plus rank 0's HTTP endpoints) → ready/degraded/down,
as a table, JSON or Prometheus text; on a site of several serving groups ``serve.sitestatus`` (each
group's verdict, the router in front of them, the site's). The collaborators come from
``cli.common.tools``, the one factory the CLI tests replace.

The command imports what it runs with inside its own body: a <TAB> on `status --` needs this
module's options only, not the model, SSH and HTTP clients behind them.
"""

from __future__ import annotations

import json
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sparkctl.cli.serve import GroupOption
from sparkctl.cli.shell import OBSERVE, example
from sparkctl.errors import EXIT_UNHEALTHY, EXIT_UNREACHABLE, InputError, SparkctlError

if TYPE_CHECKING:
    from sparkctl.model import Cluster
    from sparkctl.serve import verdict
    from sparkctl.serve.groups import Target


class StatusFormat(StrEnum):
    table = "table"
    json = "json"
    prometheus = "prometheus"


def status(
    ctx: typer.Context,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Redraw every 2 s until Ctrl-C.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")] = False,
    fmt: Annotated[
        StatusFormat | None,
        typer.Option("--format", help="table, json (as --json) or prometheus (text exposition for "
                                      "node_exporter's textfile collector)."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="With --format prometheus: write this file atomically "
                                            "(e.g. <textfile dir>/sparkctl.prom) instead of stdout."),
    ] = None,
    group: GroupOption = None,
) -> None:
    """Where every rank stands: reachable, unit, memory, GPU, fabric, shards; rank 0's API; hot or throttled GPUs. Exit 0 when ready, 1 when a node did not answer, 3 otherwise."""  # noqa: E501
    if output is not None and fmt != StatusFormat.prometheus:
        raise InputError("--output: only with --format prometheus")
    prometheus = fmt == StatusFormat.prometheus
    if prometheus and (watch or as_json):
        raise InputError("--format prometheus: not with --watch or --json (one snapshot, text exposition)")
    from sparkctl import ui
    from sparkctl.cli import common
    from sparkctl.cli.status_view import render_status
    from sparkctl.serve import bootwatch, verdict
    from sparkctl.serve import groups as serve_groups
    from sparkctl.serve.admin import note_supervisor
    from sparkctl.serve.tools import api_key_or_none

    cluster, doc = common.load(ctx)
    as_json = (as_json or ctx.obj.json or fmt == StatusFormat.json) and not prometheus
    found = serve_groups.targets(cluster, doc, group)
    if len(found) > 1:  # a site of several groups: each group's table and verdict, then the site's
        if prometheus:
            raise InputError("--format prometheus: one serving group at a time on a site of several",
                             hint="add --group NAME (one file per group)")
        _status_groups(cluster.name, found, watch, as_json, site=(cluster, doc))
        return
    cluster, doc = found[0].cluster, found[0].doc  # the site itself, or the one group named
    api_key = api_key_or_none(cluster)  # status still shows everything else; /v1/models will say 401
    tools = common.tools()
    fleet = tools.fleet(cluster)
    http = tools.http()
    try:
        snap = verdict.snapshot(cluster, doc, fleet, http, api_key)
        note_supervisor(cluster.name, snap)
        if watch and not as_json and ui.console.is_terminal:
            from rich.live import Live

            with Live(render_status(snap), console=ui.console, refresh_per_second=4, transient=False) as live:
                try:
                    while True:
                        time.sleep(max(0.0, bootwatch.SAMPLE_INTERVAL_S - snap.seconds))
                        snap = verdict.snapshot(cluster, doc, fleet, http, api_key)
                        live.update(render_status(snap))
                except KeyboardInterrupt:
                    pass
        elif watch:
            # Piped or --json: one snapshot per interval, as it is taken (a redrawn screen would reach
            # a file or a pipe only at the end): the table under a time line, or one JSON line each.
            try:
                while True:
                    _print_snapshot(cluster.name, snap, as_json)
                    time.sleep(max(0.0, bootwatch.SAMPLE_INTERVAL_S - snap.seconds))
                    snap = verdict.snapshot(cluster, doc, fleet, http, api_key)
            except KeyboardInterrupt:
                pass
        elif prometheus:
            _write_prometheus(cluster, snap, output)
        elif as_json:
            ui.print_json({"cluster": cluster.name, **snap.as_dict()})
        else:
            ui.console.print(render_status(snap))
    finally:
        fleet.close()
        http.close()
    if any(not f.reachable for f in snap.nodes.values()):
        raise typer.Exit(EXIT_UNREACHABLE)  # a node did not answer: the one code every verb uses for it
    if snap.verdict != verdict.READY:
        raise typer.Exit(EXIT_UNHEALTHY)


def _status_groups(name: str, found: list[Target], watch: bool, as_json: bool,
                   site: tuple[Cluster, dict[str, Any]]) -> None:
    """`status` of several serving groups (``serve.sitestatus``: each group's verdict, the router's
    row where the view covers the site, the site's verdict), printed once or, with --watch, once per
    interval. Exit 1 when a node did not answer, 3 when the site is not ready."""
    from sparkctl import ui
    from sparkctl.cli import common
    from sparkctl.cli.status_view import render_groups_status
    from sparkctl.serve import bootwatch, verdict
    from sparkctl.serve.sitestatus import SiteSnapshot, SiteStatus

    tools = common.tools()
    http = tools.http()

    def show(snap: SiteSnapshot) -> None:
        if as_json:
            if watch:
                sys.stdout.write(json.dumps(snap.as_dict(name), default=str) + "\n")
                sys.stdout.flush()
            else:
                ui.print_json(snap.as_dict(name))
            return
        if watch:
            ui.console.print(f"— {time.strftime('%Y-%m-%d %H:%M:%S')} —")
        ui.console.print(render_groups_status(snap.groups, snap.verdict, snap.router))

    try:
        status = SiteStatus(found, site[0], site[1], tools, http)
        snap = status.take()
        show(snap)
        while watch:
            try:
                time.sleep(bootwatch.SAMPLE_INTERVAL_S)
                snap = status.take()
                show(snap)
            except KeyboardInterrupt:
                break
    finally:
        http.close()
    if snap.unreachable:
        raise typer.Exit(EXIT_UNREACHABLE)
    if snap.verdict != verdict.READY:
        raise typer.Exit(EXIT_UNHEALTHY)


def _print_snapshot(name: str, snap: verdict.Snapshot, as_json: bool) -> None:
    from sparkctl import ui
    from sparkctl.cli.status_view import render_status

    if as_json:
        sys.stdout.write(json.dumps({"cluster": name, **snap.as_dict()}, default=str) + "\n")
        sys.stdout.flush()
        return
    ui.console.print(f"— {time.strftime('%Y-%m-%d %H:%M:%S')} —")
    ui.console.print(render_status(snap))
    ui.console.file.flush()


def _write_prometheus(cluster: Cluster, snap: verdict.Snapshot, output: Path | None) -> None:
    # Imported here, not at the top: prometheus_client adds about 50 ms to every start of sparkctl.
    from sparkctl.serve import status_metrics

    if output is None:
        sys.stdout.write(status_metrics.exposition(cluster, snap))
        sys.stdout.flush()
        return
    try:
        status_metrics.write_textfile(output, cluster, snap)
    except OSError as exc:
        raise SparkctlError(f"--output {output}: {exc.strerror or exc}") from exc


def register(app: typer.Typer) -> None:
    app.command("status", rich_help_panel=OBSERVE, epilog=example("sparkctl status --watch"))(status)


__all__ = ["register"]
