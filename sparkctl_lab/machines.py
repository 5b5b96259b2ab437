"""One lab machine: finding its processes, its identity and files, its NVMe, power on and off,
waiting for it to boot and answer SSH.

Each machine (spark-0..3 and lab-switch) is a ``systemd-nspawn --boot`` container: real systemd as
PID 1, a copy-on-write overlay of the cached rootfs, started inside its own network namespace
(wired by ``wiring``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from sparkctl.errors import EXIT_USAGE, SparkctlError
from sparkctl_lab import host, rootfs, state, zipcache
from sparkctl_lab import inventory as lab_inventory
from sparkctl_lab import topology as topo
from sparkctl_lab.wiring import (
    ensure_fabric_links,
    ensure_mgmt_link,
    ensure_netns,
    ensure_switch_fabric,
    power_links,
)

BOOT_TIMEOUT_S = 120.0
# Polls, each returning as soon as its event happens: how long systemd-nspawn may take to write its
# PID and to fork the machine's PID 1. 10 and 15 s ran out on a loaded 2-core machine (load ~25:
# lab tests, busy loops and other test sessions at once) while the boot went on fine.
START_TIMEOUT_S = 90.0
SSH_TIMEOUT_S = 60.0
# After the port opens: each login attempt may take this long (a loaded node's banner), and
# attempts go on for the window (was 2 s within 15 s: too short at load ~12).
SSH_LOGIN_TIMEOUT_S = 15.0
SSH_LOGIN_WINDOW_S = 60.0
NODE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/root",
    "TERM": os.environ.get("TERM", "dumb"),
}


# --- looking at machines --------------------------------------------------------------------


def _is_our_nspawn(pid: int, machine: str) -> bool:
    argv = host.cmdline(pid)
    return bool(argv) and Path(argv[0]).name == "systemd-nspawn" and f"--machine={machine}" in argv


def nspawn_pid(machine: str, st: state.LabState | None) -> int | None:
    """The running systemd-nspawn of `machine`, if the recorded one is alive and still ours."""
    ms = st.machines.get(machine) if st else None
    if not (ms and ms.pid and host.pid_alive(ms.pid) and _is_our_nspawn(ms.pid, machine)):
        return None
    if ms.pid_start is not None and host.pid_start_time(ms.pid) != ms.pid_start:
        return None
    return ms.pid


def init_pid(machine: str, st: state.LabState | None) -> int | None:
    """Host PID of the container's PID 1 (systemd), or None when the machine is off."""
    parent = nspawn_pid(machine, st)
    if parent is None:
        return None
    for child in host.children(parent):
        if host.ns_pid_is_one(child) and host.pid_alive(child):
            return child
    return None


def stray_nspawns(machines_root: Path) -> list[int]:
    """systemd-nspawn processes running a tree under our machines dir (e.g. after a crashed run)."""
    needle = f"--directory={machines_root}/"
    return [
        p
        for p in host.all_pids()
        if (argv := host.cmdline(p))
        and Path(argv[0]).name == "systemd-nspawn"
        and any(a.startswith(needle) for a in argv)
    ]


def node_exec(
    machine: str, argv: list[str], st: state.LabState | None, *, timeout: float = 30, check: bool = False
) -> subprocess.CompletedProcess[str]:
    return host.run(node_argv(machine, argv, st), check=check, timeout=timeout)


def node_argv(machine: str, argv: list[str], st: state.LabState | None) -> list[str]:
    """The host argv that runs `argv` inside the machine (all its namespaces, a clean environment)."""
    pid = init_pid(machine, st)
    if pid is None:
        raise SparkctlError(f"{machine} is not running", hint=f"start it: sparkctl lab start {machine}")
    return ["nsenter", "-t", str(pid), "-a", "--", "env", "-i", *_env_args(), *argv]


def _env_args() -> list[str]:
    return [f"{k}={v}" for k, v in NODE_ENV.items()]


# --- identity and files of one machine --------------------------------------------------------


def _write_if_missing(path: Path, content: str, mode: int = 0o644) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    os.chmod(path, mode)


