"""`sparkctl lab …`: the local lab (four systemd-nspawn Sparks and a Linux switch) and its chaos hooks.

Loaded into every `sparkctl` start (an entry point of the ``sparkctl.commands`` group), so the lab's
machinery (``control``, ``host``, ``state``) is imported by the commands that use it, not here:
importing it at the top measured 40–50 ms more for every `sparkctl` run and every completion.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from sparkctl import ui
from sparkctl.cli.shell import LAB, OrderedGroup, example
from sparkctl.errors import EXIT_USAGE, SparkctlError
from sparkctl_lab import topology as topo

lab_app = typer.Typer(
    name="lab",
    help="The local lab: systemd-nspawn 'Sparks' (four on a switch, or another published shape) and a Linux "
    "switch on this machine (root, Linux).",
    cls=OrderedGroup,
    no_args_is_help=True,
)

DEFAULT_INVENTORY = Path(f"inventory/{topo.CLUSTER_NAME}")  # inventory/lab (lab N > 0: inventory/labN)


def _json(ctx: typer.Context) -> bool:
    return bool(getattr(ctx.obj, "json", False))


def _log(ctx: typer.Context) -> Callable[[str], None]:
    if _json(ctx):
        return lambda _m: None
    return lambda m: ui.err_console.print(f"[dim]·[/dim] {m}")


def _complete_node(incomplete: str) -> list[str]:
    return [n for n in topo.node_names() if n.startswith(incomplete)]


def _complete_machine(incomplete: str) -> list[str]:
    return [m for m in topo.machines() if m.startswith(incomplete)]


MachineArg = Annotated[str, typer.Argument(help="spark-K or lab-switch", autocompletion=_complete_machine)]


def _parse_nvme(
    nvme_gib: int | None, per_node: list[str] | None, shape: str = topo.DEFAULT_SHAPE
) -> dict[str, int]:
    sizes: dict[str, int] = {}
    if nvme_gib is not None:
        sizes = dict.fromkeys(topo.node_names(topo.get_shape(shape)), nvme_gib)
    for item in per_node or []:
        node, sep, gib = item.partition("=")
        if not sep or not gib.strip().isdigit():
            raise SparkctlError(f"--nvme {item!r}: expected NODE=GIB, e.g. spark-2=4", exit_code=EXIT_USAGE)
        sizes[node.strip()] = int(gib)
    return sizes


def _complete_shape(incomplete: str) -> list[str]:
    return [s for s in topo.SHAPES if s.startswith(incomplete)]


def _check_shape(value: str) -> str:
    if value not in topo.SHAPES:
        raise typer.BadParameter(f"{value!r} is not a lab shape; one of: {', '.join(topo.SHAPES)}")
    return value


@lab_app.command("up", epilog=example("sparkctl lab up --nvme-gib 8", "sparkctl lab up --shape triangle"))
def up_cmd(
    ctx: typer.Context,
    nvme_gib: Annotated[
        int | None,
        typer.Option(
            "--nvme-gib", help="Give every node a size-limited /mnt/nvme (ext4 on a loop device) of N GiB."
        ),
    ] = None,
    nvme: Annotated[
        list[str] | None,
        typer.Option("--nvme", help="Per-node NVMe size, NODE=GIB (repeatable; overrides --nvme-gib)."),
    ] = None,
    shape: Annotated[
        str,
        typer.Option(
            "--shape",
            help="How the nodes are cabled: switch4 (four nodes on the switch), triangle (three, every pair "
            "cabled), ring (four, neighbours cabled), switch8 (eight on the switch). A lab up in another "
            "shape is taken down and brought up anew in this one.",
            autocompletion=_complete_shape,
            callback=_check_shape,
        ),
    ] = topo.DEFAULT_SHAPE,
) -> None:
    """Bring the lab up (idempotent) and write its inventory (default inventory/lab)."""
    from sparkctl_lab import control

    inv = ctx.obj.inventory if ctx.obj.inventory is not None else DEFAULT_INVENTORY
    report = control.up(inv, _parse_nvme(nvme_gib, nvme, shape), log=_log(ctx), shape=shape)
    if _json(ctx):
        ui.print_json(
            {
                "inventory": str(report.inventory_dir),
                "ssh_config": str(report.inventory_dir / "ssh_config"),
                "rootfs": str(report.rootfs),
                "rootfs_build_s": report.rootfs_build_s,
                "shape": report.shape,
                "started": report.started,
                "system": report.system,
                "inventory_changed": report.inventory_changed,
                "kit_commit": report.kit_commit,
                "docker": report.docker,
                "engine_build_s": report.engine_build_s,
                "image_import_s": report.image_import_s,
                "seconds": round(report.seconds, 2),
            }
        )
        return
    for machine, result in report.system.items():
        mark = ui.OK if result == "running" else ui.FAIL
        ui.console.print(f"{mark} {machine:<11} {result}")
    for node, active in report.docker.items():
        ui.console.print(f"{ui.OK if active == 'active' else ui.FAIL} {node:<11} docker.service {active}")
    verb = "started " + ", ".join(report.started) if report.started else "already up, nothing changed"
    ui.console.print(f"lab up as {report.shape} in {report.seconds:.1f}s ({verb})")
    ui.console.print(
        f"inventory: {report.inventory_dir}   ssh: ssh -F {report.inventory_dir}/ssh_config spark-0"
    )


@lab_app.command("build", epilog=example("sparkctl lab build"))
def build_cmd(ctx: typer.Context) -> None:
    """Build the lab's caches (rootfs, base engine image, synthetic kit) without starting anything."""
    from sparkctl_lab import control

    caches = control.build(log=_log(ctx))
    if _json(ctx):
        ui.print_json(
            {
                "rootfs": str(caches.rootfs),
                "rootfs_build_s": caches.rootfs_build_s,
                "engine_tarball": str(caches.tarball.path),
                "engine_build_s": caches.engine_build_s,
                "kit_commit": caches.kit.commit,
            }
        )
        return
    built = []
    if caches.rootfs_build_s is not None:
        built.append(f"rootfs {caches.rootfs_build_s:.0f}s")
    if caches.engine_build_s is not None:
        built.append(f"engine image {caches.engine_build_s:.0f}s")
    done = ", ".join(built) or "everything was cached"
    ui.console.print(f"{ui.OK} lab caches ready ({done}): {caches.rootfs}")


