"""Commands on the controller host (root): a thin, error-reporting wrapper over subprocess and /proc."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from sparkctl.errors import EXIT_USAGE, SparkctlError

# apt packages the controller needs for the lab (kept here once; the README and CI list these).
HOST_APT_PACKAGES = (
    "systemd-container",
    "debootstrap",
    "openssh-client",
    "iproute2",
    "e2fsprogs",
    "util-linux",
)

# executable -> apt package that provides it
_TOOLS = {
    "systemd-nspawn": "systemd-container",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "nsenter": "util-linux",
    "losetup": "util-linux",
    "mount": "mount",
    "mkfs.ext4": "e2fsprogs",
}


def require_root_linux(action: str) -> None:
    """The lab builds namespaces, bridges and mounts: Linux and root only (exit 2 otherwise)."""
    if platform.system() != "Linux":
        raise SparkctlError(
            f"`sparkctl lab {action}` needs Linux (this is {platform.system()})",
            hint="run the lab on a Linux machine or VM (Debian 12 is tested)",
            exit_code=EXIT_USAGE,
        )
    if os.geteuid() != 0:
        raise SparkctlError(
            f"`sparkctl lab {action}` needs root (it creates network namespaces, bridges and mounts)",
            hint=f"run it as root, e.g. `sudo sparkctl lab {action}`",
            exit_code=EXIT_USAGE,
        )


def require_tools(names: Sequence[str]) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        pkgs = sorted({_TOOLS.get(n, n) for n in missing})
        raise SparkctlError(
            f"missing tools for the lab: {', '.join(missing)}",
            hint=f"install them: apt-get install -y {' '.join(pkgs)}",
            exit_code=EXIT_USAGE,
        )


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float | None = 120,
) -> subprocess.CompletedProcess[str]:
    """Run a command, capture its output; on failure raise SparkctlError naming the command."""
    try:
        proc = subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise SparkctlError(f"command not found: {argv[0]}", hint="install the lab's host packages") from exc
    except subprocess.TimeoutExpired as exc:
        raise SparkctlError(f"command timed out after {timeout}s: {' '.join(argv)}") from exc
    if check and proc.returncode != 0:
        raise SparkctlError(
            f"command failed (exit {proc.returncode}): {' '.join(argv)}",
            details=[line for line in (proc.stderr or proc.stdout).strip().splitlines()[-8:] if line],
        )
    return proc


def ok(argv: Sequence[str]) -> bool:
    """True when the command exits 0 (output discarded)."""
    return run(argv, check=False).returncode == 0


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# --- processes -------------------------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def pid_start_time(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot (guards against PID reuse)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [p.decode(errors="replace") for p in raw.split(b"\0") if p]


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
            out.extend(int(c) for c in text.split())
    except OSError:
        pass
    return out


def ns_pid_is_one(pid: int) -> bool:
    """True when `pid` is PID 1 of its own (nested) PID namespace: a container's init."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                parts = line.split()[1:]
                return len(parts) >= 2 and parts[-1] == "1"
    except OSError:
        pass
    return False


def kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


# --- mounts and loop devices ------------------------------------------------------------------


def mountpoints_under(root: Path) -> list[Path]:
    """Mount points at or below `root` in this mount namespace, deepest first."""
    found: list[Path] = []
    prefix = str(root.resolve()) if root.exists() else str(root)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mp = line.split()[4].replace("\\040", " ")
        if mp == prefix or mp.startswith(prefix.rstrip("/") + "/"):
            found.append(Path(mp))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def is_mountpoint(path: Path) -> bool:
    return path in mountpoints_under(path) if path.exists() else False


def loop_devices_backed_by(root: Path) -> list[str]:
    """Loop devices whose backing file lies under `root`."""
    out: list[str] = []
    prefix = str(root.resolve()) if root.exists() else str(root)
    base = Path("/sys/block")
    if not base.is_dir():
        return out
    for dev in sorted(base.glob("loop*")):
        backing = dev / "loop" / "backing_file"
        try:
            path = backing.read_text().strip()
        except OSError:
            continue
        if path.startswith(prefix.rstrip("/") + "/") or path.removesuffix(" (deleted)").startswith(prefix):
            out.append(f"/dev/{dev.name}")
    return out


# --- cgroups ---------------------------------------------------------------------------------


