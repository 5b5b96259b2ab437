"""Serving: `sparkctl up`, `down`, `status`, `logs`, `bundle` — options in, one call, output.

up:     ``serve.up.Up`` (validate, preflight, playbooks/up.yml or the start over SSH, readiness gates,
        memory guard; any failure stops every rank), printed by ``cli.serving.start_group``.
down:   ``serve.down.Down`` (rank 0 first, grace, forced shutdown; over SSH when every node answers).
status: ``serve.verdict.snapshot`` (one SSH probe per node plus rank 0's HTTP endpoints) →
        ready/degraded/down, as a table, JSON or Prometheus text.
logs:   ``serve.logs.show_logs``, the rank units' journals. bundle: ``serve.bundle.build_bundle``.

The collaborators (runner, SSH, HTTP, run directory, the question at the terminal) come from
``cli.common.tools``, the one factory the CLI tests replace.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.live import Live

from sparkctl import ui
from sparkctl.cli import common
from sparkctl.cli.cluster import cluster_summary
from sparkctl.cli.serving import by_admin, render_status, start_group, stop_group
from sparkctl.cli.shell import OBSERVE, SERVE, complete_rank, example
from sparkctl.errors import EXIT_FAILED, EXIT_UNHEALTHY, InputError, SparkctlError
from sparkctl.model import load_inventory
from sparkctl.serve import admin, bootwatch, verdict
from sparkctl.serve.admin import note_supervisor
from sparkctl.serve.bundle import build_bundle
from sparkctl.serve.logs import show_logs
from sparkctl.serve.tools import api_key_or_none

if TYPE_CHECKING:
    from sparkctl.model import Cluster


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
) -> None:
    """Where every rank stands: reachable, unit, memory, GPU, fabric, shards; rank 0's API; hot or throttled GPUs. Exit 0 when ready, 3 otherwise."""  # noqa: E501
    if output is not None and fmt != StatusFormat.prometheus:
        raise InputError("--output: only with --format prometheus")
    prometheus = fmt == StatusFormat.prometheus
    if prometheus and (watch or as_json):
        raise InputError("--format prometheus: not with --watch or --json (one snapshot, text exposition)")
    cluster, doc = common.load(ctx)
    as_json = (as_json or ctx.obj.json or fmt == StatusFormat.json) and not prometheus
    api_key = api_key_or_none(cluster)  # status still shows everything else; /v1/models will say 401
    tools = common.tools()
    fleet = tools.fleet(cluster)
    http = tools.http()
    try:
        snap = verdict.snapshot(cluster, doc, fleet, http, api_key)
        note_supervisor(cluster.name, snap)
        if watch and not as_json and ui.console.is_terminal:
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
    if snap.verdict != verdict.READY:
        raise typer.Exit(EXIT_UNHEALTHY)


def _print_snapshot(name: str, snap: verdict.Snapshot, as_json: bool) -> None:
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


def up(
    ctx: typer.Context,
    force: Annotated[bool, typer.Option("--force", help="Start even if another GPU workload runs.")] = False,
    restart: Annotated[bool, typer.Option("--restart", help="Restart the ranks even if ready.")] = False,
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Replace running ranks without asking (needed without a terminal)."),
    ] = False,
    full: Annotated[
        bool,
        typer.Option("--full", help="Always run the up playbook (install, kit and image checks), even when "
                                    "every node already holds what it would install."),
    ] = False,
) -> None:
    """Start the four ranks in order and wait until they serve (preflight, gates, memory guard).

    Ranks that already run are stopped and started again only after a yes (or with --yes). When every
    node's unit, environment, secrets and kit files, staged kit and image already match, the units are
    started over SSH without the playbook (the output says which path ran and why; --full forces it)."""
    start_group(ctx.obj, common.tools(), force=force, restart=restart, yes=yes, full=full)


