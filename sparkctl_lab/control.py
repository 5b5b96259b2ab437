"""Bring the lab up and down, report it, and break it on purpose (the chaos hooks).

Each machine (spark-0..3 and lab-switch) is a ``systemd-nspawn --boot`` container: real systemd as
PID 1, a copy-on-write overlay of the cached rootfs, its own network namespace wired as described
in ``topology``. Everything created is either named with the lab's prefixes or recorded in the
state file, so `down` (and the next `up` after a crash) removes exactly what the lab made.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkctl.errors import EXIT_USAGE, SparkctlError
from sparkctl_lab import host, rootfs, state
from sparkctl_lab import inventory as lab_inventory
from sparkctl_lab import topology as topo

Log = Callable[[str], None]

BOOT_TIMEOUT_S = 120.0
SSH_TIMEOUT_S = 60.0
NODE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/root",
    "TERM": os.environ.get("TERM", "dumb"),
}
FILL_FILE = ".sparkctl-lab-fill"


def _nothing(_msg: str) -> None:
    return None


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


def _stray_nspawns(machines_root: Path) -> list[int]:
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
    pid = init_pid(machine, st)
    if pid is None:
        raise SparkctlError(f"{machine} is not running", hint=f"start it: sparkctl lab start {machine}")
    return host.run(
        ["nsenter", "-t", str(pid), "-a", "--", "env", "-i", *_env_args(), *argv],
        check=check,
        timeout=timeout,
    )


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


SSHD_LAB_CONF = (
    "# sparkctl lab: root by key only, this machine's own host key.\n"
    "HostKey /etc/ssh/ssh_host_ed25519_key\n"
    "PermitRootLogin prohibit-password\n"
    "PasswordAuthentication no\n"
    "KbdInteractiveAuthentication no\n"
    "UseDNS no\n"
    "MaxStartups 100:30:200\n"
    "MaxSessions 64\n"
)


def prepare_machine(machine: str, controller_pub: str) -> None:
    """First-boot files in the overlay's upper dir. Written only when missing, so what the roles
    change later (hosts, authorized_keys of the key mesh, …) survives restarts and re-ups."""
    p = state.paths(machine)
    for d in (p.upper, p.work, p.merged):
        d.mkdir(parents=True, exist_ok=True)
    if machine != topo.SWITCH_NAME:
        p.nvme.mkdir(parents=True, exist_ok=True)
    u = p.upper
    _write_if_missing(u / "etc/hostname", f"{machine}\n")
    _write_if_missing(
        u / "etc/hosts",
        f"127.0.0.1\tlocalhost\n127.0.1.1\t{machine}\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    )
    _write_if_missing(u / "etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
    _write_if_missing(u / "etc/netplan/10-sparkctl-lab-mgmt.yaml", _mgmt_netplan(machine), 0o600)
    _write_if_missing(u / "etc/ssh/sshd_config.d/10-sparkctl-lab.conf", SSHD_LAB_CONF)
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


def host_public_key(machine: str) -> str:
    text = (state.paths(machine).upper / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
    return f"{text[0]} {text[1]}"


# --- wiring ---------------------------------------------------------------------------------


def _sysctl(ns: str, *settings: str) -> None:
    host.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", *settings], check=False)


def ensure_netns(machine: str) -> None:
    ns = topo.netns(machine)
    if ns not in host.netns_list():
        host.run(["ip", "netns", "add", ns])
    host.run(["ip", "-n", ns, "link", "set", "lo", "up"])
    # No IPv6 chatter on lab links; one interface answers ARP for its own address only (two
    # fabric halves share one L2 segment, as both PCIe halves share one switch port).
    _sysctl(
        ns,
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
        "net.ipv4.conf.all.arp_ignore=1",
        "net.ipv4.conf.all.arp_announce=2",
    )


def ensure_mgmt_bridge() -> None:
    br = topo.MGMT_BRIDGE
    if not host.link_exists(br):
        host.run(["ip", "link", "add", br, "type", "bridge"])
    host.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{br}.disable_ipv6=1"], check=False)
    cidr = f"{topo.CONTROLLER_IP}/{topo.MGMT_SUBNET.prefixlen}"
    if cidr not in host.run(["ip", "-o", "-4", "addr", "show", "dev", br]).stdout:
        host.run(["ip", "addr", "add", cidr, "dev", br])
    host.run(["ip", "link", "set", br, "up"])


def ensure_mgmt_link(machine: str) -> bool:
    """The machine's management veth (controller end on the mgmt bridge). True when (re)created."""
    ns, inner, outer = topo.netns(machine), topo.mgmt_iface(machine), topo.mgmt_veth_host(machine)
    created = False
    # Check the namespace end: the host end of a veth whose netns died vanishes asynchronously.
    if not host.link_exists(inner, ns):
        if host.link_exists(outer):
            host.run(["ip", "link", "del", outer], check=False)
        host.run(
            [
                "ip",
                "link",
                "add",
                outer,
                "address",
                topo.mgmt_host_mac(machine),
                "type",
                "veth",
                "peer",
                "name",
                inner,
                "address",
                topo.mgmt_mac(machine),
                "netns",
                ns,
            ]
        )
        host.run(["ip", "neigh", "flush", "to", str(topo.mgmt_ip(machine))], check=False)
        host.run(["ip", "-n", ns, "link", "set", inner, "up"])
        created = True
    host.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{outer}.disable_ipv6=1"], check=False)
    host.run(["ip", "link", "set", outer, "master", topo.MGMT_BRIDGE])
    if created:
        host.run(["ip", "link", "set", outer, "up"])
    return created