def _cgroup_mounts() -> list[tuple[Path, str, list[str]]]:
    """(mount point, file system type, super options) of every cgroup hierarchy mounted here."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        if " - " not in line:
            continue
        fields = line.split()
        fstype, opts = fields[fields.index("-") + 1], fields[-1].split(",")
        if fstype in ("cgroup", "cgroup2"):
            out.append((Path(fields[4]), fstype, opts))
    return out


def cgroup_v1_roots() -> list[Path]:
    """Mount points of this host's cgroup v1 hierarchies (empty on a cgroup2-only host)."""
    return sorted({mp for mp, fstype, _ in _cgroup_mounts() if fstype == "cgroup"})


def systemd_cgroup_roots() -> list[Path]:
    """The hierarchies a booted systemd keeps its units in: cgroup2 (``unified`` on a hybrid host)
    and the v1 ``name=systemd`` one. Each machine must own a subtree of these (see machines.py)."""
    return sorted({mp for mp, fstype, opts in _cgroup_mounts()
                   if fstype == "cgroup2" or "name=systemd" in opts})


def cgroup_dirs(name: str) -> list[Path]:
    """`name` under every hierarchy (v1 and cgroup2), where it exists."""
    roots = {mp for mp, _, _ in _cgroup_mounts()}
    return [d for root in sorted(roots) if (d := root / name).is_dir()]


def remove_cgroup_tree(top: Path) -> None:
    """rmdir a cgroup and every cgroup below it, deepest first (each must hold no process)."""
    for dirpath, _dirs, _files in os.walk(top, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)


# --- network namespaces and links -----------------------------------------------------------


def netns_list() -> list[str]:
    try:
        return sorted(os.listdir("/run/netns"))
    except OSError:
        return []


def netns_pids(ns: str) -> list[int]:
    proc = run(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()] if proc.returncode == 0 else []


def link_exists(name: str, ns: str | None = None) -> bool:
    argv = ["ip", *(["-n", ns] if ns else []), "link", "show", "dev", name]
    return ok(argv)


def links(ns: str | None = None) -> list[str]:
    argv = ["ip", *(["-n", ns] if ns else []), "-o", "link", "show"]
    proc = run(argv, check=False)
    names = []
    for line in proc.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def link_mtu(name: str, ns: str | None = None) -> int | None:
    argv = ["ip", *(["-n", ns] if ns else []), "-o", "link", "show", "dev", name]
    proc = run(argv, check=False)
    if proc.returncode != 0:
        return None
    words = proc.stdout.split()
    return int(words[words.index("mtu") + 1]) if "mtu" in words else None


# Every lab machine is a systemd (and Docker) running as the host's root: its systemd, journald,
# logind, dbus, containerd and dockerd hold 8-9 inotify instances, all counted against root's
# fs.inotify.max_user_instances (Debian's default 128). Three labs side by side are 15 machines,
# ~125 instances: one more machine and a node's systemd cannot start ("Failed to create control
# group inotify object: Too many open files"), or a service restarting later fails the same way.
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_PER_MACHINE = 16  # about twice what one was seen to hold
INOTIFY_HOST_SHARE = 128  # the controller's own processes, as the default leaves them


def nspawn_machines() -> int:
    """How many systemd-nspawn machines run on this host now (every lab, every instance)."""
    argvs = (cmdline(pid) for pid in all_pids())
    return sum(1 for argv in argvs if argv and Path(argv[0]).name == "systemd-nspawn")


def ensure_inotify_instances(new_machines: int, log: Callable[[str], None]) -> None:
    """Raise root's inotify instance limit to what the machines already running here plus
    ``new_machines`` need, saying so; refuse, naming the setting, when it cannot be raised."""
    if new_machines <= 0:
        return
    try:
        limit = int(INOTIFY_INSTANCES.read_text())
    except (OSError, ValueError):
        return  # no such limit on this kernel
    need = (nspawn_machines() + new_machines) * INOTIFY_PER_MACHINE + INOTIFY_HOST_SHARE
    if limit >= need:
        return
    try:
        INOTIFY_INSTANCES.write_text(f"{need}\n")
    except OSError as exc:
        raise SparkctlError(
            f"fs.inotify.max_user_instances is {limit}: the lab's machines need about {need} "
            f"(each machine's systemd and Docker hold ~9, all as root) and it cannot be raised here ({exc})",
            hint=f"raise it as root: sysctl -w fs.inotify.max_user_instances={need}",
            exit_code=EXIT_USAGE,
        ) from exc
    log(f"raised fs.inotify.max_user_instances from {limit} to {need} (a lab machine holds ~9 of them)")
