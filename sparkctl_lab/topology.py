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

That is shape ``switch4`` (the default). A lab comes up in one of ``SHAPES`` (``lab up --shape``),
each a published way to cable Sparks: ``switch8`` is the same wiring with eight nodes; the cabled
shapes (``triangle``: three nodes, every pair cabled; ``ring``: four nodes, neighbours only) use each
node's two physical ports (…np0, …np1), one point-to-point cable and subnet per pair. The lab-switch
machine stays as a patch panel: each cable is a bridge of its own with exactly the two ports at its
ends, so a node sees only its cabled peer on each link, as over a direct cable. The shape a lab is
up in is recorded in its state file; ``use_shape`` makes it the one every function here answers for.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field

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
    """One fabric port of a node: its netdev and RDMA device. On a switched shape it is a PCIe half
    of the ConnectX-7 port, with the subnet of that half; on a cabled shape a physical port, whose
    subnet is its cable's (``subnet`` None)."""

    key: str  # "a" or "b": suffix of the switch port name
    netdev: str
    hca: str
    subnet: ipaddress.IPv4Network | None


# Switched shapes: both PCIe halves of physical port 0 on the switch, one subnet per half.
HALVES: tuple[Half, ...] = (
    Half("a", "enp1s0f0np0", "rocep1s0f0", ipaddress.IPv4Network("10.251.0.0/24")),
    Half("b", "enP2p1s0f0np0", "roceP2p1s0f0", ipaddress.IPv4Network("10.251.1.0/24")),
)
# Cabled shapes: both physical ports, one cable each (inventory/examples/triangle-tp3, ring-tp4).
PHYSICAL_PORTS: tuple[Half, ...] = (
    Half("a", "enp1s0f0np0", "rocep1s0f0", None),
    Half("b", "enp1s0f1np1", "rocep1s0f1", None),
)
CABLE_SUBNET_BASE = ipaddress.IPv4Network("10.251.0.0/24")  # cable k: 10.251.k.0/24


@dataclass(frozen=True)
class Cable:
    """One point-to-point cable of a cabled shape: (node, port key) at each end."""

    ends: tuple[tuple[str, str], tuple[str, str]]

    @property
    def nodes(self) -> tuple[str, str]:
        return self.ends[0][0], self.ends[1][0]


def _cable(a: str, b: str) -> Cable:
    """"spark-0:a", "spark-1:a" -> the cable between those two ports."""
    (na, _, ka), (nb, _, kb) = a.partition(":"), b.partition(":")
    return Cable(((na, ka), (nb, kb)))


@dataclass(frozen=True)
class Shape:
    """One way the lab cables its Sparks, with what its inventory says about it."""

    name: str  # what `lab up --shape` takes
    topology: str  # sparkctl_topology of the inventory (the model's switch|triangle|ring|pair)
    node_count: int
    profile: str  # the published profile the shape's example serves
    example: str  # inventory/examples/<example>: the shipped site of this shape
    cables: tuple[Cable, ...] = field(default=())  # cabled shapes; () on a switch

    @property
    def switched(self) -> bool:
        return not self.cables

    @property
    def ports(self) -> tuple[Half, ...]:
        return HALVES if self.switched else PHYSICAL_PORTS

    @property
    def tp(self) -> int:
        """One group of every node: its tensor-parallel size."""
        return self.node_count


