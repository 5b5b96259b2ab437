"""The lab's Debian root filesystem: debootstrapped once, cached outside the repository, shared read-only.

Every lab container (the four nodes and the switch) boots a copy-on-write overlay of this tree.
Everything the roles install must already be in it: the nodes have no route to any mirror, so
Ansible's apt module only ever finds packages present (``ROOTFS_PACKAGES`` is that list).
The mirror is read from this machine's own apt sources at run time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from sparkctl.errors import EXIT_USAGE, SparkctlError
from sparkctl_lab import host

SUITE = "bookworm"
VARIANT = "minbase"

# Everything the lab containers need, and everything the provision roles install on a node
# (spark_base, spark_fabric, spark_qos, spark_runtime kind=lab, spark_firewall). The roles'
# package lists must stay a subset of this list: reference it, do not repeat it.
ROOTFS_PACKAGES: tuple[str, ...] = (
    # boot and management
    "systemd",
    "systemd-sysv",
    "dbus",
    "udev",  # udevadm, needed by `netplan apply`
    "openssh-server",
    "openssh-client",
    "sudo",
    "procps",
    "kmod",
    "less",
    # network: netplan + networkd, firewall, fabric tools
    "netplan.io",
    "iproute2",  # ip, dcb, rdma
    "iputils-ping",
    "nftables",
    "ethtool",
    "rdma-core",
    "ibverbs-utils",
    "pciutils",
    "dmidecode",
    # base role
    "chrony",
    "rsync",
    "jq",
    "curl",
    "ca-certificates",
    "lsof",
    # Ansible on the node (python3-apt for the apt module, offline) and the rank simulator
    "python3",
    "python3-apt",
    "python3-yaml",
    "python3-venv",
    "python3-pip",
    "python3-prometheus-client",  # the node exporter (spark_exporter)
    # The container runtime: Debian's Docker engine (containerd, runc), iptables for its
    # bridge rules (iptables-nft: its own tables, beside the firewall's `table inet sparkctl`),
    # zstd for `docker save | zstd` image fan-out.
    "docker.io",
    "iptables",
    "zstd",
)

# Bump when the post-debootstrap fix-ups below change, so caches are rebuilt.
_RECIPE_VERSION = "5"
_COMPLETE_MARKER = ".sparkctl-rootfs-complete"
DEFAULT_CACHE_DIR = Path("/var/cache/sparkctl")


@dataclass(frozen=True)
class Mirror:
    uri: str
    keyring: str | None = None


def cache_dir() -> Path:
    return Path(os.environ.get("SPARKCTL_ROOTFS_CACHE", str(DEFAULT_CACHE_DIR)))


def cache_key(packages: tuple[str, ...] = ROOTFS_PACKAGES) -> str:
    text = "\n".join([SUITE, VARIANT, _RECIPE_VERSION, *sorted(set(packages))])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def rootfs_path(packages: tuple[str, ...] = ROOTFS_PACKAGES) -> Path:
    return cache_dir() / f"rootfs-{SUITE}-{cache_key(packages)}"


def is_built(path: Path) -> bool:
    return (path / _COMPLETE_MARKER).is_file()


# --- mirror discovery -----------------------------------------------------------------------


def parse_deb822_sources(text: str) -> list[dict[str, str]]:
    """Stanzas of a deb822 ``.sources`` file (comments dropped, continuation lines joined)."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = None
    for raw in [*text.splitlines(), ""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if current:
                stanzas.append(current)
            current, key = {}, None
            continue
        if raw[0] in " \t" and key:
            current[key] += " " + raw.strip()
            continue
        if ":" in raw:
            key, value = raw.split(":", 1)
            key = key.strip().lower()
            current[key] = value.strip()
    return stanzas


def mirrors_from_deb822(text: str, suite: str = SUITE) -> list[Mirror]:
    out = []
    for st in parse_deb822_sources(text):
        if st.get("enabled", "yes").lower() == "no":
            continue
        if "deb" not in st.get("types", "").split() or suite not in st.get("suites", "").split():
            continue
        if "main" not in st.get("components", "").split():
            continue
        for uri in st.get("uris", "").split():
            out.append(Mirror(uri.rstrip("/"), st.get("signed-by") or None))
    return out


_LIST_LINE = re.compile(
    r"^\s*deb\s+(?:\[(?P<opts>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)\s+(?P<comps>.+)$"
)


def mirrors_from_list(text: str, suite: str = SUITE) -> list[Mirror]:
    out = []
    for line in text.splitlines():
        m = _LIST_LINE.match(line.split("#", 1)[0])
        if not m or m.group("suite") != suite or "main" not in m.group("comps").split():
            continue
        keyring = None
        for opt in (m.group("opts") or "").split():
            if opt.startswith("signed-by="):
                keyring = opt.split("=", 1)[1]
        out.append(Mirror(m.group("uri").rstrip("/"), keyring))
    return out


def find_mirror(apt_dir: Path = Path("/etc/apt")) -> Mirror:
    """The Debian mirror this machine already uses for ``SUITE`` main (or $SPARKCTL_LAB_MIRROR)."""
    override = os.environ.get("SPARKCTL_LAB_MIRROR")
    if override:
        return Mirror(override.rstrip("/"))
    found: list[Mirror] = []
    sources_d = apt_dir / "sources.list.d"
    if sources_d.is_dir():
        for f in sorted(sources_d.glob("*.sources")):
            found += mirrors_from_deb822(f.read_text(errors="replace"))
        for f in sorted(sources_d.glob("*.list")):
            found += mirrors_from_list(f.read_text(errors="replace"))
    main_list = apt_dir / "sources.list"
    if main_list.is_file():
        found += mirrors_from_list(main_list.read_text(errors="replace"))
    if not found:
        raise SparkctlError(
            f"no Debian {SUITE} mirror found in {apt_dir}/sources.list(.d)",
            hint="set SPARKCTL_LAB_MIRROR to a Debian mirror URL that serves bookworm/main",
            exit_code=EXIT_USAGE,
        )
    return found[0]


# --- build ----------------------------------------------------------------------------------


def ensure(log_path: Path | None = None) -> tuple[Path, float | None]:
    """Return the cached rootfs, building it first if needed: (path, build seconds or None if cached)."""
    path = rootfs_path()
    if is_built(path):
        return path, None
    return path, build(path, log_path)


def debootstrap(path: Path, packages: tuple[str, ...], what: str,
                log_path: Path | None = None) -> tuple[Path, Mirror, float]:
    """A fresh Debian tree with ``packages`` beside ``path`` (``<path>.tmp-<pid>``, stale ones
    removed), debootstrap's output in ``log_path``: (tree, mirror, seconds). On failure the partial
    tree is removed and the error names ``what`` and the mirror."""
    mirror = find_mirror()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    for stale in path.parent.glob(f"{path.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    argv = ["debootstrap", f"--variant={VARIANT}", f"--include={','.join(packages)}"]
    if mirror.keyring and Path(mirror.keyring).is_file():
        argv.append(f"--keyring={mirror.keyring}")
    argv += [SUITE, str(tmp), mirror.uri]
    t0 = time.monotonic()
    proc = host.run(argv, check=False, timeout=1800)
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-6:]
        raise SparkctlError(
            f"debootstrap of {what} failed (exit {proc.returncode}) from {mirror.uri}",
            hint=f"see {log_path}" if log_path else "check the mirror and the network",
            details=tail,
        )
    return tmp, mirror, time.monotonic() - t0


def build(path: Path, log_path: Path | None = None) -> float:
    host.require_tools(["debootstrap", "chroot"])
    tmp, mirror, seconds = debootstrap(path, ROOTFS_PACKAGES, "the lab rootfs", log_path)
    t0 = time.monotonic()
    _fix_up(tmp)
    seconds += time.monotonic() - t0
    (tmp / _COMPLETE_MARKER).write_text(
        f"suite={SUITE}\nvariant={VARIANT}\nmirror={mirror.uri}\nbuild_seconds={seconds:.1f}\n"
        f"packages={','.join(ROOTFS_PACKAGES)}\n"
    )
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    return seconds


def build_info(path: Path) -> dict[str, str]:
    """The key=value lines recorded when the tree was built (mirror, build_seconds, packages)."""
    try:
        lines = (path / _COMPLETE_MARKER).read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)


