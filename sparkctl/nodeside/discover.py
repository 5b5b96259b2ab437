"""What `sparkctl init` learns of a node before any inventory exists: identity (hostname, OS, DGX OS,
kernel, NVIDIA driver), memory, NVMe devices and filesystems, every network interface with its
driver, PCI address, link state, MTU, IPv4 addresses and RDMA device, and the LLDP neighbours.

Standard library only (shipped by ``nodeside.ship`` with ``system``, ``links`` and ``rdma``); it
only reads. Anything absent (no GPU driver, no ``lsblk``, no ``lldpctl``, a lab machine without a
ConnectX-7) is reported as absent, never guessed. Grouping the interfaces into ConnectX-7 ports and
their PCIe halves is the controller's (``sparkctl.site.facts``), from the raw facts printed here.
"""

import json
import os
import platform
import re
import shutil
import socket

from . import links, rdma, system

MODE = "discover"
NET = links.NET
IB = rdma.IB
# A PCI function's address as sysfs names it: domain:bus:device.function
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def key_values(text):
    """``KEY=value`` / ``KEY="value"`` lines (os-release, dgx-release) as a dict."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and not key.startswith("#"):
            out[key] = value.strip().strip('"').strip("'")
    return out


def os_release(path="/etc/os-release"):
    values = key_values(system.read_text(path))
    return {k: values[k] for k in ("PRETTY_NAME", "ID", "VERSION_ID") if k in values}


def dgx_release(path="/etc/dgx-release"):
    """The DGX OS release file's fields (absent on anything but DGX OS: None)."""
    text = system.read_text(path)
    return key_values(text) if text else None


def nvidia_driver(path="/proc/driver/nvidia/version", module="/sys/module/nvidia/version"):
    text = system.read_text(path)
    if text:
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
        if m:
            return m.group(1)
    return system.read_text(module)


def bios(dmi="/sys/class/dmi/id"):
    """``version (date)`` of the firmware the DMI table names (the version alone without a date);
    None without a DMI table (a container, a VM without one)."""
    ver = system.read_text(os.path.join(dmi, "bios_version"))
    date = system.read_text(os.path.join(dmi, "bios_date"))
    if not ver:
        return None
    return f"{ver} ({date})" if date else ver


def memory_bytes(path="/proc/meminfo"):
    for line in (system.read_text(path, "") or "").splitlines():
        key, _, rest = line.partition(":")
        if key == "MemTotal" and rest.split() and rest.split()[0].isdigit():
            return int(rest.split()[0]) * 1024
    return None


def _basename_of_link(path):
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def pci_address(netdev, root=NET):
    """The PCI function behind ``netdev`` (``0002:01:00.0``), or None for a virtual interface."""
    try:
        real = os.path.realpath(os.path.join(root, netdev, "device"))
    except OSError:
        return None
    name = os.path.basename(real)
    return name if PCI_ADDRESS.match(name) else None


def hcas_by_netdev(root=IB):
    """{netdev: RDMA device} from /sys/class/infiniband/<hca>/device/net/<netdev>."""
    out = {}  # type: dict[str, str]
    try:
        hcas = sorted(os.listdir(root))
    except OSError:
        return out
    for hca in hcas:
        try:
            nets = os.listdir(os.path.join(root, hca, "device", "net"))
        except OSError:
            continue
        for netdev in nets:
            out.setdefault(netdev, hca)
    return out


def netdevs(root=NET, ib_root=IB, addresses=None):
    """Every interface but loopback: driver, PCI address, link, MTU, MAC, IPv4 and RDMA device."""
    try:
        names = sorted(n for n in os.listdir(root) if n != "lo")
    except OSError:
        return []
    hcas = hcas_by_netdev(ib_root)
    addresses = addresses or {}
    out = []
    for name in names:
        link = links.read_link(name, root)
        if not link.get("present"):
            continue
        hca = hcas.get(name)
        out.append({
            "name": name,
            "driver": _basename_of_link(os.path.join(root, name, "device", "driver")),
            "pci": pci_address(name, root),
            "mac": system.read_text(os.path.join(root, name, "address")),
            "phys_port_name": system.read_text(os.path.join(root, name, "phys_port_name")),
            "state": link["state"],
            "carrier": link["carrier"],
            "admin_up": link["admin_up"],
            "mtu": link["mtu"],
            "speed_mbps": link["speed_mbps"],
            "ipv4": addresses.get(name, []),
            "hca": hca,
            "hca_fw": system.read_text(os.path.join(ib_root, hca, "fw_ver")) if hca else None,
        })
    return out