def _mgmt_netplan(machine: str) -> str:
    iface = topo.mgmt_iface(machine)
    return (
        "# Management address of this lab machine (written once by `sparkctl lab up`).\n"
        "network:\n"
        "  version: 2\n"
        "  renderer: networkd\n"
        "  ethernets:\n"
        f"    {iface}:\n"
        f"      addresses: [{topo.mgmt_ip(machine)}/{topo.MGMT_SUBNET.prefixlen}]\n"
        "      dhcp4: false\n"
        "      dhcp6: false\n"
        "      link-local: []\n"
    )


DOCKER_UNITS = ("docker.service", "docker.socket", "containerd.service")
# The machines share the controller's cgroup hierarchies (nspawn makes no cgroup namespace on a
# v1 host), so each engine puts its containers below its own parent, which `down` removes.
CGROUP_PARENT = f"sparkctl-lab{topo.SUFFIX}"


def machine_cgroups(machine: str) -> list[Path]:
    """This machine's own cgroup in each hierarchy its systemd manages, created here. nspawn
    splits the cgroup it starts in into ``payload`` and ``supervisor``: started from one shared
    cgroup, every machine's systemd would keep its units in the same ``payload/system.slice/…``,
    and one node stopping a unit removes the cgroup another node is starting the same unit in
    (status 219/CGROUP, seen when all four loaded their firewall at once)."""
    dirs = [root / CGROUP_PARENT / machine for root in host.systemd_cgroup_roots()]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return dirs


def docker_daemon_json(machine: str) -> str:
    conf = {**rootfs.DOCKER_DAEMON_JSON, "cgroup-parent": f"/{CGROUP_PARENT}/{machine}"}
    return json.dumps(conf, indent=2) + "\n"

SSHD_LAB_CONF = (
    "# sparkctl lab: root by key, or by the lab's password (a fresh box's first contact, as\n"
    "# `sparkctl bootstrap` meets it); this machine's own host key.\n"
    "HostKey /etc/ssh/ssh_host_ed25519_key\n"
    "PermitRootLogin yes\n"
    "PasswordAuthentication yes\n"
    "KbdInteractiveAuthentication no\n"
    "UseDNS no\n"
    "MaxStartups 100:30:200\n"
    "MaxSessions 64\n"
)


# The lab's bytecode cache for zip imports (sparkctl_lab/zipcache.py: why), installed by a .pth line.
ZIPCACHE_MODULE = "usr/lib/python3/dist-packages/sparkctl_lab_zipcache.py"
ZIPCACHE_PTH = "usr/lib/python3/dist-packages/sparkctl-lab-zipcache.pth"


def install_zipcache(upper: Path) -> None:
    """Put the zip-import cache in a machine's overlay (rewritten on every power on: it is the
    lab's own file, no role touches it)."""
    module = upper / ZIPCACHE_MODULE
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_bytes(Path(zipcache.__file__).read_bytes())
    (upper / ZIPCACHE_PTH).write_text("import sparkctl_lab_zipcache; sparkctl_lab_zipcache.install()\n")