# The cables as the shipped examples draw them. triangle (triangle-tp3): a node's cable to its
# lower-numbered peer leaves port a (…np0), the other port b (…np1). ring (ring-tp4): rank r's port a
# goes to rank r+1, its port b to rank r-1, so opposite nodes (0/2, 1/3) have no cable.
SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("switch4", "switch", 4, "lab", "example"),
        Shape("triangle", "triangle", 3, "mia-tp3", "triangle-tp3", (
            _cable("spark-0:a", "spark-1:a"),
            _cable("spark-0:b", "spark-2:a"),
            _cable("spark-1:b", "spark-2:b"),
        )),
        Shape("ring", "ring", 4, "mia-ring-tp4", "ring-tp4", (
            _cable("spark-0:a", "spark-1:b"),
            _cable("spark-1:a", "spark-2:b"),
            _cable("spark-2:a", "spark-3:b"),
            _cable("spark-3:a", "spark-0:b"),
        )),
        Shape("switch8", "switch", 8, "sg17-tp8", "switch-tp8"),
    )
}
DEFAULT_SHAPE = "switch4"
NODE_COUNT = SHAPES[DEFAULT_SHAPE].node_count  # the default shape's (the four-node lab)
LARGEST = max(SHAPES.values(), key=lambda s: s.node_count)
MAX_NODES = LARGEST.node_count
_active: list[Shape] = [SHAPES[DEFAULT_SHAPE]]


def get_shape(name: str) -> Shape:
    """The shape called `name`; ValueError naming the known ones otherwise."""
    if name not in SHAPES:
        raise ValueError(f"unknown lab shape {name!r} (expected one of: {', '.join(SHAPES)})")
    return SHAPES[name]


def use_shape(name: str) -> Shape:
    """Make `name` the shape every function of this module answers for (the lab's recorded one)."""
    _active[0] = get_shape(name)
    return _active[0]


def shape() -> Shape:
    """The shape this process works on: the recorded lab's, else the default."""
    return _active[0]


def fabric_ports(sh: Shape | None = None) -> tuple[Half, ...]:
    """A node's fabric ports in this shape."""
    return (sh or shape()).ports


def half(key: str, sh: Shape | None = None) -> Half:
    ports = fabric_ports(sh)
    for h in ports:
        if h.key == key:
            return h
    raise ValueError(f"unknown fabric half {key!r} (expected one of: {', '.join(h.key for h in ports)})")


def node_names(sh: Shape | None = None) -> list[str]:
    return [node_name(rank) for rank in range((sh or shape()).node_count)]


def node_name(rank: int) -> str:
    return f"spark-{rank}"


def machines(sh: Shape | None = None) -> list[str]:
    """Every container of the lab: its nodes, then the switch."""
    return [*node_names(sh), SWITCH_NAME]


def every_machine() -> list[str]:
    """The machines of the largest shape: what a clean-up looks for when it cannot know the shape."""
    return machines(LARGEST)


def rank_of(node: str, sh: Shape | None = None) -> int:
    """spark-K -> K; raises ValueError for anything that is not a node of the shape."""
    prefix = "spark-"
    if node.startswith(prefix) and node[len(prefix) :].isdigit():
        rank = int(node[len(prefix) :])
        if 0 <= rank < (sh or shape()).node_count:
            return rank
    raise ValueError(f"{node!r} is not a lab node (expected one of: {', '.join(node_names(sh))})")


def cable_subnet(index: int) -> ipaddress.IPv4Network:
    """The subnet of cable `index` of a cabled shape."""
    base = CABLE_SUBNET_BASE
    return ipaddress.IPv4Network(f"{base.network_address + base.num_addresses * index}/{base.prefixlen}")


def fabric_subnets(sh: Shape | None = None) -> list[ipaddress.IPv4Network]:
    """sparkctl_fabric.subnets: one per half on a switch, one per cable on a cabled shape."""
    sh = sh or shape()
    if sh.switched:
        return [h.subnet for h in HALVES if h.subnet is not None]
    return [cable_subnet(i) for i in range(len(sh.cables))]


def cable_of(node: str, h: Half, sh: Shape | None = None) -> int:
    """Index of the cable at port `h` of `node` (cabled shapes); ValueError where none is."""
    sh = sh or shape()
    for i, c in enumerate(sh.cables):
        if (node, h.key) in c.ends:
            return i
    raise ValueError(f"{sh.name}: no cable at port {h.key} ({h.netdev}) of {node}")


def peer(node: str, h: Half, sh: Shape | None = None) -> str:
    """The node at the other end of the cable at port `h` of `node` (cabled shapes)."""
    sh = sh or shape()
    cable = sh.cables[cable_of(node, h, sh)]
    return next(n for n, k in cable.ends if (n, k) != (node, h.key))


