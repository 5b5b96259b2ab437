"""`sparkctl watch` (the supervisor, in the foreground or as the controller's systemd unit) and
`sparkctl events` (what it decided).

watch:  every ``sparkctl_supervisor.interval_s`` the probe `status` takes, plus a canary completion
        on rank 0; on a dead rank, an exited rank unit, MemAvailable under the floor or failed
        canaries, a whole-group restart through `down`'s and `up`'s own code (``serve.down.Down``
        and ``serve.up.Up``, called in this process: the same playbooks, preflight and gates).
        Decisions: ``sparkctl.serve.supervisor``; what it keeps on disk: ``sparkctl.serve.events``.
        ``--install`` writes and enables ``sparkctl-watch-<cluster>.service`` on the controller
        (``sparkctl.serve.watchunit``).
events: the supervisor's JSONL event log, as lines or JSON; ``--follow`` keeps printing.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Annotated, Any

import httpx
import typer

from sparkctl import ui
from sparkctl.ansible import plan
from sparkctl.cli import State, common
from sparkctl.cli.cluster import load_cluster
from sparkctl.cli.serve import GroupOption
from sparkctl.cli.serving import start_group, stop_group
from sparkctl.cli.shell import OBSERVE, SERVE, example
from sparkctl.errors import EXIT_USAGE, InputError, SparkctlError, UnhealthyError
from sparkctl.model import Cluster
from sparkctl.render import plan_document
from sparkctl.serve import events, supervisor, verdict, watchunit
from sparkctl.serve import groups as serve_groups
from sparkctl.serve import tools as tools_
from sparkctl.serve.probe import FleetLike

# --- the supervisor's hands: `down` and `up` themselves ---------------------------------------


def _sleep(seconds: float) -> None:
    """Between two probes (a seam the CLI tests replace)."""
    time.sleep(seconds)


def _as_command(ctx: typer.Context) -> State:
    """The options `up` and `down` run with in this process (human output, no JSON)."""
    return State(inventory=ctx.obj.inventory_dir(), json=False, verbose=ctx.obj.verbose)


def _actions(ctx: typer.Context, cluster: Cluster, doc: dict[str, Any], fleet: FleetLike, http: httpx.Client,
             api_key: str | None, group: str | None = None) -> supervisor.Actions:
    """``group``: the serving group supervised on a site of several (its `down` and `up` only)."""
    state = _as_command(ctx)
    n = len(cluster.nodes)
    only = None if group is None else [group]

    def stop() -> str:
        stop_group(state, common.tools(), groups=only)
        return f"all {n} ranks stopped (`sparkctl down`)"

    def start() -> str:
        start_group(state, common.tools(), yes=True, groups=only)
        return f"ready: all {n} ranks passed the gates (`sparkctl up`)"

    return supervisor.Actions(
        snapshot=lambda: verdict.snapshot(cluster, doc, fleet, http, api_key),
        canary=lambda: supervisor.canary(cluster, http, api_key),
        stop=stop,
        start=start,
        notify=lambda record: supervisor.notify(cluster.supervisor, record, cluster.name, http,
                                                secret_env=plan.secret_env_names(cluster)),
        sleep=lambda seconds: _sleep(seconds),
    )


def watch(
    ctx: typer.Context,
    autostart: Annotated[
        bool | None,
        typer.Option("--autostart/--no-autostart",
                     help="Bring the group up when every node answers again (default: sparkctl_autostart)."),
    ] = None,
    service: Annotated[
        bool,
        typer.Option("--service", help="Run as the installed unit: stay up while the breaker is open, "
                                       "waiting for the admin's `up`, instead of exiting 3."),
    ] = False,
    do_install: Annotated[
        bool, typer.Option("--install", help="Write and enable the supervisor's systemd unit here.")
    ] = False,
    print_unit: Annotated[bool, typer.Option("--print-unit", help="Print that unit and exit.")] = False,
    user: Annotated[
        str | None,
        typer.Option("--user", help="The account the unit runs as (default: the admin `sudo` names, "
                                    "else you); its state directory and SSH key are the unit's."),
    ] = None,
    group: GroupOption = None,
) -> None:
    """Supervise the group: probe, canary, whole-group restart within the circuit breaker.

    Exits 3 when the breaker opens (the group stays down until `sparkctl up`); `sparkctl down`
    pauses healing until the next `up`. Every decision is in `sparkctl events`."""
    cluster = load_cluster(ctx)
    if print_unit:
        sys.stdout.write(watchunit.unit_for(cluster, user))
        return
    if do_install:
        path = watchunit.install(cluster, user)
        ui.console.print(f"{ui.OK} installed and started {path.name} ({path}); "
                         f"autostart {'on' if cluster.autostart else 'off'} (sparkctl_autostart)")
        return
    # Each serving group is supervised on its own (its probe, canary, restarts, breaker and events
    # under its own name); on a site of several, side by side, one thread each.
    found = serve_groups.targets(cluster, plan_document(cluster), group)
    named = serve_groups.several(found)
    # A missing secret is bad input: exit 2 before anything runs.
    keys = {t.group: tools_.api_key(t.cluster) for t in found}
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    def one(t: serve_groups.Target) -> int:
        return _supervise(ctx, t.cluster, t.doc, keys[t.group], t.group if named else None, autostart,
                          service, stopping)

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        if len(found) == 1:
            codes = {found[0].cluster.name: one(found[0])}
        else:
            codes = _side_by_side(found, one, stopping)
    finally:
        signal.signal(signal.SIGTERM, previous)
    for name, rc in codes.items():
        if rc:
            notes = events.supervisor_notes(name)
            which = "the circuit breaker" + ("" if len(codes) == 1 else f" of {name}")
            raise UnhealthyError(events.breaker_reason(notes) or f"{which} is open",
                                 hint="find the cause (`sparkctl events`, `sparkctl logs`), then "
                                      "`sparkctl up`")


def _supervise(ctx: typer.Context, cluster: Cluster, doc: dict[str, Any], api_key: str | None,
               group: str | None, autostart: bool | None, service: bool, stopping: threading.Event) -> int:
    """One group's supervisor until ``stopping`` is set (0) or its breaker opens (3)."""
    try:
        with events.single_watch(cluster.name):
            tools = common.tools()
            fleet = tools.fleet(cluster)
            http = tools.http()
            try:
                actions = _actions(ctx, cluster, doc, fleet, http, api_key, group)
                sup = supervisor.Supervisor(
                    cluster.name, cluster.supervisor, cluster.autostart if autostart is None else autostart,
                    float(cluster.profile.memory.floor_gib), actions, on_event=_printer(ctx.obj.json),
                )
                try:
                    rc = sup.run(stopping.is_set, service=service)
                except KeyboardInterrupt:
                    rc = 0
                sup.event("watch-stopped", "the supervisor stopped" + (" (breaker open)" if rc else ""))
            finally:
                fleet.close()
                http.close()
    except events.Busy as exc:
        raise SparkctlError(f"another supervisor already watches {cluster.name}: {exc.holder}",
                            hint=f"stop it first (or `systemctl stop {watchunit.unit_name(cluster.name)}`)",
                            exit_code=EXIT_USAGE) from None
    return rc


