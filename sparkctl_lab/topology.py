"""The lab's wiring, as pure data: names, addresses, interfaces, switch ports, MAC addresses.

Every other lab module (and the inventory writer) reads these facts from here, so an address or an
interface name is spelled exactly once.

    controller (host netns)                     lab-switch (netns sparklab-lab-switch)
      sparklab0 10.250.0.1/24  ── lm-<node> ──┐    eth0 10.250.0.2/24 (mgmt)
                                              │    br-fabric: s0a s0b s1a s1b … (MTU 9216)
    spark-K (netns sparklab-spark-K)          │           │
      enP7s7        10.250.0.1K/24  ──────────┘           │
      enp1s0f0np0   (half A) ── veth ── sKa ──────────────┤
      enP2p1s0f0np0 (half B) ── veth ── sKb ──────────────┘

The controller reaches the management network only; the fabric is the switch's bridge alone.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

NODE_COUNT = 4
SWITCH_NAME = "lab-switch"


def _instance() -> int:
    """Which lab on this host: ``$SPARKCTL_LAB_INSTANCE`` (0-9, default 0). Lab N > 0 is a second,
    fully separate lab beside lab 0 (its own mgmt subnet 10.250.N.0/24, bridge, namespaces, veths,
    cgroups, state directories and inventory): the integration tests run two streams side by side.
    Lab 0 keeps the names it always had."""
    raw = os.environ.get(INSTANCE_ENV, "0") or "0"
    if not (raw.isdigit() and 0 <= int(raw) <= 9):
        raise ValueError(f"{INSTANCE_ENV} must be a digit 0-9 (got {raw!r})")
    return int(raw)


INSTANCE_ENV = "SPARKCTL_LAB_INSTANCE"
INSTANCE = _instance()
SUFFIX = "" if INSTANCE == 0 else str(INSTANCE)  # "" for lab 0, "N" for lab N
DIR_SUFFIX = f"-{SUFFIX}" if SUFFIX else ""  # the controller's directories: lab, lab-1, ...
CLUSTER_NAME = f"lab{SUFFIX}"

MGMT_SUBNET = ipaddress.ip_network(f"10.250.{INSTANCE}.0/24")
CONTROLLER_IP = MGMT_SUBNET.network_address + 1
SWITCH_MGMT_IP = MGMT_SUBNET.network_address + 2
MGMT_HOST_BASE = 10  # node rank K gets 10.250.N.(10+K)

MGMT_IFACE = "enP7s7"  # the Spark's management NIC name
SWITCH_MGMT_IFACE = "eth0"
MGMT_BRIDGE = f"sparklab{INSTANCE}"  # on the controller, holds CONTROLLER_IP
FABRIC_BRIDGE = "br-fabric"  # inside the lab-switch netns
NETNS_PREFIX = f"sparklab{SUFFIX}-"
MGMT_VETH_PREFIX = f"lm{SUFFIX}-"

SWITCH_PORT_MTU = 9216  # switch ports start above the host MTU, like a real RoCE switch
HOST_FABRIC_MTU = 9000  # what the fabric role configures on the nodes
LINK_DEFAULT_MTU = 1500  # fabric links as `lab up` leaves them, before provisioning


@dataclass(frozen=True)
class Half:
    """One PCIe half of the node's ConnectX-7 port: its netdev, RDMA device and subnet."""

    key: str  # "a" or "b": suffix of the switch port name
    netdev: str
    hca: str
    subnet: ipaddress.IPv4Network


HALVES: tuple[Half, ...] = (
    Half("a", "enp1s0f0np0", "rocep1s0f0", ipaddress.IPv4Network("10.251.0.0/24")),
    Half("b", "enP2p1s0f0np0", "roceP2p1s0f0", ipaddress.IPv4Network("10.251.1.0/24")),
)


def half(key: str) -> Half:
    for h in HALVES:
        if h.key == key:
            return h
    raise ValueError(f"unknown fabric half {key!r} (expected one of: {', '.join(h.key for h in HALVES)})")


def node_names() -> list[str]:
    return [node_name(rank) for rank in range(NODE_COUNT)]


def node_name(rank: int) -> str:
    return f"spark-{rank}"


def machines() -> list[str]:
    """Every container of the lab: the four nodes, then the switch."""
    return [*node_names(), SWITCH_NAME]


def rank_of(node: str) -> int:
    """spark-K -> K; raises ValueError for anything that is not a lab node."""
    prefix = "spark-"
    if node.startswith(prefix) and node[len(prefix) :].isdigit():
        rank = int(node[len(prefix) :])
        if 0 <= rank < NODE_COUNT:
            return rank
    raise ValueError(f"{node!r} is not a lab node (expected one of: {', '.join(node_names())})")


def mgmt_ip(machine: str) -> ipaddress.IPv4Address:
    if machine == SWITCH_NAME:
        return ipaddress.IPv4Address(SWITCH_MGMT_IP)
    return ipaddress.IPv4Address(MGMT_SUBNET.network_address + MGMT_HOST_BASE + rank_of(machine))


def mgmt_iface(machine: str) -> str:
    return SWITCH_MGMT_IFACE if machine == SWITCH_NAME else MGMT_IFACE


def fabric_ip(node: str, h: Half) -> ipaddress.IPv4Interface:
    """The static address the fabric role gives half `h` of `node` (with the subnet's prefix)."""
    addr = h.subnet.network_address + MGMT_HOST_BASE + rank_of(node)
    return ipaddress.IPv4Interface(f"{addr}/{h.subnet.prefixlen}")


def switch_port(node: str, h: Half) -> str:
    """The lab switch port a node's half is cabled to: spark-2 half a -> s2a."""
    return f"s{rank_of(node)}{h.key}"


def switch_ports() -> list[str]:
    return [switch_port(n, h) for n in node_names() for h in HALVES]


def port_owner(port: str) -> tuple[str, Half]:
    """s2a -> (spark-2, half a); ValueError for an unknown port."""
    for n in node_names():
        for h in HALVES:
            if switch_port(n, h) == port:
                return n, h
    raise ValueError(f"{port!r} is not a lab switch port (ports: {', '.join(switch_ports())})")


def netns(machine: str) -> str:
    return f"{NETNS_PREFIX}{machine}"


def mgmt_veth_host(machine: str) -> str:
    """Host-side end of a machine's management veth (kernel limit: 15 characters)."""
    name = f"{MGMT_VETH_PREFIX}{machine}"
    assert len(name) <= 15, name
    return name


def _mac(kind: int, index: int, sub: int = 0) -> str:
    # Locally administered, unicast, stable across re-creation (no stale ARP entries).
    return f"02:5a:{kind:02x}:00:{index:02x}:{sub:02x}"


def _index(machine: str) -> int:
    return NODE_COUNT if machine == SWITCH_NAME else rank_of(machine)


def mgmt_mac(machine: str) -> str:
    """MAC of the machine-side management interface."""
    return _mac(0, _index(machine))


def mgmt_host_mac(machine: str) -> str:
    """MAC of the controller-side end of the management veth."""
    return _mac(1, _index(machine))


def fabric_mac(node: str, h: Half) -> str:
    return _mac(2, rank_of(node), HALVES.index(h))


def switch_port_mac(node: str, h: Half) -> str:
    return _mac(3, rank_of(node), HALVES.index(h))