@lab_app.command("down", epilog=example("sparkctl lab down"))
def down_cmd(ctx: typer.Context) -> None:
    """Remove everything the lab made: containers, namespaces, links, mounts, loop devices, inventory."""
    from sparkctl_lab import control

    left = control.down(log=_log(ctx))
    if _json(ctx):
        ui.print_json({"clean": not left, "leftovers": left})
    if left:
        raise SparkctlError(
            "the lab was not removed completely", details=left, hint="run `sparkctl lab down` again"
        )
    if not _json(ctx):
        ui.console.print(f"{ui.OK} lab down: nothing left behind")


@lab_app.command("status", epilog=example("sparkctl lab status --json"))
def status_cmd(ctx: typer.Context) -> None:
    """Machines, their state, init PID, management address and `systemctl is-system-running`."""
    from sparkctl_lab import control

    rows = control.status()
    if _json(ctx):
        ui.print_json(rows)
        return
    table = Table(title=f"sparkctl lab ({topo.shape().name})", title_justify="left")
    for col in ("machine", "state", "pid", "mgmt ip", "system", "rss MiB"):
        table.add_column(col)
    for r in rows:
        state = f"[green]{r['state']}[/green]" if r["state"] == "running" else f"[red]{r['state']}[/red]"
        table.add_row(
            r["machine"], state, str(r["pid"] or "-"), r["mgmt_ip"], r["system"], str(r["rss_mib"] or "-")
        )
    ui.console.print(table)


@lab_app.command("password", epilog=example(
    "sparkctl lab password",
    "sparkctl bootstrap 10.250.0.10 --login root --password-file \"$(sparkctl lab password)\" --yes"))
def password_cmd(ctx: typer.Context) -> None:
    """The file (0600) holding the Sparks' root password, for a password login as on a fresh box."""
    from sparkctl_lab import state

    path = state.root_password_file()
    if not path.is_file():
        raise SparkctlError(f"no root password file at {path}", hint="run `sparkctl lab up` first",
                            exit_code=EXIT_USAGE)
    if _json(ctx):
        ui.print_json({"file": str(path)})
    else:
        typer.echo(str(path))


@lab_app.command("kill", epilog=example("sparkctl lab kill spark-3"))
def kill_cmd(
    ctx: typer.Context, machine: MachineArg
) -> None:
    """Power a machine off hard (SIGKILL of its init; its NICs lose carrier and addresses)."""
    from sparkctl_lab import control

    was_on = control.kill(machine)
    if _json(ctx):
        ui.print_json({"machine": machine, "was_running": was_on})
    else:
        ui.console.print(
            f"{ui.OK} {machine} powered off" if was_on else f"{ui.SKIP} {machine} was already off"
        )