def _side_by_side(found: list[serve_groups.Target], one: Callable[[serve_groups.Target], int],
                  stopping: threading.Event) -> dict[str, int]:
    """Every group's supervisor in a thread of its own until each returns; Ctrl-C stops them all.
    A group whose breaker opens stops its own supervisor only; the first error is raised."""
    codes: dict[str, int] = {}
    errors: list[BaseException] = []

    def run(t: serve_groups.Target) -> None:
        try:
            codes[t.cluster.name] = one(t)
        except BaseException as exc:  # handed to the main thread
            errors.append(exc)
            stopping.set()

    threads = [threading.Thread(target=run, args=(t,), name=f"watch-{t.group}", daemon=True) for t in found]
    for th in threads:
        th.start()
    try:
        for th in threads:
            while th.is_alive():
                th.join(0.2)
    except KeyboardInterrupt:
        stopping.set()
        for th in threads:
            th.join()
    if errors:
        raise errors[0]
    return codes


def _printer(as_json: bool) -> Callable[[dict[str, Any]], None]:
    def emit(record: dict[str, Any]) -> None:
        if as_json:
            sys.stdout.write(json.dumps(record) + "\n")
        else:
            sys.stdout.write(events.format_event(record) + "\n")
        sys.stdout.flush()

    return emit


def events_cmd(
    ctx: typer.Context,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object a line (JSONL).")] = False,
    last: Annotated[int, typer.Option("--last", "-n", help="How many of the latest events.")] = 50,
) -> None:
    """The supervisor's decisions: time, kind, node, evidence, action (detection → down → up)."""
    cluster = load_cluster(ctx)
    if last < 1:
        raise InputError("--last must be at least 1")
    log = events.EventLog(cluster.name)
    emit = _printer(as_json or ctx.obj.json)
    if not follow:
        records = log.read(last)
        if not records and not (as_json or ctx.obj.json):
            ui.err_console.print(f"no events yet for {cluster.name} ({log.path})")
        for record in records:
            emit(record)
        return
    with contextlib.suppress(KeyboardInterrupt):
        log.follow(emit, lambda: False, last=last)


def register(app: typer.Typer) -> None:
    app.command("watch", rich_help_panel=SERVE,
                epilog=example("sparkctl watch", "sudo sparkctl watch --install"))(watch)
    app.command("events", rich_help_panel=OBSERVE, epilog=example("sparkctl events --follow"))(events_cmd)
