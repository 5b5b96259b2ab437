"""Breaking the lab on purpose (the chaos hooks): cut a cable, shrink a switch port's MTU, fill a
node's NVMe."""

from __future__ import annotations

import os

from sparkctl.errors import EXIT_USAGE, SparkctlError
from sparkctl_lab import host, state
from sparkctl_lab import topology as topo
from sparkctl_lab.machines import require_state

FILL_FILE = ".sparkctl-lab-fill"


# --- chaos --------------------------------------------------------------------------------


def set_link(node: str, up_: bool, halves: list[str] | None = None, mgmt: bool = False) -> list[str]:
    """Cut or restore a node's cable(s): fabric halves at the switch port, mgmt at the controller."""
    host.require_root_linux("link")
    require_state()
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
        for key in halves or [h.key for h in topo.fabric_ports()]:
            port = topo.switch_port(node, topo.half(key))
            host.run(["ip", "-n", topo.netns(topo.SWITCH_NAME), "link", "set", port, word])
            touched.append(port)
    return touched


def set_port_mtu(port: str, mtu: int) -> int | None:
    """Set a lab switch port's MTU (really enforced by the kernel); return the previous one."""
    host.require_root_linux("mtu")
    require_state()
    if port not in topo.segments():  # a bridge (the fabric, or a cable) or a port
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
    st = require_state()
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