def ensure_switch_fabric() -> None:
    ns = topo.netns(topo.SWITCH_NAME)
    if not host.link_exists(topo.FABRIC_BRIDGE, ns):
        host.run(["ip", "-n", ns, "link", "add", topo.FABRIC_BRIDGE, "type", "bridge", "stp_state", "0"])
        host.run(["ip", "-n", ns, "link", "set", topo.FABRIC_BRIDGE, "mtu", str(topo.SWITCH_PORT_MTU), "up"])


def ensure_fabric_links(node: str) -> bool:
    """Both fabric veths of a node: netdev inside the node, switch port inside lab-switch."""
    sw, ns = topo.netns(topo.SWITCH_NAME), topo.netns(node)
    created = False
    for h in topo.HALVES:
        port = topo.switch_port(node, h)
        if host.link_exists(h.netdev, ns) and host.link_exists(port, sw):
            continue
        host.run(["ip", "-n", sw, "link", "del", port], check=False)
        host.run(["ip", "-n", ns, "link", "del", h.netdev], check=False)
        host.run(
            [
                "ip",
                "-n",
                sw,
                "link",
                "add",
                port,
                "address",
                topo.switch_port_mac(node, h),
                "type",
                "veth",
                "peer",
                "name",
                h.netdev,
                "address",
                topo.fabric_mac(node, h),
                "netns",
                ns,
            ]
        )
        # Switch ports start above the host MTU; only set on creation so `lab mtu` sticks.
        host.run(["ip", "-n", sw, "link", "set", port, "mtu", str(topo.SWITCH_PORT_MTU)])
        host.run(["ip", "-n", sw, "link", "set", port, "master", topo.FABRIC_BRIDGE, "up"])
        host.run(["ip", "-n", ns, "link", "set", h.netdev, "up"])
        created = True
    return created


def _machine_links(machine: str) -> list[str]:
    if machine == topo.SWITCH_NAME:
        return [topo.SWITCH_MGMT_IFACE]
    return [topo.MGMT_IFACE, *(h.netdev for h in topo.HALVES)]


