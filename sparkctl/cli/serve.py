"""Serving: `sparkctl up`, `down`, `logs`, `bundle` — options in, one call, output (`status` is
``cli.status``).

up:     ``serve.up.Up`` (validate, preflight, playbooks/up.yml or the start over SSH, readiness gates,
        memory guard; any failure stops every rank), printed by ``cli.serving.start_group``.
down:   ``serve.down.Down`` (rank 0 first, grace, forced shutdown; over SSH when every node answers).
logs:   ``serve.logs.show_logs``, the rank units' journals. bundle: ``serve.bundle.build_bundle``.

The collaborators (runner, SSH, HTTP, run directory, the question at the terminal) come from
``cli.common.tools``, the one factory the CLI tests replace.

Each command imports what it runs with inside its own body: a <TAB> on `logs ` needs this module's
options only, not the model, SSH and HTTP clients behind them.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from sparkctl.cli.completion import complete_rank
from sparkctl.cli.shell import OBSERVE, SERVE, example
from sparkctl.errors import EXIT_FAILED, EXIT_UNREACHABLE, SparkctlError

# --group NAME (repeatable): the serving groups a verb acts on; none named: every group of the site.
GroupOption = Annotated[
    list[str] | None,
    typer.Option("--group", help="Only this serving group (sparkctl_groups; repeat for several; "
                                 "default: every group)."),
]


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
    group: GroupOption = None,
) -> None:
    """Start the four ranks in order and wait until they serve (preflight, gates, memory guard).

    Ranks that already run are stopped and started again only after a yes (or with --yes). When every
    node's unit, environment, secrets and kit files, staged kit and image already match, the units are
    started over SSH without the playbook (the output says which path ran and why; --full forces it)."""
    from sparkctl.cli import common
    from sparkctl.cli.serving import start_group

    start_group(ctx.obj, common.tools(), force=force, restart=restart, yes=yes, full=full, groups=group)


def down(
    ctx: typer.Context,
    grace: Annotated[int | None, typer.Option("--grace", help="Seconds rank 0 may drain before the forced shutdown (default: the profile's gates.drain_s).")] = None,  # noqa: E501
    full: Annotated[bool, typer.Option("--full", help="Run the playbook (playbooks/down.yml) even when every node answers.")] = False,  # noqa: E501
    group: GroupOption = None,
) -> None:
    """Stop every rank: SIGTERM rank 0, grace period, forced shutdown, SIGKILL backstop. Idempotent.

    With every node answering, the playbook's steps run over SSH (one round; nothing to do when every
    rank unit is inactive); a node that does not answer, or a stop over SSH that fails, runs
    playbooks/down.yml, which reports it (--full runs the playbook anyway)."""
    from sparkctl.cli import common
    from sparkctl.cli.serving import stop_group

    stop_group(ctx.obj, common.tools(), grace, full, groups=group)


def logs(
    ctx: typer.Context,
    rank: Annotated[
        int | None, typer.Argument(help="Only this rank (default: all).", autocompletion=complete_rank)
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    since: Annotated[str | None, typer.Option("--since", help="journalctl --since, e.g. '-10min'.")] = None,
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines per rank.")] = 100,
    group: GroupOption = None,
) -> None:
    """The journal of the rank units, prefixed by rank and node (and group, on a site of several;
    RANK is then each group's own)."""
    from sparkctl.cli import common
    from sparkctl.serve.logs import show_logs

    cluster, doc = common.load(ctx)

    def write(line: str) -> None:
        sys.stdout.write(line)
        sys.stdout.flush()

    show_logs(cluster, doc, common.tools(), write, rank, follow, since, lines, groups=group)


def bundle(
    ctx: typer.Context,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Tarball path (default: ./sparkctl-bundle-<site>-<time>.tar.gz).")] = None,  # noqa: E501
    lines: Annotated[int, typer.Option("--lines", "-n", help="Journal lines per rank.")] = 300,
    group: GroupOption = None,
) -> None:
    """A support tarball: versions, identity table, rendered config, unit states, journals, link counters; secrets redacted."""  # noqa: E501
    from sparkctl import ui
    from sparkctl.cli import common
    from sparkctl.cli.cluster import cluster_summary
    from sparkctl.render import groups as rgroups
    from sparkctl.serve.bundle import build_bundle

    cluster, doc = common.load(ctx)
    covered = rgroups.restrict(cluster, group) if group else cluster  # --group: its nodes only
    tools = common.tools()
    fleet = tools.fleet(cluster)
    http = tools.http()
    try:
        data, unreachable = build_bundle(cluster, doc, fleet, http, cluster_summary(covered), lines,
                                         groups=group)
    finally:
        fleet.close()
        http.close()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = output or Path(f"sparkctl-bundle-{covered.name}-{stamp}.tar.gz")
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
            f"bundle: {len(unreachable)} of {len(covered.nodes)} nodes did not answer "
            f"({', '.join(unreachable)}); {path} holds the rest and why each did not answer",
            hint="check those nodes' power, network and SSH (sparkctl status shows them), then run "
                 "bundle again for a complete one",
            exit_code=EXIT_UNREACHABLE, nodes=unreachable,
        )


def _by_admin(verb: str, command: Any) -> Any:
    """`up` or `down` typed by a person, inside ``serve.admin.lifecycle`` (the lifecycle lock, healing
    paused while it runs): a successful `up` resumes healing, closes the breaker and resets the
    supervisor's restart count; an `up` refused, declined or failed leaves them as they were; `down`
    leaves healing paused until the next `up`."""

    @functools.wraps(command)
    def wrapped(ctx: typer.Context, *args: Any, **kwargs: Any) -> Any:
        from sparkctl.cli.serving import by_admin
        from sparkctl.model import load_inventory
        from sparkctl.serve import admin
        from sparkctl.serve import groups as serve_groups

        after = admin.RESUMED if verb == "up" else admin.PAUSED
        failure = admin.AS_BEFORE if verb == "up" else admin.PAUSED
        cluster = load_inventory(ctx.obj.inventory_dir())
        # The site's name, and on a site of several serving groups each group's the verb acts on
        # (its supervisor's state): every one paused and locked while the verb runs.
        with contextlib.ExitStack() as held:
            for name in serve_groups.state_names(cluster, kwargs.get("group")):
                held.enter_context(by_admin(ctx.obj, name, verb, healing_after=after,
                                            healing_on_failure=failure))
            return command(ctx, *args, **kwargs)

    return wrapped


def register(app: typer.Typer) -> None:
    for name, func, panel, sample in (
        ("up", _by_admin("up", up), SERVE, "sparkctl up --yes"),
        ("down", _by_admin("down", down), SERVE, "sparkctl down --grace 30"),
        ("logs", logs, OBSERVE, "sparkctl logs 0 --follow --since -10min"),
        ("bundle", bundle, OBSERVE, "sparkctl bundle -o support.tar.gz"),
    ):
        app.command(name, rich_help_panel=panel, epilog=example(sample))(func)


__all__ = ["EXIT_FAILED", "register"]