def _lsblk_disks(text):
    """NVMe disks from ``lsblk -J -b -o NAME,TYPE,SIZE,MODEL``."""
    try:
        doc = json.loads(text or "{}")
    except ValueError:
        return []
    out = []
    for dev in doc.get("blockdevices") or []:
        if not isinstance(dev, dict) or dev.get("type") != "disk":
            continue
        if str(dev.get("name", "")).startswith("nvme"):
            size = str(dev.get("size"))
            out.append({"name": dev["name"], "size_bytes": int(size) if size.isdigit() else None,
                        "model": (dev.get("model") or "").strip() or None})
    return out


def nvme_disks():
    if not shutil.which("lsblk"):
        return []
    rc, out, _err = system.run(["lsblk", "-J", "-b", "-d", "-o", "NAME,TYPE,SIZE,MODEL"], timeout=10)
    return _lsblk_disks(out) if rc == 0 else []


def _unescape(path):
    """/proc/mounts writes a space as \\040 (and tab, newline, backslash alike)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def filesystems(wanted, mounts="/proc/self/mounts"):
    """Size and free bytes of every filesystem on an NVMe device, and of each mount point in
    ``wanted`` whatever its device (the mount a site keeps the checkpoint on)."""
    out = {}
    for line in (system.read_text(mounts, "") or "").splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        source, target, fstype = parts[0], _unescape(parts[1]), parts[2]
        if not (source.startswith("/dev/nvme") or target in wanted) or target in out:
            continue
        try:
            st = os.statvfs(target)
        except OSError:
            continue
        out[target] = {"source": source, "fstype": fstype, "size_bytes": st.f_blocks * st.f_frsize,
                       "avail_bytes": st.f_bavail * st.f_frsize}
    return [{"mount": k, **v} for k, v in sorted(out.items())]


def parse_lldp(text):
    """``lldpctl -f json`` → {local interface: {"chassis": name, "port": id}}. lldpctl writes one
    interface as an object and several as a list of one-key objects; both are read."""
    try:
        doc = json.loads(text or "{}")
    except ValueError:
        return {}
    ifaces = (doc.get("lldp") or {}).get("interface") if isinstance(doc, dict) else None
    items = []
    if isinstance(ifaces, dict):
        items = list(ifaces.items())
    elif isinstance(ifaces, list):
        items = [kv for entry in ifaces if isinstance(entry, dict) for kv in entry.items()]
    out = {}
    for local, body in items:
        if not isinstance(body, dict):
            continue
        chassis = body.get("chassis") or {}
        name = next(iter(chassis), None) if isinstance(chassis, dict) else None
        if isinstance(chassis, dict) and isinstance(chassis.get("name"), dict):
            name = chassis["name"].get("value")
        port = body.get("port") or {}
        pid = port.get("id") if isinstance(port, dict) else None
        value = pid.get("value") if isinstance(pid, dict) else pid
        if value is None and isinstance(port, dict):
            value = port.get("descr")
        out[local] = {"chassis": name, "port": value}
    return out


def lldp_neighbours():
    """None when lldpctl is not installed (no answer, not "no neighbours")."""
    if not shutil.which("lldpctl"):
        return None
    rc, out, _err = system.run(["lldpctl", "-f", "json"], timeout=10)
    return parse_lldp(out) if rc == 0 else None


def discover(params):
    wanted = [str(m) for m in params.get("mounts", [])]
    return {
        "mode": MODE,
        "hostname": socket.gethostname(),
        "os": os_release(),
        "dgx": dgx_release(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "nvidia_driver": nvidia_driver(),
        "bios": system.read_text("/sys/class/dmi/id/bios_version"),
        "memory_bytes": memory_bytes(),
        "nvme": nvme_disks(),
        "filesystems": filesystems(wanted),
        "netdevs": netdevs(addresses=links.ipv4_addresses()),
        "rdma": rdma.present(),
        "lldp": lldp_neighbours(),
    }


def main(params, shipped):
    """Print the answer as one JSON line."""
    print(json.dumps(discover(params)))


__all__ = ["MODE", "discover", "filesystems", "key_values", "main", "netdevs", "parse_lldp"]
