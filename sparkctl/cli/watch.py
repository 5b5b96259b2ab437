"""`sparkctl watch` (the supervisor, in the foreground or as the controller's systemd unit) and
`sparkctl events` (what it decided).

watch:  every ``sparkctl_supervisor.interval_s`` the probe `status` takes, plus a canary completion
        on rank 0; on a dead rank, an exited rank unit, MemAvailable under the floor or failed
        canaries, a whole-group restart through `down`'s and `up`'s own code (``serve.down.Down``
        and ``serve.up.Up``, called in this process: the same playbooks, preflight and gates). Decisions:
        ``sparkctl.serve.supervisor``; what it keeps on disk: ``sparkctl.serve.events``.
        ``--install`` writes and enables ``sparkctl-watch-<cluster>.service`` on the controller.
events: the supervisor's JSONL event log, as lines or JSON; ``--follow`` keeps printing.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from sparkctl import ui
from sparkctl.ansible import content
from sparkctl.cli import State, common
from sparkctl.cli.cluster import load_cluster
from sparkctl.cli.serving import start_group, stop_group
from sparkctl.cli.shell import OBSERVE, SERVE, example
from sparkctl.errors import EXIT_USAGE, InputError, SparkctlError, UnhealthyError
from sparkctl.render import plan_document
from sparkctl.serve import events, supervisor, verdict
from sparkctl.serve import tools as tools_

UNIT_DIR = Path("/etc/systemd/system")


def unit_name(cluster_name: str) -> str:
    return f"sparkctl-watch-{cluster_name}.service"


def render_unit(cluster_name: str, inventory: Path, python: str, state_dir: Path, user: str,
                workdir: Path, vault_password_file: str | None = None) -> str:
    """The controller's unit running `sparkctl watch --service` (pure: every input is an argument)."""
    argv = [python, "-m", "sparkctl", "-i", str(inventory), "watch", "--service"]
    env = [f"SPARKCTL_STATE_DIR={state_dir}"]
    if vault_password_file:
        env.append(f"ANSIBLE_VAULT_PASSWORD_FILE={vault_password_file}")
    lines = [
        "# Written by `sparkctl watch --install`; `systemctl disable --now` it to stop supervising.",
        "[Unit]",
        f"Description=sparkctl supervisor of {cluster_name} (heals the group; autostart: "
        "sparkctl_autostart)",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=exec",
        f"User={user}",
        f"WorkingDirectory={workdir}",
        *(f"Environment={shlex.quote(e)}" for e in env),
        "# Secrets given as {env: VAR} in the inventory: put VAR=... in this 0600 file.",
        f"EnvironmentFile=-/etc/sparkctl/watch-{cluster_name}.env",
        "ExecStart=" + " ".join(shlex.quote(a) for a in argv),
        "# A crash restarts the supervisor (the breaker's count is on disk, so no restart storm);",
        "# bad input (exit 2: inventory, a second supervisor) does not.",
        "Restart=on-failure",
        "RestartSec=30",
        "RestartPreventExitStatus=2",
        "KillSignal=SIGTERM",
        "# SIGTERM lets a restart in progress finish its gates before the supervisor exits.",
        "TimeoutStopSec=1800",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def systemd_running() -> bool:
    """systemd is PID 1 here (sd_booted's test)."""
    return Path("/run/systemd/system").is_dir()


def _unit_for(cluster: Any) -> str:
    return render_unit(cluster.name, Path(cluster.inventory_dir).absolute(), sys.executable,
                       content.state_dir().absolute(), _user(), Path.cwd(),
                       os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE"))


def _user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def install(cluster: Any) -> Path:
    """Write and enable the unit; nothing is written where systemd does not run or cannot be told."""
    if not systemd_running():
        raise InputError(
            "this controller does not run systemd as PID 1 (no /run/systemd/system): there is no "
            "service manager to install `sparkctl watch` into; nothing was written",
            hint="run `sparkctl watch` in the foreground (or under your own supervisor), or install on a "
                 "controller booted with systemd; `sparkctl watch --print-unit` shows the unit",
        )
    if shutil.which("systemctl") is None:
        raise InputError("systemctl is missing; nothing was written")
    if os.geteuid() != 0:
        raise InputError(f"writing {UNIT_DIR} needs root; nothing was written",
                         hint="run `sudo sparkctl watch --install` (the unit keeps your state directory)")
    text = _unit_for(cluster)
    path = UNIT_DIR / unit_name(cluster.name)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    os.replace(tmp, path)
    for argv in (["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", path.name]):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SparkctlError(
                f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}",
                hint=f"the unit is at {path}; fix and run `systemctl enable --now {path.name}`",
            )
    return path


# --- the supervisor's hands: `down` and `up` themselves ---------------------------------------


def _sleep(seconds: float) -> None:
    """Between two probes (a seam the CLI tests replace)."""
    time.sleep(seconds)


def _as_command(ctx: typer.Context) -> State:
    """The options `up` and `down` run with in this process (human output, no JSON)."""
    return State(inventory=ctx.obj.inventory_dir(), json=False, verbose=ctx.obj.verbose)


def _actions(ctx: typer.Context, cluster: Any, doc: dict[str, Any], fleet: Any, http: Any,
             api_key: str | None) -> supervisor.Actions:
    state = _as_command(ctx)
    n = len(cluster.nodes)

    def stop() -> str:
        stop_group(state, common.tools())
        return f"all {n} ranks stopped (`sparkctl down`)"

    def start() -> str:
        start_group(state, common.tools(), yes=True)
        return f"ready: all {n} ranks passed the gates (`sparkctl up`)"

    return supervisor.Actions(
        snapshot=lambda: verdict.snapshot(cluster, doc, fleet, http, api_key),
        canary=lambda: supervisor.canary(cluster, http, api_key),
        stop=stop,
        start=start,
        notify=lambda record: supervisor.notify(cluster.supervisor, record, cluster.name, http),
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
) -> None:
    """Supervise the group: probe, canary, whole-group restart within the circuit breaker.

    Exits 3 when the breaker opens (the group stays down until `sparkctl up`); `sparkctl down`
    pauses healing until the next `up`. Every decision is in `sparkctl events`."""
    cluster = load_cluster(ctx)
    if print_unit:
        sys.stdout.write(_unit_for(cluster))
        return
    if do_install:
        path = install(cluster)
        ui.console.print(f"{ui.OK} installed and started {path.name} ({path}); "
                         f"autostart {'on' if cluster.autostart else 'off'} (sparkctl_autostart)")
        return
    doc = plan_document(cluster)
    api_key = tools_.api_key(cluster)  # a missing secret is bad input: exit 2 before anything runs
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        with events.single_watch(cluster.name):
            tools = common.tools()
            fleet = tools.fleet(cluster)
            http = tools.http()
            try:
                actions = _actions(ctx, cluster, doc, fleet, http, api_key)
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
                            hint="stop it first (or `systemctl stop " + unit_name(cluster.name) + "`)",
                            exit_code=EXIT_USAGE) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if rc:
        notes = events.supervisor_notes(cluster.name)
        raise UnhealthyError(events.breaker_reason(notes) or "the circuit breaker is open",
                             hint="find the cause (`sparkctl events`, `sparkctl logs`), then `sparkctl up`")


def _printer(as_json: bool) -> Any:
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
