"""Who pulls from whom: the staging chain over the fabric (standard library only; pure).

The head (rank 0) holds the checkpoint. Rank r pulls from rank r-1 and serves rank r+1, so a
file streams down the chain with every node forwarding while it receives: total time stays
near one copy's time instead of N. A chain (rather than a tree) keeps each node's NIC busy in
one direction per link, which is what a switched fabric of point-to-point 200 Gb/s ports wants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Route:
    node: str
    rank: int
    address: str  # where this node's agent listens (fabric address by default)
    listen: tuple[str, int] | None  # None for the last node of the chain
    upstream: tuple[str, int] | None  # None for the head (the source)
    downstream: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "rank": self.rank,
            "address": self.address,
            "listen": list(self.listen) if self.listen else None,
            "upstream": list(self.upstream) if self.upstream else None,
            "downstream": self.downstream,
        }


def chain(peers: list[dict[str, Any]], port: int) -> list[Route]:
    """Routes for peers ``[{"name", "rank", "address"}, ...]`` (any order), head first."""
    ordered = sorted(peers, key=lambda p: int(p["rank"]))
    ranks = [int(p["rank"]) for p in ordered]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"duplicate ranks in {ranks}")
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} out of range")
    routes = []
    for i, p in enumerate(ordered):
        nxt = ordered[i + 1] if i + 1 < len(ordered) else None
        prev = ordered[i - 1] if i > 0 else None
        routes.append(
            Route(
                node=str(p["name"]),
                rank=int(p["rank"]),
                address=str(p["address"]),
                listen=(str(p["address"]), port) if nxt is not None else None,
                upstream=(str(prev["address"]), port) if prev is not None else None,
                downstream=str(nxt["name"]) if nxt is not None else None,
            )
        )
    return routes


def route_for(peers: list[dict[str, Any]], port: int, node: str) -> Route:
    for r in chain(peers, port):
        if r.node == node:
            return r
    raise ValueError(f"{node} is not among the staging peers {[p['name'] for p in peers]}")