def neighbours(node: str, sh: Shape | None = None) -> set[str]:
    """The nodes `node` reaches over the fabric: every other node on a switch, its cabled peers else."""
    sh = sh or shape()
    if sh.switched:
        return set(node_names(sh)) - {node}
    return {peer(node, h, sh) for h in sh.ports}


def segments(sh: Shape | None = None) -> dict[str, list[str]]:
    """The bridges inside lab-switch and their ports: br-fabric with every port on a switch; one
    bridge per cable (its two ends' ports) on a cabled shape."""
    sh = sh or shape()
    if sh.switched:
        return {FABRIC_BRIDGE: switch_ports(sh)}
    return {
        cable_bridge(i): [switch_port(n, half(k, sh), sh) for n, k in c.ends] for i, c in enumerate(sh.cables)
    }


def cable_bridge(index: int) -> str:
    return f"br-cable{index}"


def segment_of(node: str, h: Half, sh: Shape | None = None) -> str:
    """The bridge the port `h` of `node` is plugged into."""
    sh = sh or shape()
    return FABRIC_BRIDGE if sh.switched else cable_bridge(cable_of(node, h, sh))


def mgmt_ip(machine: str, sh: Shape | None = None) -> ipaddress.IPv4Address:
    if machine == SWITCH_NAME:
        return ipaddress.IPv4Address(SWITCH_MGMT_IP)
    return ipaddress.IPv4Address(MGMT_SUBNET.network_address + MGMT_HOST_BASE + rank_of(machine, sh))


def mgmt_iface(machine: str) -> str:
    return SWITCH_MGMT_IFACE if machine == SWITCH_NAME else MGMT_IFACE


def fabric_ip(node: str, h: Half, sh: Shape | None = None) -> ipaddress.IPv4Interface:
    """The static address the fabric role gives port `h` of `node` (with the subnet's prefix): in
    the half's subnet on a switch, in the cable's on a cabled shape."""
    sh = sh or shape()
    subnet = h.subnet if sh.switched and h.subnet is not None else cable_subnet(cable_of(node, h, sh))
    addr = subnet.network_address + MGMT_HOST_BASE + rank_of(node, sh)
    return ipaddress.IPv4Interface(f"{addr}/{subnet.prefixlen}")


def switch_port(node: str, h: Half, sh: Shape | None = None) -> str:
    """The lab switch port a node's half is cabled to: spark-2 half a -> s2a."""
    return f"s{rank_of(node, sh)}{h.key}"


def switch_ports(sh: Shape | None = None) -> list[str]:
    return [switch_port(n, h, sh) for n in node_names(sh) for h in fabric_ports(sh)]


def port_owner(port: str, sh: Shape | None = None) -> tuple[str, Half]:
    """s2a -> (spark-2, half a); ValueError for an unknown port."""
    for n in node_names(sh):
        for h in fabric_ports(sh):
            if switch_port(n, h, sh) == port:
                return n, h
    raise ValueError(f"{port!r} is not a lab switch port (ports: {', '.join(switch_ports(sh))})")


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
    # The switch keeps index 4 (its MAC as in the four-node lab); nodes 4.. of a larger shape follow it.
    if machine == SWITCH_NAME:
        return SWITCH_INDEX
    rank = rank_of(machine)
    return rank if rank < SWITCH_INDEX else rank + 1


SWITCH_INDEX = 4


def mgmt_mac(machine: str) -> str:
    """MAC of the machine-side management interface."""
    return _mac(0, _index(machine))


def mgmt_host_mac(machine: str) -> str:
    """MAC of the controller-side end of the management veth."""
    return _mac(1, _index(machine))


def fabric_mac(node: str, h: Half) -> str:
    return _mac(2, rank_of(node), _port_index(h))


def switch_port_mac(node: str, h: Half) -> str:
    return _mac(3, rank_of(node), _port_index(h))


def _port_index(h: Half) -> int:
    return [p.key for p in fabric_ports()].index(h.key)
