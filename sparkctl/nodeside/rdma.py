"""RDMA devices of this node from /sys/class/infiniband: presence, firmware, RoCE v2 GID index.

Standard library only (runs on the nodes: the preflight probe, ``sparkctl_fabric_probe``,
``sparkctl_identity``).

The GID NCCL and ``ib_write_bw -x`` need is the port's RoCE v2 GID for its IPv4 address: entry N
of ``ports/1/gids`` equals the IPv4-mapped address (``::ffff:a.b.c.d``, written out in full),
``gid_attrs/types/N`` is ``RoCE v2`` (the same address also has a ``IB/RoCE v1`` entry), and
``gid_attrs/ndevs/N`` names the port's netdev (an HCA can carry the address of another interface,
e.g. a bond or VLAN on top of it).
"""

import ipaddress
import os

from . import system

IB = "/sys/class/infiniband"
ROCE_V2 = "RoCE v2"


def present(root=IB):
    """Whether this node has any RDMA device."""
    try:
        return bool(os.listdir(root))
    except OSError:
        return False


def has_device(hca, root=IB):
    return bool(hca) and os.path.isdir(os.path.join(root, hca))


def firmware(hcas, root=IB):
    """The distinct firmware versions of ``hcas``, sorted (unreadable ones left out)."""
    versions = set()
    for hca in hcas:
        ver = system.read_text(os.path.join(root, hca, "fw_ver"))
        if ver:
            versions.add(ver)
    return sorted(versions)


def ipv4_gid(address):
    """The GID sysfs shows for an IPv4 address (a prefix length is allowed and ignored)."""
    ip = ipaddress.IPv4Interface(address).ip
    return f"0000:0000:0000:0000:0000:ffff:{int(ip) >> 16:04x}:{int(ip) & 0xFFFF:04x}"


def roce_v2_gid_index(hca, netdev, address, root=IB, port=1):
    """(index, None) of the RoCE v2 GID of ``address`` on ``netdev`` of ``hca``, or (None, why)."""
    base = os.path.join(root, hca, "ports", str(port))
    gids = os.path.join(base, "gids")
    if not os.path.isdir(gids):
        return None, f"no RDMA device {hca}"
    want = ipv4_gid(address)
    names = sorted((n for n in os.listdir(gids) if n.isdigit()), key=int)
    for name in names:
        if (system.read_text(os.path.join(gids, name)) or "").lower() != want:
            continue
        if system.read_text(os.path.join(base, "gid_attrs", "types", name)) != ROCE_V2:
            continue
        if system.read_text(os.path.join(base, "gid_attrs", "ndevs", name)) != netdev:
            continue
        return int(name), None
    ip = ipaddress.IPv4Interface(address).ip
    return None, f"{hca}: no RoCE v2 GID for {ip} on {netdev}"