def down(
    ctx: typer.Context,
    grace: Annotated[int | None, typer.Option("--grace", help="Seconds rank 0 may drain before the forced shutdown (default: the profile's gates.drain_s).")] = None,  # noqa: E501
    full: Annotated[bool, typer.Option("--full", help="Run the playbook (playbooks/down.yml) even when every node answers.")] = False,  # noqa: E501
) -> None:
    """Stop every rank: SIGTERM rank 0, grace period, forced shutdown, SIGKILL backstop. Idempotent.
    With every node answering, the playbook's steps run over SSH (one round; nothing to do when every
    rank unit is inactive); a node that does not answer, or a stop over SSH that fails, runs
    playbooks/down.yml, which reports it (--full runs the playbook anyway)."""
    stop_group(ctx.obj, common.tools(), grace, full)


def logs(
    ctx: typer.Context,
    rank: Annotated[
        int | None, typer.Argument(help="Only this rank (default: all).", autocompletion=complete_rank)
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    since: Annotated[str | None, typer.Option("--since", help="journalctl --since, e.g. '-10min'.")] = None,
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines per rank.")] = 100,
) -> None:
    """The journal of the rank units, prefixed by rank and node."""
    cluster, doc = common.load(ctx)

    def write(line: str) -> None:
        sys.stdout.write(line)
        sys.stdout.flush()

    show_logs(cluster, doc, common.tools(), write, rank, follow, since, lines)


def bundle(
    ctx: typer.Context,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Tarball path (default: ./sparkctl-bundle-<site>-<time>.tar.gz).")] = None,  # noqa: E501
    lines: Annotated[int, typer.Option("--lines", "-n", help="Journal lines per rank.")] = 300,
) -> None:
    """A support tarball: versions, identity table, rendered config, unit states, journals, link counters; secrets redacted."""  # noqa: E501
    cluster, doc = common.load(ctx)
    tools = common.tools()
    fleet = tools.fleet(cluster)
    http = tools.http()
    try:
        data, unreachable = build_bundle(cluster, doc, fleet, http, cluster_summary(cluster), lines)
    finally:
        fleet.close()
        http.close()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = output or Path(f"sparkctl-bundle-{cluster.name}-{stamp}.tar.gz")
    path.write_bytes(data)
    path.chmod(0o600)
    if ctx.obj.json:
        ui.print_json({"bundle": str(path), "bytes": len(data), "unreachable": unreachable})
    else:
        ui.console.print(f"{ui.OK} wrote {path} ({len(data) / 1024:.0f} KiB, secrets redacted)")
    if unreachable:
        # The tarball is still worth sending (the controller's side, the nodes that answered), but it
        # is not the whole picture: a script must not take it for one.
        raise SparkctlError(
            f"bundle: {len(unreachable)} of {len(cluster.nodes)} nodes did not answer "
            f"({', '.join(unreachable)}); {path} holds the rest and why each did not answer",
            hint="check those nodes' power, network and SSH (sparkctl status shows them), then run "
                 "bundle again for a complete one",
            exit_code=EXIT_FAILED,
        )


def _by_admin(verb: str, command: Any) -> Any:
    """`up` or `down` typed by a person, inside ``serve.admin.lifecycle`` (the lifecycle lock, healing
    paused while it runs): a successful `up` resumes healing, closes the breaker and resets the
    supervisor's restart count; an `up` refused, declined or failed leaves them as they were; `down`
    leaves healing paused until the next `up`."""
    after = admin.RESUMED if verb == "up" else admin.PAUSED
    failure = admin.AS_BEFORE if verb == "up" else admin.PAUSED

    @functools.wraps(command)
    def wrapped(ctx: typer.Context, *args: Any, **kwargs: Any) -> Any:
        name = load_inventory(ctx.obj.inventory_dir()).name
        with by_admin(ctx.obj, name, verb, healing_after=after, healing_on_failure=failure):
            return command(ctx, *args, **kwargs)

    return wrapped


def register(app: typer.Typer) -> None:
    for name, func, panel, sample in (
        ("up", _by_admin("up", up), SERVE, "sparkctl up --yes"),
        ("down", _by_admin("down", down), SERVE, "sparkctl down --grace 30"),
        ("status", status, OBSERVE, "sparkctl status --watch"),
        ("logs", logs, OBSERVE, "sparkctl logs 0 --follow --since -10min"),
        ("bundle", bundle, OBSERVE, "sparkctl bundle -o support.tar.gz"),
    ):
        app.command(name, rich_help_panel=panel, epilog=example(sample))(func)


__all__ = ["EXIT_FAILED", "register"]