_UDEVADM_SHIM = """#!/bin/sh
# sparkctl lab: in a container (no udevd, read-only /sys) `trigger`, `settle` and `control` have
# nothing to act on; they succeed quietly. Everything else is the real udevadm.
case "$1" in
  trigger|settle|control) [ -w /sys/class/net ] || exit 0 ;;
esac
exec /usr/bin/udevadm.distrib "$@"
"""


# The lab's own units and files on a node stay out of the product's names (`sparkctl-*`): `sparkctl
# reset` removes every `sparkctl-*` unit it finds, and must not take the lab's plumbing with it.
_PROCSYS_UNIT = "labnode-netsysctl.service"
_PROCSYS_UNIT_TEXT = """[Unit]
Description=sparkctl lab: writable /proc/sys/net (this machine's own network namespace)
DefaultDependencies=no
ConditionVirtualization=container
Before=systemd-sysctl.service systemd-networkd.service sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/mount --bind /proc/sys/net /proc/sys/net
ExecStart=/bin/mount -o remount,bind,rw /proc/sys/net

[Install]
WantedBy=sysinit.target
"""


_CGROUPS_SCRIPT = "/usr/local/sbin/labnode-cgroups"
_CGROUPS_SCRIPT_TEXT = """#!/bin/sh
# sparkctl lab: systemd-nspawn mounts the cgroup v1 controllers read-only, and the Docker engine
# creates each container's cgroup in them. Mount every controller hierarchy afresh, read-write,
# before docker.service (systemd's own name=systemd hierarchy and cgroup2 are left alone), then
# check that none is left read-only: a pass can race the machine's own boot, so it is retried,
# and the unit fails (docker.service requires it) rather than let a container start on a
# read-only controller.
set -u
known=$(awk '!/^#/ {print $1}' /proc/cgroups)
readonly_ctrls() {
  findmnt -rn -t cgroup -o TARGET,OPTIONS,FS-OPTIONS | while read -r target opts fsopts; do
    ctrls=""
    for word in $(echo "$fsopts" | tr , ' '); do
      for c in $known; do [ "$word" = "$c" ] && ctrls="${ctrls:+$ctrls,}$word"; done
    done
    [ -n "$ctrls" ] || continue
    case ",$opts," in *,rw,*) continue ;; esac
    echo "$target $ctrls"
  done
}
for attempt in 1 2 3 4 5 6 7 8 9 10; do
  left=$(readonly_ctrls)
  [ -z "$left" ] && exit 0
  echo "$left" | while read -r target ctrls; do
    umount -l "$target" && mount -t cgroup -o "$ctrls" cgroup "$target" \
      || echo "attempt $attempt: $target ($ctrls) not remounted" >&2
  done
  sleep 0.5
done
echo "still read-only: $(readonly_ctrls | tr '\n' ' ')" >&2
exit 1
"""