def prepare_machine(machine: str, controller_pub: str) -> None:
    """First-boot files in the overlay's upper dir. Written only when missing, so what the roles
    change later (hosts, authorized_keys of the key mesh, …) survives restarts and re-ups."""
    p = state.paths(machine)
    for d in (p.upper, p.work, p.merged):
        d.mkdir(parents=True, exist_ok=True)
    u = p.upper
    if machine != topo.SWITCH_NAME:
        p.nvme.mkdir(parents=True, exist_ok=True)
        p.docker.mkdir(mode=0o710, parents=True, exist_ok=True)
        daemon_json = u / "etc/docker/daemon.json"
        daemon_json.parent.mkdir(parents=True, exist_ok=True)
        daemon_json.write_text(docker_daemon_json(machine))
    else:
        # The rootfs enables the Docker engine for the Sparks; the switch has no use for one.
        for unit in DOCKER_UNITS:
            link = u / "etc/systemd/system" / unit
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to("/dev/null")
    install_zipcache(u)
    _write_if_missing(u / "etc/hostname", f"{machine}\n")
    _write_if_missing(
        u / "etc/hosts",
        f"127.0.0.1\tlocalhost\n127.0.1.1\t{machine}\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    )
    _write_if_missing(u / "etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
    _write_if_missing(u / "etc/netplan/10-sparkctl-lab-mgmt.yaml", _mgmt_netplan(machine), 0o600)
    # The lab's own file (no role touches it): rewritten at every power on, so a machine kept across
    # a change of it gets the new one.
    sshd_conf = u / SSHD_LAB_CONF_PATH.lstrip("/")
    sshd_conf.parent.mkdir(parents=True, exist_ok=True)
    sshd_conf.write_text(SSHD_LAB_CONF)
    key = u / "etc/ssh/ssh_host_ed25519_key"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        host.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{machine}", "-f", str(key)])
    ssh_dir = u / "root/.ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(u / "root", 0o700)
    os.chmod(ssh_dir, 0o700)
    auth = ssh_dir / "authorized_keys"
    existing = auth.read_text() if auth.exists() else ""
    if controller_pub.strip() not in existing:
        auth.write_text(
            existing
            + ("" if not existing or existing.endswith("\n") else "\n")
            + controller_pub.strip()
            + "\n"
        )
    os.chmod(auth, 0o600)


SSHD_LAB_CONF_PATH = "/etc/ssh/sshd_config.d/10-sparkctl-lab.conf"
# Puts stdin in place of the lab's sshd configuration and reloads sshd, unless it is already that
# (a machine booted by an older lab keeps running with the configuration it booted with).
_SSHD_CONF_SYNC = (f'f={SSHD_LAB_CONF_PATH}; t=$(mktemp "$f.XXXXXX"); cat > "$t"; '
                   'if cmp -s "$t" "$f"; then rm -f "$t"; '
                   'else chmod 644 "$t" && mv "$t" "$f" && systemctl reload-or-restart ssh.service; fi')


def set_root_password(machine: str, st: state.LabState) -> None:
    """root's password in a booted Spark: the lab's (``state.root_password_file``), through
    ``chpasswd`` on stdin, so it lands in the machine's overlay and never in the cached rootfs or in
    an argv; and sshd's configuration that takes it (``SSHD_LAB_CONF``)."""
    password = state.root_password_file().read_text().strip()
    host.run(node_argv(machine, ["chpasswd"], st), input=f"root:{password}\n", timeout=60)
    host.run(node_argv(machine, ["sh", "-c", _SSHD_CONF_SYNC], st), input=SSHD_LAB_CONF, timeout=60)


def host_public_key(machine: str) -> str:
    text = (state.paths(machine).upper / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
    return f"{text[0]} {text[1]}"


# --- NVMe ---------------------------------------------------------------------------------


def ensure_nvme(node: str, gib: int | None, ms: state.MachineState) -> None:
    """/mnt/nvme of a node: a plain directory, or a size-limited ext4 on a loop device."""
    p = state.paths(node)
    p.nvme.mkdir(parents=True, exist_ok=True)
    if gib is None:
        return
    if host.is_mountpoint(p.nvme):
        return
    if not p.nvme_image.exists():
        with open(p.nvme_image, "wb") as f:
            f.truncate(gib * 1024**3)
        host.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-L", f"nvme-{node}", str(p.nvme_image)], timeout=300)
    loop = host.run(["losetup", "--find", "--show", str(p.nvme_image)]).stdout.strip()
    ms.loop = loop
    host.run(["mount", loop, str(p.nvme)])


# --- one machine: power on / off --------------------------------------------------------------


def _nspawn_argv(machine: str, rootfs_dir: Path) -> list[str]:
    p = state.paths(machine)
    argv = [
        # Start nspawn already inside the machine's netns, so the sysfs it mounts for the
        # container is that netns's: with --network-namespace-path alone, the container's
        # /sys/class/net listed the controller's interfaces (read by Ansible facts and checks).
        "nsenter",
        f"--net=/run/netns/{topo.netns(machine)}",
        "--",
        "systemd-nspawn",
        "--boot",
        f"--machine={machine}",
        f"--directory={p.merged}",
        # The controller has no systemd bus to register with (and may not run systemd at all).
        "--register=no",
        "--keep-unit",
        "--settings=no",
        "--link-journal=no",
        "--resolv-conf=off",
        "--console=read-only",
        f"--network-namespace-path=/run/netns/{topo.netns(machine)}",
    ]
    if machine == topo.SWITCH_NAME:
        # systemd-networkd (and so netplan) runs only with CAP_NET_ADMIN.
        return [*argv, "--capability=CAP_NET_ADMIN"]
    return [
        *argv,
        # A Spark runs a real Docker engine: it mounts, makes namespaces and cgroups, loads
        # seccomp and BPF programs (runc's device filter) and uses keyrings. The cost: a node
        # may do what root on the controller may (nspawn still mounts /proc/sys read-only).
        "--capability=all",
        "--system-call-filter=@keyring bpf",
        f"--bind={p.nvme}:/mnt/nvme",
        f"--bind={p.docker}:{rootfs.DOCKER_DATA_ROOT}",
    ]


def _mount_overlay(machine: str, rootfs_dir: Path) -> None:
    p = state.paths(machine)
    if host.is_mountpoint(p.merged):
        return
    opts = f"lowerdir={rootfs_dir},upperdir={p.upper},workdir={p.work}"
    host.run(["mount", "-t", "overlay", f"sparklab-{machine}", "-o", opts, str(p.merged)])


def _spawn(machine: str, rootfs_dir: Path) -> tuple[int, int | None]:
    """Start systemd-nspawn detached (own session, reparented to init); return (pid, start time)."""
    p = state.paths(machine)
    pidfile = state.run_dir() / f"{machine}.pid"
    pidfile.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    pidfile.unlink(missing_ok=True)
    argv = _nspawn_argv(machine, rootfs_dir)
    with open(p.console_log, "ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} power on: {' '.join(argv)}\n".encode())
        log.flush()
        cgroups = [str(d / "cgroup.procs") for d in machine_cgroups(machine)]
        # The detached shell joins the machine's own cgroups, writes its pid, then becomes nspawn.
        script = ('pidfile=$1; n=$2; shift 2; while [ "$n" -gt 0 ]; do echo $$ > "$1"; shift; '
                  'n=$((n - 1)); done; echo $$ > "$pidfile"; exec "$@"')
        subprocess.run(
            ["setsid", "--fork", "sh", "-c", script, "sh", str(pidfile), str(len(cgroups)), *cgroups, *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={"PATH": NODE_ENV["PATH"], "LANG": "C.UTF-8", "SYSTEMD_LOG_COLOR": "0"},
            check=True,
        )
    started = lambda: pidfile.exists() and pidfile.read_text().strip().isdigit()  # noqa: E731
    if not host.wait_until(started, START_TIMEOUT_S):
        raise SparkctlError(f"{machine}: systemd-nspawn did not start", hint=f"see {p.console_log}")
    pid = int(pidfile.read_text().strip())
    pidfile.unlink(missing_ok=True)
    return pid, host.pid_start_time(pid)


def start_machine(machine: str, st: state.LabState, rootfs_dir: Path, controller_pub: str) -> bool:
    """Power a machine on (wiring, files, overlay, nspawn). False when it was already running."""
    if nspawn_pid(machine, st) is not None:
        return False
    stop_machine(machine, st)  # whatever a crashed run left of it
    ensure_netns(machine)
    ensure_mgmt_link(machine)
    if machine == topo.SWITCH_NAME:
        ensure_switch_fabric()
    else:
        ensure_fabric_links(machine)
    prepare_machine(machine, controller_pub)
    ms = st.machines.setdefault(machine, state.MachineState())
    if machine != topo.SWITCH_NAME:
        ensure_nvme(machine, ms.nvme_gib, ms)
    power_links(machine, up=True)
    _mount_overlay(machine, rootfs_dir)
    ms.pid, ms.pid_start = _spawn(machine, rootfs_dir)
    return True


def stop_machine(machine: str, st: state.LabState | None) -> None:
    """Hard power-off: SIGKILL the container's init (the kernel kills its whole PID namespace),
    drop its NICs' state, wait for nspawn to exit, unmount the overlay. /mnt/nvme is kept."""
    init = init_pid(machine, st)
    nsp = nspawn_pid(machine, st)
    if init is not None:
        host.kill(init, signal.SIGKILL)
    if topo.netns(machine) in host.netns_list():
        power_links(machine, up=False)
    if nsp is not None and not host.wait_until(lambda: not host.pid_alive(nsp), 15):
        host.kill(nsp, signal.SIGKILL)
        host.wait_until(lambda: not host.pid_alive(nsp), 5)
    if st and machine in st.machines:
        st.machines[machine].pid = None
        st.machines[machine].pid_start = None
    merged = state.paths(machine).merged
    if host.is_mountpoint(merged) and not host.ok(["umount", str(merged)]):
        host.run(["umount", "-l", str(merged)], check=False)
    remove_propagate_dir(machine)


def remove_propagate_dir(machine: str) -> None:
    # nspawn leaves this behind when the host's /run is not a tmpfs.
    d = Path("/run/systemd/nspawn/propagate") / machine
    if d.is_dir():
        for f in d.iterdir():
            f.unlink(missing_ok=True)
        d.rmdir()


# --- waiting for a machine ------------------------------------------------------------------


def system_state(machine: str, st: state.LabState | None, wait: bool = False) -> str:
    """`systemctl is-system-running` inside the machine ("offline" when it is off)."""
    if init_pid(machine, st) is None:
        return "offline"
    argv = ["systemctl", "is-system-running", *(["--wait"] if wait else [])]
    try:
        proc = node_exec(machine, argv, st, timeout=BOOT_TIMEOUT_S if wait else 10)
    except SparkctlError:
        return "unknown"
    return proc.stdout.strip() or "unknown"


def wait_booted(machine: str, st: state.LabState) -> str:
    if not host.wait_until(lambda: init_pid(machine, st) is not None, START_TIMEOUT_S):
        raise SparkctlError(
            f"{machine} did not boot (no init process)", hint=f"see {state.paths(machine).console_log}"
        )
    # systemd needs a moment before its private socket answers.
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    result = "unknown"
    while time.monotonic() < deadline:
        result = system_state(machine, st, wait=True)
        if result in ("running", "degraded", "maintenance", "stopping"):
            break
        time.sleep(0.3)
    return result


def ssh_argv(inventory_dir: Path, machine: str, *command: str) -> list[str]:
    return ["ssh", "-F", str(inventory_dir / lab_inventory.SSH_CONFIG_FILE), machine, *command]


def wait_ssh(machine: str, inventory_dir: Path, timeout: float = SSH_TIMEOUT_S) -> None:
    addr = str(topo.mgmt_ip(machine))

    def port_open() -> bool:
        try:
            with socket.create_connection((addr, 22), timeout=1):
                return True
        except OSError:
            return False

    def ssh_ok() -> bool:
        # The banner of a node that just booted, on a busy controller, can take several seconds.
        cfg = str(inventory_dir / lab_inventory.SSH_CONFIG_FILE)
        return host.ok(["ssh", "-F", cfg, "-o", f"ConnectTimeout={SSH_LOGIN_TIMEOUT_S:.0f}", machine, "true"])

    if not host.wait_until(port_open, timeout, 0.2) or not host.wait_until(ssh_ok, SSH_LOGIN_WINDOW_S, 0.5):
        raise SparkctlError(
            f"{machine} is not reachable over SSH at {addr}",
            hint=f"see {state.paths(machine).console_log}, or `sparkctl lab exec {machine} -- journalctl -b`",
        )


def require_state() -> state.LabState:
    st = state.load()
    if st is None:
        raise SparkctlError("the lab is not up", hint="run `sparkctl lab up` first", exit_code=EXIT_USAGE)
    return st
