"""The fabric's links and the `check fabric` matrix, for every topology. Pure.

A link is one fabric subnet and the ports in it, read from the inventory's addresses. On a switch
a subnet is one PCIe half's L2 domain with a port of every node in it; on a triangle, a ring or a
pair it is one cable (or one PCIe half of one cable) with exactly its two ends. Two ports reach
each other directly when they share a subnet, so the matrix `check fabric` pings is: from every
port, every other node's port in the same subnet. That is every ordered pair over every half on a
switch (as it always was), every cable in both directions on a triangle and a pair, and the
neighbours only on a ring, where opposite nodes share no cable: those pairs are listed as having
no direct path, which a ring expects (NCCL runs ring-only there) and any other topology does not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: render never imports the model at run time
    from ipaddress import IPv4Address

    from sparkctl.model.cluster import Cluster, Node

# Topologies cabled node to node: a fabric subnet there is one cable.
CABLED = ("triangle", "ring", "pair")


@dataclass(frozen=True)
class End:
    """One port in a link: its node, its place in the node's sparkctl_fabric_ports, its names."""

    node: str
    index: int
    netdev: str
    hca: str
    ip: str


@dataclass(frozen=True)
class Link:
    """One fabric subnet and every port in it, in rank order (on a cabled topology: one cable)."""

    subnet: str
    ends: tuple[End, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.node for e in self.ends))


@dataclass(frozen=True)
class Ping:
    """One jumbo ping of the matrix: from ``src``'s port ``index`` to ``peer``'s port in the same
    subnet. The keys are the fabric probe's (roles/spark_fabric library sparkctl_fabric_probe)."""

    peer: str
    index: int  # the source port's place in the source node's sparkctl_fabric_ports
    netdev: str  # the source port
    src: str  # the source address
    dst: str  # the peer's address
    dst_netdev: str  # the peer's port
    subnet: str


@dataclass(frozen=True)
class NoPath:
    """Two nodes that share no fabric subnet: no direct path between them."""

    nodes: tuple[str, str]
    expected: bool  # a ring's opposite nodes; anywhere else it is a cabling or addressing fault
    why: str


def cabled(cluster: Cluster) -> bool:
    """Whether the site is cabled node to node (a fabric subnet is one cable)."""
    return cluster.topology in CABLED


def _in_rank_order(cluster: Cluster) -> list[Node]:
    return sorted(cluster.nodes, key=lambda n: (n.rank, n.name))


def links(cluster: Cluster) -> list[Link]:
    """Every fabric subnet with the ports in it, in the inventory's subnet order."""
    out = []
    for net in cluster.fabric.subnets:
        ends = tuple(
            End(node=n.name, index=i, netdev=str(p.netdev), hca=str(p.hca), ip=str(p.ip))
            for n in _in_rank_order(cluster) for i, p in enumerate(n.fabric_ports) if p.ip in net
        )
        out.append(Link(subnet=str(net), ends=ends))
    return out


def node_links(cluster: Cluster, node: Node) -> list[Link]:
    """The links ``node`` has a port in."""
    return [link for link in links(cluster) if node.name in link.nodes]


def pings(cluster: Cluster, node: Node) -> list[Ping]:
    """The jumbo pings ``node`` sends: for every other node (by name, as the probe always went),
    from each of this node's ports to each of the peer's ports in the same subnet."""
    by_subnet = {link.subnet: link for link in links(cluster)}
    own = [(i, p, _subnet_of(cluster, p.ip)) for i, p in enumerate(node.fabric_ports)]
    out: list[Ping] = []
    for peer in sorted(n.name for n in cluster.nodes if n.name != node.name):
        for i, port, subnet in own:
            if subnet is None:
                continue
            for end in by_subnet[subnet].ends:
                if end.node == peer:
                    out.append(Ping(peer=peer, index=i, netdev=str(port.netdev), src=str(port.ip),
                                    dst=end.ip, dst_netdev=end.netdev, subnet=subnet))
    return out


def _subnet_of(cluster: Cluster, ip: IPv4Address) -> str | None:
    return next((str(s) for s in cluster.fabric.subnets if ip in s), None)


