"""Network links of this node: state, carrier, MTU, speed and counters from sysfs; IPv4 from ``ip``.

Standard library only (runs on the nodes: the status probe, ``sparkctl_fabric_probe``,
``sparkctl_identity``). sysfs is read for everything it holds: it costs no process, and since the
lab starts each machine inside its own network namespace, its /sys/class/net is that namespace's as
on a real node. Addresses are not in sysfs; one ``ip -j addr`` call reads them for every interface.
"""

import json
import os

from . import system

NET = "/sys/class/net"
IFF_UP = 0x1
COUNTERS = ("rx_bytes", "tx_bytes", "rx_errors", "tx_errors", "rx_dropped")


def read_link(netdev, root=NET):
    """One interface as sysfs shows it; ``{"present": False}`` when it does not exist."""
    base = os.path.join(root, netdev)
    if not os.path.isdir(base):
        return {"present": False}
    speed = system.read_int(os.path.join(base, "speed"))
    flags = system.read_text(os.path.join(base, "flags"), "0x0") or "0x0"
    carrier = system.read_int(os.path.join(base, "carrier"))  # unreadable while administratively down
    try:
        admin_up = bool(int(flags, 16) & IFF_UP)
    except ValueError:
        admin_up = False
    out = {
        "present": True,
        "state": system.read_text(os.path.join(base, "operstate"), "unknown"),
        "carrier": carrier == 1,
        "admin_up": admin_up,
        "mtu": system.read_int(os.path.join(base, "mtu"), 0),
        "speed_mbps": speed if speed is not None and speed > 0 else None,
    }
    for name in COUNTERS:
        out[name] = system.read_int(os.path.join(base, "statistics", name), 0)
    return out


def read_links(netdevs, root=NET):
    return {dev: read_link(dev, root) for dev in netdevs}


def parse_ip_addr(text):
    """``ip -j addr show`` output → {interface: sorted ["a.b.c.d/prefix", …]} (IPv4 only)."""
    try:
        doc = json.loads(text or "[]")
    except ValueError:
        return {}
    out = {}
    for link in doc if isinstance(doc, list) else []:
        if not isinstance(link, dict) or "ifname" not in link:
            continue
        addrs = [a for a in link.get("addr_info") or [] if isinstance(a, dict) and a.get("family") == "inet"]
        out[link["ifname"]] = sorted("{}/{}".format(a["local"], a["prefixlen"]) for a in addrs)
    return out


def ipv4_addresses():
    """IPv4 addresses of every interface of this network namespace (one ``ip`` call)."""
    rc, out, _err = system.run(["ip", "-j", "addr", "show"], timeout=10)
    return parse_ip_addr(out) if rc == 0 else {}