_CGROUPS_UNIT = "labnode-cgroups.service"
_CGROUPS_UNIT_TEXT = f"""[Unit]
Description=sparkctl lab: writable cgroup v1 controllers for the Docker engine
DefaultDependencies=no
ConditionVirtualization=container
After=local-fs.target
Before=containerd.service docker.service sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={_CGROUPS_SCRIPT}

[Install]
WantedBy=sysinit.target
"""

# Every unit the recipe installs on a node (tests check them against the product's unit names).
NODE_UNITS = (_PROCSYS_UNIT, _CGROUPS_UNIT)

# The engine's data root is a per-machine directory on the controller's ext4, bound at
# /var/lib/docker (overlay2 refuses the overlayfs root the machines boot from). Bridge rules stay
# on (Docker's default, as on a Spark): iptables-nft writes its own `ip filter`/`ip nat` tables,
# which the firewall role never touches (it loads and deletes only `table inet sparkctl`).
DOCKER_DATA_ROOT = "/var/lib/docker"
DOCKER_UNITS = ("containerd.service", "docker.service")
DOCKER_DAEMON_JSON: dict[str, object] = {
    "data-root": DOCKER_DATA_ROOT,
    "storage-driver": "overlay2",
    "exec-opts": ["native.cgroupdriver=cgroupfs"],
    "log-driver": "json-file",
    "log-opts": {"max-size": "50m", "max-file": "3"},
}


