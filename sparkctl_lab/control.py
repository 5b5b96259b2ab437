"""Bring the whole lab up and down, and report it.

Each machine (spark-0..3 and lab-switch) is a ``systemd-nspawn --boot`` container: real systemd as
PID 1, a copy-on-write overlay of the cached rootfs, its own network namespace wired as described
in ``topology``. Everything created is either named with the lab's prefixes or recorded in the
state file, so `down` (and the next `up` after a crash) removes exactly what the lab made.
The parts: ``machines`` (one container), ``wiring`` (its cables), ``chaos`` (breaking it on
purpose); this module is the lifecycle of the whole lab and its status.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkctl.errors import EXIT_USAGE, SparkctlError
from sparkctl_lab import engine, host, kit, rootfs, state
from sparkctl_lab import inventory as lab_inventory
from sparkctl_lab import topology as topo
from sparkctl_lab.machines import (
    CGROUP_PARENT,
    host_public_key,
    init_pid,
    node_exec,
    nspawn_pid,
    remove_propagate_dir,
    require_state,
    set_root_password,
    start_machine,
    stop_machine,
    stray_nspawns,
    system_state,
    wait_booted,
    wait_ssh,
)
from sparkctl_lab.wiring import ensure_mgmt_bridge

Log = Callable[[str], None]


def _nothing(_msg: str) -> None:
    return None


# --- the whole lab --------------------------------------------------------------------------


@dataclass
class UpReport:
    inventory_dir: Path
    rootfs: Path
    rootfs_build_s: float | None
    started: list[str] = field(default_factory=list)
    system: dict[str, str] = field(default_factory=dict)
    inventory_changed: list[str] = field(default_factory=list)
    kit_commit: str = ""
    shape: str = topo.DEFAULT_SHAPE
    docker: dict[str, str] = field(default_factory=dict)  # spark -> docker.service state
    engine_build_s: float | None = None  # debootstrap + tar of the base engine image (None: cached)
    image_import_s: float | None = None  # docker import on the head (None: already there)
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
    # The serving API key, and the Sparks' root password (set in each booted node: set_root_password).
    for secret_file, nbytes in ((state.api_key_file(), 32), (state.root_password_file(), 18)):
        if not secret_file.exists():
            fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(nbytes) + "\n")
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


def lab_inventory_for(
    inventory_dir: Path, st: state.LabState, kit_repo: kit.KitRepo | None = None
) -> lab_inventory.LabInventory:
    kit_repo = kit_repo or kit.ensure()
    return lab_inventory.LabInventory(
        inventory_dir=inventory_dir.resolve(),
        private_key=state.controller_key(),
        api_key_file=state.api_key_file(),
        checkpoint_dir=state.checkpoint_dir(),
        host_keys={m: host_public_key(m) for m in topo.machines()},
        nvme_gib={n: (st.machines[n].nvme_gib if n in st.machines else None) for n in topo.node_names()},
        kit_url=str(kit_repo.path),
        kit_commit=kit_repo.commit,
        shape=st.shape,
    )


@dataclass
class Caches:
    """What every `lab up` boots from, built once and kept under the cache directory."""

    rootfs: Path
    rootfs_build_s: float | None  # None: it was cached
    tarball: engine.Tarball
    kit: kit.KitRepo

    @property
    def engine_build_s(self) -> float | None:
        if self.tarball.tree_build_s is None and self.tarball.tar_s is None:
            return None
        return (self.tarball.tree_build_s or 0.0) + (self.tarball.tar_s or 0.0)


def _ensure_caches(log: Log) -> Caches:
    # Every lab on this host (lab 0, lab N) boots from the same caches: one builder at a time.
    with state.locked(timeout=3600, path=rootfs.cache_dir().with_name(rootfs.cache_dir().name + ".lock")):
        return _ensure_caches_unlocked(log)


def _ensure_caches_unlocked(log: Log) -> Caches:
    if not rootfs.is_built(rootfs.rootfs_path()):
        log(f"building the lab rootfs (debootstrap {rootfs.SUITE}, once) into {rootfs.rootfs_path()}")
    rootfs_dir, build_s = rootfs.ensure(rootfs.cache_dir() / "rootfs-build.log")
    if not (engine.tree_path() / ".sparkctl-engine-complete").is_file():
        log(f"building the lab engine image (debootstrap {rootfs.SUITE}, once) into {engine.tree_path()}")
    tarball = engine.ensure_tarball(rootfs.cache_dir() / "engine-build.log")
    return Caches(rootfs_dir, build_s, tarball, kit.ensure())


def build(log: Log = _nothing) -> Caches:
    """Build (or find) the lab's caches, the rootfs, the base engine image and the synthetic kit,
    starting nothing: a later `lab up` boots at once. Under the lab lock, so a `lab up` at the same
    time waits for it instead of building beside it."""
    host.require_root_linux("build")
    with state.locked():
        return _ensure_caches(log)


def up(
    inventory_dir: Path, nvme: dict[str, int] | None = None, log: Log = _nothing, shape: str | None = None
) -> UpReport:
    """Bring the lab up (idempotent): build/reuse the rootfs, wire, boot, write the inventory.
    `shape` (topology.SHAPES): the lab's wiring; None keeps the shape the lab is up in (switch4
    when it is down). A lab up in another shape is taken down and brought up in this one."""
    host.require_root_linux("up")
    try:
        wanted = None if shape is None else topo.get_shape(shape).name
    except ValueError as exc:
        raise SparkctlError(str(exc), hint="sparkctl lab up --shape " + "|".join(topo.SHAPES),
                            exit_code=EXIT_USAGE) from exc
    with state.locked():
        return _up(inventory_dir, nvme, log, wanted)


def recorded_shape() -> str:
    """The shape the lab is up in (its state file), else the default."""
    st = state.load()
    return st.shape if st is not None else topo.DEFAULT_SHAPE


def _up(inventory_dir: Path, nvme: dict[str, int] | None, log: Log, shape: str | None = None) -> UpReport:
    host.require_tools(["systemd-nspawn", "ip", "ssh", "ssh-keygen", "nsenter", "setsid", "mount"])
    nvme = dict(nvme or {})
    if nvme:
        host.require_tools(["losetup", "mkfs.ext4"])
    t0 = time.monotonic()
    caches = _ensure_caches(log)
    rootfs_dir, kit_repo = caches.rootfs, caches.kit

    st = state.load()  # makes the recorded shape topology's, for the teardown below
    shape = shape or (st.shape if st is not None else topo.DEFAULT_SHAPE)
    if st is not None and st.shape != shape:
        log(f"the lab is up as {st.shape}: recreating it as {shape}")
        _teardown(st, log)
        st = None
    if st is not None and st.rootfs != str(rootfs_dir):
        log("the rootfs changed since the lab came up: recreating the lab")
        _teardown(st, log)
        st = None
    topo.use_shape(shape)
    _validate_nvme(nvme)
    for old in rootfs.prune(keep=rootfs_dir):
        log(f"removed an outdated rootfs cache: {old}")
    if st is None:
        if leftovers():
            log("cleaning what an earlier run left behind")
            _teardown(None, log)
        st = state.LabState(rootfs=str(rootfs_dir), inventory_dir=str(inventory_dir.resolve()), shape=shape)
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
    # An `up` for another inventory directory (another clone's tests, `-i DIR`) writes that one too,
    # and never takes away the one a running session uses (it once did: that session's next test
    # found no inventory); `down` removes them all.
    st.adopt_inventory(inventory_dir)

    pub = _ensure_controller_files()
    ensure_mgmt_bridge()
    report = UpReport(inventory_dir=inventory_dir, rootfs=rootfs_dir, rootfs_build_s=caches.rootfs_build_s,
                      kit_commit=kit_repo.commit, shape=shape)
    report.engine_build_s = caches.engine_build_s
    host.ensure_inotify_instances(sum(nspawn_pid(m, st) is None for m in topo.machines()), log)
    # The switch first: the nodes' fabric veths plug into its namespace.
    try:
        for m in [topo.SWITCH_NAME, *topo.node_names()]:
            if start_machine(m, st, rootfs_dir, pub):
                report.started.append(m)
                log(f"powered on {m}")
    finally:
        state.save(st)
    report.inventory_changed = lab_inventory.write(lab_inventory_for(inventory_dir, st, kit_repo))
    with ThreadPoolExecutor(max_workers=len(topo.machines())) as pool:
        states = dict(
            zip(topo.machines(), pool.map(lambda m: wait_booted(m, st), topo.machines()), strict=True)
        )
        list(pool.map(lambda n: set_root_password(n, st), topo.node_names()))
        list(pool.map(lambda m: wait_ssh(m, inventory_dir), topo.machines()))
        nodes = topo.node_names()
        list(pool.map(lambda n: engine.wait_engine(n, st), nodes))
    report.system = states
    report.docker = {n: docker_state(n, st) for n in nodes}
    # The base engine image goes to the head only; workers get images through `sparkctl stage image`.
    report.image_import_s = engine.import_image(nodes[0], st, caches.tarball)
    if report.image_import_s is not None:
        log(f"imported {engine.IMAGE} on {nodes[0]} in {report.image_import_s:.1f}s")
    report.seconds = time.monotonic() - t0
    return report


def docker_state(node: str, st: state.LabState) -> str:
    """`systemctl is-active docker.service` inside a Spark."""
    return node_exec(node, ["systemctl", "is-active", "docker.service"], st).stdout.strip() or "unknown"


def start(machine: str, log: Log = _nothing) -> bool:
    host.require_root_linux("start")
    check_machine(machine)
    with state.locked():
        st = require_state()
        pub = _ensure_controller_files()
        try:
            started = start_machine(machine, st, Path(st.rootfs), pub)
        finally:
            state.save(st)
    wait_booted(machine, st)
    if machine != topo.SWITCH_NAME:
        set_root_password(machine, st)
    wait_ssh(machine, Path(st.inventory_dir))
    return started


def kill(machine: str) -> bool:
    host.require_root_linux("kill")
    check_machine(machine)
    with state.locked():
        st = require_state()
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



# How long `lab down` keeps killing what is left in the lab's cgroups and removing them.
CGROUP_REMOVE_S = 60.0


def _cgroups_removed() -> bool:
    for cgroup in host.cgroup_dirs(CGROUP_PARENT):
        for procs in cgroup.rglob("cgroup.procs"):
            try:
                pids = [int(p) for p in procs.read_text().split()]
            except (OSError, ValueError):
                continue
            for pid in pids:
                host.kill(pid, signal.SIGKILL)
        host.remove_cgroup_tree(cgroup)
    return not host.cgroup_dirs(CGROUP_PARENT)


def _teardown(st: state.LabState | None, log: Log) -> None:
    # Every machine any shape has: a lab whose state file is gone may have been a larger one.
    everything = topo.every_machine()
    with ThreadPoolExecutor(max_workers=len(everything)) as pool:
        list(pool.map(lambda m: stop_machine(m, st), everything))
    # Anything still running inside our namespaces or from our trees (a crashed run's processes).
    machines_root = state.machines_dir()
    strays = set(stray_nspawns(machines_root))
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
    # A cgroup goes only once its last process has exited: on a loaded machine the killed nodes'
    # processes may take a while, so what is left is killed and the removal retried (a poll).
    host.wait_until(_cgroups_removed, CGROUP_REMOVE_S, 0.5)
    for m in everything:
        remove_propagate_dir(m)
    if machines_root.exists():
        host.run(["rm", "-rf", "--one-file-system", str(machines_root)], check=False)
    for f in (state.controller_key(), Path(f"{state.controller_key()}.pub"), state.api_key_file(),
              state.root_password_file()):
        f.unlink(missing_ok=True)
    for inv in st.inventories() if st else []:
        lab_inventory.remove(inv)
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
        if addr in {str(topo.mgmt_ip(m, topo.LARGEST)) for m in topo.every_machine()}:
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
    out += [f"process {p} (systemd-nspawn)" for p in stray_nspawns(state.machines_dir())]
    out += [f"cgroup {d}" for d in host.cgroup_dirs(CGROUP_PARENT)]
    if state.state_file().exists():
        out.append(f"state file {state.state_file()}")
    return out


def check_machine(machine: str) -> None:
    state.load()  # the recorded shape's machines
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