def _power_links(machine: str, up: bool) -> None:
    """A machine's own NICs as after a power cycle: down, no addresses, default MTU (or back up)."""
    ns = topo.netns(machine)
    for link in _machine_links(machine):
        if not host.link_exists(link, ns):
            continue
        if up:
            host.run(["ip", "-n", ns, "link", "set", link, "up"])
        else:
            host.run(["ip", "-n", ns, "link", "set", link, "down"], check=False)
            host.run(["ip", "-n", ns, "addr", "flush", "dev", link], check=False)
            host.run(["ip", "-n", ns, "link", "set", link, "mtu", str(topo.LINK_DEFAULT_MTU)], check=False)


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
        # systemd-networkd (and so netplan) runs only with CAP_NET_ADMIN.
        "--capability=CAP_NET_ADMIN",
    ]
    if machine != topo.SWITCH_NAME:
        argv.append(f"--bind={p.nvme}:/mnt/nvme")
    return argv


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
        subprocess.run(
            ["setsid", "--fork", "sh", "-c", 'echo $$ > "$0"; exec "$@"', str(pidfile), *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={"PATH": NODE_ENV["PATH"], "LANG": "C.UTF-8", "SYSTEMD_LOG_COLOR": "0"},
            check=True,
        )
    if not host.wait_until(lambda: pidfile.exists() and pidfile.read_text().strip().isdigit(), 10):
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
    _power_links(machine, up=True)
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
        _power_links(machine, up=False)
    if nsp is not None and not host.wait_until(lambda: not host.pid_alive(nsp), 15):
        host.kill(nsp, signal.SIGKILL)
        host.wait_until(lambda: not host.pid_alive(nsp), 5)
    if st and machine in st.machines:
        st.machines[machine].pid = None
        st.machines[machine].pid_start = None
    merged = state.paths(machine).merged
    if host.is_mountpoint(merged) and not host.ok(["umount", str(merged)]):
        host.run(["umount", "-l", str(merged)], check=False)
    _remove_propagate_dir(machine)


def _remove_propagate_dir(machine: str) -> None:
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
    if not host.wait_until(lambda: init_pid(machine, st) is not None, 15):
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
        cfg = str(inventory_dir / lab_inventory.SSH_CONFIG_FILE)
        return host.ok(["ssh", "-F", cfg, "-o", "ConnectTimeout=2", machine, "true"])

    if not host.wait_until(port_open, timeout, 0.2) or not host.wait_until(ssh_ok, 15, 0.3):
        raise SparkctlError(
            f"{machine} is not reachable over SSH at {addr}",
            hint=f"see {state.paths(machine).console_log}, or `sparkctl lab exec {machine} -- journalctl -b`",
        )


# --- the whole lab --------------------------------------------------------------------------


@dataclass
class UpReport:
    inventory_dir: Path
    rootfs: Path
    rootfs_build_s: float | None
    started: list[str] = field(default_factory=list)
    system: dict[str, str] = field(default_factory=dict)
    inventory_changed: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _ensure_controller_files() -> str:
    lab = state.lab_dir()
    lab.mkdir(parents=True, exist_ok=True)
    os.chmod(lab, 0o700)
    key = state.controller_key()
    if not key.exists():
        host.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sparkctl-lab-controller", "-f", str(key)]
        )
    api = state.api_key_file()
    if not api.exists():
        fd = os.open(api, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    return Path(str(key) + ".pub").read_text().strip()


def _validate_nvme(nvme: dict[str, int]) -> None:
    for node, gib in nvme.items():
        try:
            topo.rank_of(node)
        except ValueError as exc:
            raise SparkctlError(str(exc), hint="use --nvme spark-K=GIB", exit_code=EXIT_USAGE) from exc
        if gib < 1:
            raise SparkctlError(
                f"NVMe size of {node} must be at least 1 GiB (got {gib})", exit_code=EXIT_USAGE
            )


def lab_inventory_for(inventory_dir: Path, st: state.LabState) -> lab_inventory.LabInventory:
    return lab_inventory.LabInventory(
        inventory_dir=inventory_dir.resolve(),
        private_key=state.controller_key(),
        api_key_file=state.api_key_file(),
        checkpoint_dir=state.checkpoint_dir(),
        host_keys={m: host_public_key(m) for m in topo.machines()},
        nvme_gib={n: (st.machines[n].nvme_gib if n in st.machines else None) for n in topo.node_names()},
    )


def up(inventory_dir: Path, nvme: dict[str, int] | None = None, log: Log = _nothing) -> UpReport:
    """Bring the lab up (idempotent): build/reuse the rootfs, wire, boot, write the inventory."""
    host.require_root_linux("up")
    with state.locked():
        return _up(inventory_dir, nvme, log)


def _up(inventory_dir: Path, nvme: dict[str, int] | None, log: Log) -> UpReport:
    host.require_tools(["systemd-nspawn", "ip", "ssh", "ssh-keygen", "nsenter", "setsid", "mount"])
    nvme = dict(nvme or {})
    _validate_nvme(nvme)
    if nvme:
        host.require_tools(["losetup", "mkfs.ext4"])
    t0 = time.monotonic()
    if not rootfs.is_built(rootfs.rootfs_path()):
        log(f"building the lab rootfs (debootstrap {rootfs.SUITE}, once) into {rootfs.rootfs_path()}")
    rootfs_dir, build_s = rootfs.ensure(rootfs.cache_dir() / "rootfs-build.log")

    st = state.load()
    if st is not None and st.rootfs != str(rootfs_dir):
        log("the rootfs changed since the lab came up: recreating the lab")
        _teardown(st, log)
        st = None
    for old in rootfs.prune(keep=rootfs_dir):
        log(f"removed an outdated rootfs cache: {old}")
    if st is None:
        if leftovers():
            log("cleaning what an earlier run left behind")
            _teardown(None, log)
        st = state.LabState(rootfs=str(rootfs_dir), inventory_dir=str(inventory_dir.resolve()))
    for node, gib in nvme.items():
        ms = st.machines.get(node)
        if ms and ms.nvme_gib != gib and nspawn_pid(node, st) is not None:
            raise SparkctlError(
                f"{node} is up with /mnt/nvme "
                f"{'unlimited' if ms.nvme_gib is None else f'{ms.nvme_gib} GiB'}, not {gib} GiB",
                hint="run `sparkctl lab down` first to change NVMe sizes",
                exit_code=EXIT_USAGE,
            )
        st.machines.setdefault(node, state.MachineState()).nvme_gib = gib
    if st.inventory_dir and Path(st.inventory_dir) != inventory_dir.resolve():
        lab_inventory.remove(Path(st.inventory_dir))
    st.inventory_dir = str(inventory_dir.resolve())

    pub = _ensure_controller_files()
    ensure_mgmt_bridge()
    report = UpReport(inventory_dir=inventory_dir, rootfs=rootfs_dir, rootfs_build_s=build_s)
    # The switch first: the nodes' fabric veths plug into its namespace.
    try:
        for m in [topo.SWITCH_NAME, *topo.node_names()]:
            if start_machine(m, st, rootfs_dir, pub):
                report.started.append(m)
                log(f"powered on {m}")
    finally:
        state.save(st)
    report.inventory_changed = lab_inventory.write(lab_inventory_for(inventory_dir, st))
    with ThreadPoolExecutor(max_workers=len(topo.machines())) as pool:
        states = dict(
            zip(topo.machines(), pool.map(lambda m: wait_booted(m, st), topo.machines()), strict=True)
        )
        list(pool.map(lambda m: wait_ssh(m, inventory_dir), topo.machines()))
    report.system = states
    report.seconds = time.monotonic() - t0
    return report


def start(machine: str, log: Log = _nothing) -> bool:
    host.require_root_linux("start")
    check_machine(machine)
    with state.locked():
        st = _require_state()
        pub = _ensure_controller_files()
        try:
            started = start_machine(machine, st, Path(st.rootfs), pub)
        finally:
            state.save(st)
    wait_booted(machine, st)
    wait_ssh(machine, Path(st.inventory_dir))
    return started


def kill(machine: str) -> bool:
    host.require_root_linux("kill")
    check_machine(machine)
    with state.locked():
        st = _require_state()
        was_on = nspawn_pid(machine, st) is not None
        stop_machine(machine, st)
        state.save(st)
    return was_on


def down(log: Log = _nothing) -> list[str]:
    """Remove everything the lab made; return what could not be removed (empty when clean)."""
    host.require_root_linux("down")
    with state.locked():
        _teardown(state.load(), log)
        return leftovers()


def _teardown(st: state.LabState | None, log: Log) -> None:
    with ThreadPoolExecutor(max_workers=len(topo.machines())) as pool:
        list(pool.map(lambda m: stop_machine(m, st), topo.machines()))
    # Anything still running inside our namespaces or from our trees (a crashed run's processes).
    machines_root = state.machines_dir()
    strays = set(_stray_nspawns(machines_root))
    for ns in _our_netns():
        strays.update(host.netns_pids(ns))
    strays.update(_lab_ssh_clients())
    for pid in strays:
        host.kill(pid, signal.SIGKILL)
    host.wait_until(lambda: not any(host.pid_alive(p) for p in strays), 10)
    for ns in _our_netns():
        host.run(["ip", "netns", "del", ns], check=False)
    for link in host.links():
        if link.startswith(topo.MGMT_VETH_PREFIX) or link == topo.MGMT_BRIDGE:
            host.run(["ip", "link", "del", link], check=False)
    for mp in host.mountpoints_under(machines_root):
        if not host.ok(["umount", str(mp)]):
            host.run(["umount", "-l", str(mp)], check=False)
    for loop in host.loop_devices_backed_by(machines_root):
        host.run(["losetup", "-d", loop], check=False)
    for m in topo.machines():
        _remove_propagate_dir(m)
    if machines_root.exists():
        host.run(["rm", "-rf", "--one-file-system", str(machines_root)], check=False)
    for f in (state.controller_key(), Path(f"{state.controller_key()}.pub"), state.api_key_file()):
        f.unlink(missing_ok=True)
    if st and st.inventory_dir:
        lab_inventory.remove(Path(st.inventory_dir))
    state.clear()
    log("lab removed")


def _our_netns() -> list[str]:
    return [ns for ns in host.netns_list() if ns.startswith(topo.NETNS_PREFIX)]


def _lab_ssh_clients() -> list[int]:
    """ssh processes (ControlPersist masters included) holding a TCP connection into the lab's
    management subnet: nothing outlives `down` that talks to a machine that no longer exists."""
    inodes: set[str] = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        cols = line.split()
        remote_hex = cols[2].split(":")[0]
        addr = socket.inet_ntoa(bytes.fromhex(remote_hex)[::-1])
        if addr in {str(topo.mgmt_ip(m)) for m in topo.machines()}:
            inodes.add(cols[9])
    if not inodes:
        return []
    found = []
    for pid in host.all_pids():
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "ssh":
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                found.append(pid)
                break
    return found


def leftovers() -> list[str]:
    """Everything of the lab that exists right now on this host (empty after a clean `down`)."""
    out: list[str] = []
    out += [f"network namespace {ns}" for ns in _our_netns()]
    out += [
        f"link {link}"
        for link in host.links()
        if link.startswith(topo.MGMT_VETH_PREFIX) or link == topo.MGMT_BRIDGE
    ]
    out += [f"mount {mp}" for mp in host.mountpoints_under(state.machines_dir())]
    out += [f"loop device {d}" for d in host.loop_devices_backed_by(state.machines_dir())]
    out += [f"process {p} (systemd-nspawn)" for p in _stray_nspawns(state.machines_dir())]
    if state.state_file().exists():
        out.append(f"state file {state.state_file()}")
    return out


def _require_state() -> state.LabState:
    st = state.load()
    if st is None:
        raise SparkctlError("the lab is not up", hint="run `sparkctl lab up` first", exit_code=EXIT_USAGE)
    return st


def check_machine(machine: str) -> None:
    if machine not in topo.machines():
        raise SparkctlError(
            f"unknown lab machine {machine!r}",
            hint=f"one of: {', '.join(topo.machines())}",
            exit_code=EXIT_USAGE,
        )


# --- status ---------------------------------------------------------------------------------


def _rss_kib(pids: Iterable[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total


def status() -> list[dict[str, Any]]:
    host.require_root_linux("status")
    st = state.load()
    rows = []
    for m in topo.machines():
        pid = init_pid(m, st)
        ns = topo.netns(m)
        row: dict[str, Any] = {
            "machine": m,
            "state": "running" if pid is not None else "stopped",
            "pid": pid,
            "mgmt_ip": str(topo.mgmt_ip(m)),
            "system": system_state(m, st) if pid is not None else "-",
            "rss_mib": round(_rss_kib(host.netns_pids(ns)) / 1024, 1) if pid is not None else None,
        }
        if m != topo.SWITCH_NAME and st and m in st.machines:
            row["nvme_gib"] = st.machines[m].nvme_gib
        rows.append(row)
    return rows


def is_up() -> bool:
    return state.load() is not None


# --- chaos --------------------------------------------------------------------------------


def set_link(node: str, up_: bool, halves: list[str] | None = None, mgmt: bool = False) -> list[str]:
    """Cut or restore a node's cable(s): fabric halves at the switch port, mgmt at the controller."""
    host.require_root_linux("link")
    _require_state()
    if node not in topo.node_names():
        raise SparkctlError(
            f"{node!r} is not a lab node",
            hint=f"one of: {', '.join(topo.node_names())}",
            exit_code=EXIT_USAGE,
        )
    touched = []
    word = "up" if up_ else "down"
    if mgmt:
        host.run(["ip", "link", "set", topo.mgmt_veth_host(node), word])
        touched.append(topo.mgmt_veth_host(node))
    if not mgmt or halves:
        for key in halves or [h.key for h in topo.HALVES]:
            port = topo.switch_port(node, topo.half(key))
            host.run(["ip", "-n", topo.netns(topo.SWITCH_NAME), "link", "set", port, word])
            touched.append(port)
    return touched


def set_port_mtu(port: str, mtu: int) -> int | None:
    """Set a lab switch port's MTU (really enforced by the kernel); return the previous one."""
    host.require_root_linux("mtu")
    _require_state()
    if port != topo.FABRIC_BRIDGE:
        try:
            topo.port_owner(port)
        except ValueError as exc:
            raise SparkctlError(str(exc), exit_code=EXIT_USAGE) from exc
    if not 68 <= mtu <= 65535:
        raise SparkctlError(f"MTU {mtu} is out of range (68-65535)", exit_code=EXIT_USAGE)
    ns = topo.netns(topo.SWITCH_NAME)
    before = host.link_mtu(port, ns)
    host.run(["ip", "-n", ns, "link", "set", port, "mtu", str(mtu)])
    return before


def fill_nvme(
    node: str, gib: float | None = None, free_mib: int | None = None, clear: bool = False
) -> dict[str, int]:
    """Fill a node's /mnt/nvme with an allocated file (or remove it). Returns bytes used/free after."""
    host.require_root_linux("fill")
    st = _require_state()
    if node not in topo.node_names():
        raise SparkctlError(
            f"{node!r} is not a lab node",
            hint=f"one of: {', '.join(topo.node_names())}",
            exit_code=EXIT_USAGE,
        )
    if sum(x is not None and x is not False for x in (gib, free_mib)) + int(clear) != 1:
        raise SparkctlError("give exactly one of --gib, --free-mib, --clear", exit_code=EXIT_USAGE)
    ms = st.machines.get(node)
    nvme = state.paths(node).nvme
    fill = nvme / FILL_FILE
    limited = bool(ms and ms.nvme_gib)
    if not clear and not limited and free_mib is not None:
        raise SparkctlError(
            f"{node}'s /mnt/nvme is a plain directory on the controller's disk; "
            "--free-mib would fill that disk",
            hint="bring the lab up with a size-limited NVMe: sparkctl lab up --nvme-gib N (or --nvme NODE=N)",
            exit_code=EXIT_USAGE,
        )
    fill.unlink(missing_ok=True)
    if not clear:
        vfs = os.statvfs(nvme)
        free = vfs.f_bavail * vfs.f_frsize
        want = int(gib * 1024**3) if gib is not None else free - int(free_mib or 0) * 1024**2
        if want < 0:
            want = 0
        if not limited and free - want < 2 * 1024**3:
            raise SparkctlError(
                f"filling {want >> 20} MiB would leave the controller's disk nearly full",
                hint="use a size-limited NVMe (lab up --nvme-gib N)",
                exit_code=EXIT_USAGE,
            )
        fd = os.open(fill, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if want:
                os.posix_fallocate(fd, 0, want)
        except OSError as exc:
            raise SparkctlError(f"could not allocate {want >> 20} MiB on {node}'s /mnt/nvme: {exc}") from exc
        finally:
            os.close(fd)
    vfs = os.statvfs(nvme)
    return {"free_bytes": vfs.f_bavail * vfs.f_frsize, "size_bytes": vfs.f_blocks * vfs.f_frsize}