def no_direct_path(cluster: Cluster) -> list[NoPath]:
    """Node pairs (rank order) that share no fabric subnet, each with whether that is expected."""
    shared: set[frozenset[str]] = set()
    for link in links(cluster):
        names = link.nodes
        shared.update(frozenset((a, b)) for i, a in enumerate(names) for b in names[i + 1:])
    ordered = [n.name for n in _in_rank_order(cluster)]
    out = []
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if frozenset((a, b)) in shared:
                continue
            if cluster.topology == "ring":
                why = (f"opposite nodes on the ring: no cable joins {a} and {b}, so NCCL runs ring-only "
                       "and never connects them directly")
                out.append(NoPath(nodes=(a, b), expected=True, why=why))
            else:
                why = (f"no fabric subnet holds a port of both {a} and {b}: on a {cluster.topology} every "
                       "pair of nodes reaches the other directly")
                out.append(NoPath(nodes=(a, b), expected=False, why=why))
    return out


def bandwidth_rounds(cluster: Cluster) -> list[list[dict[str, Any]]]:
    """The ib_write_bw rounds of `check fabric` on hardware: every node pair with a direct path once,
    in rounds of disjoint pairs (a round-robin over the nodes by name), each pair with its lanes: the
    source's ports and the peer's port at the other end of the same link (both halves of a switch
    port, each half of a cable). A ring's opposite pairs have no lane and are left out."""
    names = sorted(n.name for n in cluster.nodes)
    by_name = {n.name: n for n in cluster.nodes}
    ring = names + ([""] if len(names) % 2 else [])
    n = len(ring)
    rounds: list[list[dict[str, Any]]] = []
    for r in range(n - 1):
        others = ring[1:]
        arr = [ring[0], *others[r:], *others[:r]]
        pairs = []
        for i in range(n // 2):
            src, dst = arr[i], arr[n - 1 - i]
            if not (src and dst):
                continue
            lanes = _lanes(cluster, by_name[src], by_name[dst])
            if lanes:
                pairs.append({"src": src, "dst": dst, "lanes": lanes})
        if pairs:
            rounds.append(pairs)
    return rounds


def _lanes(cluster: Cluster, src: Node, dst: Node) -> list[dict[str, Any]]:
    """The port pairs ``src`` measures ``dst`` over: one per link they share."""
    out = []
    for ping in pings(cluster, src):
        if ping.peer != dst.name:
            continue
        j = next(i for i, p in enumerate(dst.fabric_ports) if str(p.ip) == ping.dst)
        out.append({"index": ping.index, "netdev": ping.netdev, "hca": str(src.fabric_ports[ping.index].hca),
                    "peer_index": j, "peer_hca": str(dst.fabric_ports[j].hca), "peer_ip": ping.dst})
    return out


def check_matrix(cluster: Cluster) -> dict[str, Any]:
    """The `check fabric` matrix as data: the links, every node's pings, the pairs with no direct path.

    What the spark_fabric role's probe sends (``pings[node]``, through ``sparkctl_cluster``) and what
    the verdict (``sparkctl.qa.fabric``) holds the answers to."""
    return {
        "topology": cluster.topology,
        "links": [{"subnet": link.subnet, "ends": [asdict(e) for e in link.ends]} for link in links(cluster)],
        "pings": {n.name: [asdict(p) for p in pings(cluster, n)] for n in _in_rank_order(cluster)},
        "no_direct_path": [{"nodes": list(p.nodes), "expected": p.expected, "why": p.why}
                           for p in no_direct_path(cluster)],
        "bandwidth_rounds": bandwidth_rounds(cluster),
    }


def peer_subnets(cluster: Cluster, node: Node) -> list[str]:
    """The fabric subnets rank traffic may reach ``node`` from: every subnet on a switch, only the
    subnets of its own cables on a cabled topology (no other fabric subnet reaches it)."""
    if not cabled(cluster):
        return [str(s) for s in cluster.fabric.subnets]
    return [link.subnet for link in node_links(cluster, node)]


def subnet_prefix_len(cluster: Cluster) -> int | None:
    """The prefix length every fabric subnet shares (None: they differ)."""
    lengths = {s.prefixlen for s in cluster.fabric.subnets}
    return lengths.pop() if len(lengths) == 1 else None