def prune(keep: Path) -> list[Path]:
    """Remove cached rootfs trees other than `keep` (older package lists or recipes)."""
    removed = []
    for other in sorted(keep.parent.glob(f"rootfs-{SUITE}-*")):
        if other != keep and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)
            removed.append(other)
    return removed


def _fix_up(root: Path) -> None:
    """Make the tree a neutral template: no shared identity, networkd on, container-friendly."""
    # Identity is per node (written into each overlay): no shared host keys or machine-id.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/machine-id").write_text("")
    dbus_id = root / "var/lib/dbus/machine-id"
    if dbus_id.is_symlink() or dbus_id.exists():
        dbus_id.unlink()
    dbus_id.symlink_to("/etc/machine-id")
    # Downloaded .debs are not needed; the package lists stay so the apt module can resolve names.
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    # netplan renders for networkd; make sure it runs on boot.
    host.run(["chroot", str(root), "systemctl", "enable", "systemd-networkd.service"])
    # `netplan apply` runs `udevadm trigger`/`settle`; a container has no udevd and a read-only
    # /sys, so those two have nothing to act on: make them succeed there (real udevadm otherwise).
    host.run(["chroot", str(root), "dpkg-divert", "--local", "--rename", "--add", "/usr/bin/udevadm"])
    shim = root / "usr/bin/udevadm"
    shim.write_text(_UDEVADM_SHIM)
    shim.chmod(0o755)
    # nspawn mounts /proc/sys read-only. Net sysctls are per network namespace, so a writable
    # /proc/sys/net changes only the machine's own netns (the roles' fabric sysctls work, and
    # persist across reboots through systemd-sysctl); every other sysctl stays read-only, so
    # nothing in a lab machine can change the controller's kernel.
    (root / "etc/systemd/system" / _PROCSYS_UNIT).write_text(_PROCSYS_UNIT_TEXT)
    host.run(["chroot", str(root), "systemctl", "enable", _PROCSYS_UNIT])
    # The Docker engine: writable cgroup controllers first, then docker.service at boot.
    script = root / _CGROUPS_SCRIPT.lstrip("/")
    script.write_text(_CGROUPS_SCRIPT_TEXT)
    script.chmod(0o755)
    (root / "etc/systemd/system" / _CGROUPS_UNIT).write_text(_CGROUPS_UNIT_TEXT)
    # The engine starts only once the controllers are writable (never on a read-only one).
    for unit in DOCKER_UNITS:
        dropin = root / "etc/systemd/system" / f"{unit}.d"
        dropin.mkdir(parents=True, exist_ok=True)
        (dropin / "labnode.conf").write_text(
            f"[Unit]\nRequires={_CGROUPS_UNIT}\nAfter={_CGROUPS_UNIT}\n"
        )
    (root / "etc/docker").mkdir(parents=True, exist_ok=True)
    (root / "etc/docker/daemon.json").write_text(json.dumps(DOCKER_DAEMON_JSON, indent=2) + "\n")
    host.run(["chroot", str(root), "systemctl", "enable", _CGROUPS_UNIT, *DOCKER_UNITS])
    # There is no hardware clock or console login to manage in a container.
    wants = root / "etc/systemd/system"
    for masked in ("getty@tty1.service", "systemd-timesyncd.service"):
        link = wants / masked
        if not link.exists() and not link.is_symlink():
            link.symlink_to("/dev/null")
