"""Serving groups as renderer input: each group of a site is rendered as a cluster of its own.

A site serves one or more groups (``sparkctl_groups``, sparkctl.model.topology), each a profile
over an ordered list of nodes. Everything a rank needs is rendered per group: its profile's argv
and environment, ``--nnodes`` the group's size, ``--node-rank`` the node's place in the group
(``Group.rank_of``), the rendezvous at the group's first node's bootstrap address
(``--dist-init-addr``), the API on the group's rank 0, its own start waves and readiness gates,
its own name (``<site>-<group>``: its containers, units and readiness records).

``view`` gives that group as a ``Cluster`` (the group's profile, its nodes with their group ranks),
so the rank renderers (sparkctl.render.rank) need no notion of groups. A site of one group that
holds every node in ``sparkctl_rank`` order is its own view: it renders byte for byte as a site
without ``sparkctl_groups``.

Groups never share a node, so every group's rendezvous (``ports.dist_init``) and API
(``ports.api``) listen on a different host: the same port numbers from ``sparkctl_ports`` give each
group a rendezvous and an API of its own.

``endpoints`` lists each group's rank-0 API (address, port): the one list a front door over the
groups (a router) is rendered from.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkctl.errors import InputError
from sparkctl.render import rank

if TYPE_CHECKING:  # annotations only: render never imports the model at run time
    from sparkctl.model.cluster import Cluster, Group, Node


def plain(cluster: Cluster) -> bool:
    """True for a site that is one group of every node in rank order with the site's profile
    (a site without ``sparkctl_groups``): its plan and facts carry no group entries, as always."""
    if not cluster.groups:  # a cluster built without groups (the model always lists one)
        return True
    return len(cluster.groups) == 1 and _is_whole(cluster, cluster.groups[0])


def _is_whole(cluster: Cluster, group: Group) -> bool:
    """The group is the whole site as it is: every node, in rank order, with the site's profile."""
    if len(cluster.groups) != 1:
        return False
    if group.profile is not cluster.profile and group.profile != cluster.profile:
        return False
    if len(group.nodes) != len(cluster.nodes):
        return False
    by_name = {n.name: n for n in cluster.nodes}
    return all(name in by_name and by_name[name].rank == i for i, name in enumerate(group.nodes))


def view(cluster: Cluster, group: Group) -> Cluster:
    """The group as a cluster: its profile, its nodes in group order numbered 0..n-1, itself its
    only group. The site itself when the group is the whole site (one group, nothing renumbered)."""
    if _is_whole(cluster, group):
        return cluster
    by_name = {n.name: n for n in cluster.nodes}
    nodes = [by_name[name].model_copy(update={"rank": i}) for i, name in enumerate(group.nodes)]
    return cluster.model_copy(update={"name": view_name(cluster, group), "profile": group.profile,
                                      "nodes": nodes, "groups": [group]})


def view_name(cluster: Cluster, group: Group) -> str:
    """A group's own name where its site has others: ``<site>-<group>``. It names the group's rank
    containers and units, its readiness records and its run records, so two groups never share one."""
    return f"{cluster.name}-{group.name}"


def group(cluster: Cluster, name: str) -> Group:
    """The serving group called ``name`` (InputError naming the groups there are)."""
    for g in cluster.groups:
        if g.name == name:
            return g
    names = ", ".join(g.name for g in cluster.groups) or "none"
    raise InputError(f"--group {name}: no serving group of that name in {cluster.inventory_dir}",
                     hint=f"use one of: {names} (sparkctl_groups)")


def node_view(cluster: Cluster, node: Node) -> tuple[Cluster, Node] | None:
    """The node's group as a cluster and the node in it (its group rank); None for a spare node
    (in no group: provisioned and staged, serving nothing)."""
    if plain(cluster):
        return cluster, node
    g = cluster.group_of(node.name)
    if g is None:
        return None
    v = view(cluster, g)
    return v, v.node(node.name)


def select(cluster: Cluster, names: Iterable[str] | None) -> list[Group]:
    """The groups a verb acts on: those ``--group`` names (each checked, in the site's order), or
    every group when none is named."""
    wanted = list(dict.fromkeys(names or ()))
    if not wanted:
        return list(cluster.groups)
    for name in wanted:
        group(cluster, name)
    return [g for g in cluster.groups if g.name in wanted]


def restrict(cluster: Cluster, names: Iterable[str] | None) -> Cluster:
    """The site reduced to the named groups (all of them when none is named): their nodes and only
    them, so a verb's playbook, SSH fan-out and gates touch nothing else. With one group left the
    result is that group's view (its ranks 0..n-1); the site itself when nothing is left out."""
    chosen = select(cluster, names)
    if len(chosen) == len(cluster.groups):
        return cluster
    if len(chosen) == 1:
        return view(cluster, chosen[0])
    keep = {n for g in chosen for n in g.nodes}
    nodes = [n for n in cluster.nodes if n.name in keep]
    return cluster.model_copy(update={"nodes": nodes, "groups": chosen})


def start_waves(cluster: Cluster) -> list[list[int]]:
    """Rank waves in start order over every group at once (groups come up side by side): every
    group's workers, then every group's rank 0. A node starts in the wave of its group rank."""
    if plain(cluster):
        return rank.start_waves(cluster)
    ranks: set[int] = set()
    for g in cluster.groups:
        for wave in rank.start_waves(view(cluster, g)):
            ranks.update(wave)
    workers = sorted(r for r in ranks if r != 0)
    return [workers, [0]]


@dataclass(frozen=True)
class Endpoint:
    """Where one group's API answers: its rank 0's management address and ``ports.api``."""

    group: str
    node: str
    address: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"


def endpoints(cluster: Cluster) -> list[Endpoint]:
    """Each group's rank-0 API, in the site's group order: what a router in front of the groups
    sends requests to (and what `status` probes per group)."""
    views = [(g.name, view(cluster, g)) for g in cluster.groups] or [("main", cluster)]
    return [Endpoint(group=name, node=v.head.name, address=str(v.head.mgmt_ip), port=v.ports.api)
            for name, v in views]


def group_entry(cluster: Cluster, g: Group) -> dict[str, Any]:
    """One group of the plan document and of the cluster facts."""
    v = view(cluster, g)
    return {
        "name": g.name,
        "profile": g.profile.name,
        "tp_size": g.profile.tp_size,
        "engram": g.profile.engram,
        "nodes": list(g.nodes),
        "head": v.head.name,
        "dist_init_addr": rank.dist_init_addr(v),
        "api_url": rank.api_url(v),
        "served_model_name": rank.served_model_name(v),
        "start_waves": rank.start_waves(v),
    }


def node_group(cluster: Cluster, node: Node) -> dict[str, Any]:
    """What a node's roles read about its group (the vars plugin's ``sparkctl_group``): the group's
    name, the node's rank in it, the group's TP and Engram placement. A spare node has no group:
    ``name`` null, its site rank, the site profile's TP, ``serving`` false."""
    found = node_view(cluster, node)
    if found is None:
        return {"name": None, "serving": False, "rank": node.rank, "tp_size": cluster.profile.tp_size,
                "engram": cluster.profile.engram, "profile": cluster.profile.name, "head": cluster.head.name}
    v, n = found
    return {"name": v.groups[0].name, "serving": True, "rank": n.rank, "tp_size": v.profile.tp_size,
            "engram": v.profile.engram, "profile": v.profile.name, "head": v.head.name}