@lab_app.command("start", epilog=example("sparkctl lab start spark-3"))
def start_cmd(
    ctx: typer.Context, machine: MachineArg
) -> None:
    """Power a machine on and wait until it answers SSH."""
    from sparkctl_lab import control

    started = control.start(machine, log=_log(ctx))
    if _json(ctx):
        ui.print_json({"machine": machine, "started": started})
    else:
        ui.console.print(f"{ui.OK} {machine} is up" + ("" if started else " (was already running)"))


class LinkState(StrEnum):
    up = "up"
    down = "down"


class HalfKey(StrEnum):
    a = "a"
    b = "b"


@lab_app.command("link", epilog=example("sparkctl lab link spark-2 down --half a"))
def link_cmd(
    ctx: typer.Context,
    node: Annotated[str, typer.Argument(help="spark-K", autocompletion=_complete_node)],
    to: Annotated[LinkState, typer.Argument(help="down: pull the cable; up: plug it back")],
    half: Annotated[
        HalfKey | None, typer.Option("--half", help="Only this PCIe half's fabric cable (a or b).")
    ] = None,
    mgmt: Annotated[bool, typer.Option("--mgmt", help="The management cable instead of the fabric.")] = False,
) -> None:
    """Cut or restore a node's fabric link(s) at the lab switch (or its management link)."""
    from sparkctl_lab import chaos

    touched = chaos.set_link(node, to is LinkState.up, [half.value] if half else None, mgmt=mgmt)
    if _json(ctx):
        ui.print_json({"node": node, "state": to.value, "ports": touched})
    else:
        ui.console.print(f"{ui.OK} {node}: {', '.join(touched)} {to.value}")


@lab_app.command("mtu", epilog=example("sparkctl lab mtu s2a 1500"))
def mtu_cmd(
    ctx: typer.Context,
    port: Annotated[str, typer.Argument(help="Lab switch port, e.g. s2a (node 2, half A)")],
    mtu: Annotated[int, typer.Argument(help="New MTU (switch default 9216)")],
) -> None:
    """Set a lab switch port's MTU; frames above it really drop."""
    from sparkctl_lab import chaos

    before = chaos.set_port_mtu(port, mtu)
    if _json(ctx):
        ui.print_json({"port": port, "mtu": mtu, "previous": before})
    else:
        ui.console.print(f"{ui.OK} lab-switch {port}: MTU {before} → {mtu}")


@lab_app.command("fill", epilog=example("sparkctl lab fill spark-1 --free-mib 512"))
def fill_cmd(
    ctx: typer.Context,
    node: Annotated[str, typer.Argument(help="spark-K", autocompletion=_complete_node)],
    gib: Annotated[float | None, typer.Option("--gib", help="Allocate this many GiB on /mnt/nvme.")] = None,
    free_mib: Annotated[
        int | None, typer.Option("--free-mib", help="Fill /mnt/nvme until only this many MiB are free.")
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the fill file.")] = False,
) -> None:
    """Fill a node's NVMe (a size-limited one from `lab up --nvme-gib`) to test "disk too small"."""
    from sparkctl_lab import chaos

    result = chaos.fill_nvme(node, gib=gib, free_mib=free_mib, clear=clear)
    if _json(ctx):
        ui.print_json({"node": node, **result})
    else:
        ui.console.print(
            f"{ui.OK} {node} /mnt/nvme: {result['free_bytes'] / 2**20:.0f} MiB free "
            f"of {result['size_bytes'] / 2**20:.0f} MiB"
        )


@lab_app.command(
    "exec",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    epilog=example("sparkctl lab exec spark-0 -- ip -br addr"),
)
def exec_cmd(
    machine: MachineArg,
    command: Annotated[
        list[str] | None, typer.Argument(help="Command to run inside (after --); default a shell")
    ] = None,
) -> None:
    """Run a command inside a machine (all its namespaces), without SSH. Exit code is passed through."""
    from sparkctl_lab import control, host, machines, state

    host.require_root_linux("exec")
    control.check_machine(machine)
    st = state.load()
    pid = machines.init_pid(machine, st)
    if pid is None:
        raise SparkctlError(
            f"{machine} is not running", hint=f"sparkctl lab start {machine}", exit_code=EXIT_USAGE
        )
    argv = command or ["/bin/bash", "-l"]
    env_args = [f"{k}={v}" for k, v in machines.NODE_ENV.items()]
    rc = subprocess.call(["nsenter", "-t", str(pid), "-a", "--", "env", "-i", *env_args, *argv])
    raise typer.Exit(rc)


def register(app: typer.Typer) -> None:
    app.add_typer(lab_app, name="lab", rich_help_panel=LAB)
