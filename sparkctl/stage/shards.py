"""Which Engram shards each node packs: ``r{rank}of{tp}`` of its serving group.

A node's shards follow its group (``sparkctl.render.groups.node_group``): its rank in the group and
the group's TP, so two TP4 groups on eight nodes pack ``r0of4`` … ``r3of4`` twice, a TP8 group
``r0of8`` … ``r7of8``, a TP3 group ``r0of3`` … ``r2of3``, all by the same packing and verifying code
(``stage.dsv41en1``). A group whose profile keeps Engram resident in unified memory
(``engram: resident``, SG17's TP8) packs nothing: `stage engram` leaves its nodes alone and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkctl.render import groups

if TYPE_CHECKING:
    from sparkctl.model import Cluster, Node


@dataclass(frozen=True)
class Shards:
    """The Engram shards one node holds: ``r{rank}of{tp}``; ``packed`` false when its group keeps
    Engram resident (nothing on NVMe)."""

    node: str
    group: str | None
    profile: str
    rank: int
    tp: int
    packed: bool

    @property
    def label(self) -> str:
        return f"r{self.rank}of{self.tp}"


def of(cluster: Cluster, node: Node) -> Shards:
    g = groups.node_group(cluster, node)
    return Shards(node=node.name, group=g["name"], profile=g["profile"], rank=int(g["rank"]),
                  tp=int(g["tp_size"]), packed=g["engram"] == "nvme")


def resident_note(cluster: Cluster, what: str) -> str | None:
    """What `stage engram` says instead of packing when no node packs shards (every group keeps
    Engram resident); None when some node packs (or ``what`` is not engram)."""
    if what != "engram":
        return None
    every = [of(cluster, n) for n in cluster.nodes]
    if any(s.packed for s in every):
        return None
    profiles = ", ".join(sorted({s.profile for s in every}))
    return (f"stage engram: nothing to pack: {profiles} keeps Engram resident in unified memory "
            "(engram: resident), no shards go to NVMe")


def resident_nodes_note(cluster: Cluster, what: str) -> str | None:
    """Where some groups pack shards and others keep Engram resident: which nodes `stage WHAT`
    packs nothing on, and why (None when every node packs, or none does, or ``what`` packs none)."""
    if what not in ("engram", "all"):
        return None
    every = [of(cluster, n) for n in cluster.nodes]
    resident = [s for s in every if not s.packed]
    if not resident or len(resident) == len(every):
        return None
    by_group: dict[str, list[str]] = {}
    for s in resident:
        by_group.setdefault(f"{s.group or 'no group'} ({s.profile})", []).append(s.node)
    parts = [f"group {g}: {', '.join(nodes)}" for g, nodes in by_group.items()]
    return f"Engram resident in unified memory, no shards packed on {'; '.join(parts)}"
