"""A site's shape: its fabric topology (``sparkctl_topology``) and its serving groups
(``sparkctl_groups``), validated together.

A topology says how the Sparks are cabled. ``switch`` (the default): every node's ConnectX-7 port
on one RoCE switch. ``triangle``: three nodes, each using both physical ports, one cable and one
subnet per pair. ``ring``: four nodes, each cabled to its two neighbours only, so opposite nodes have
no direct path (NCCL must run ring-only: TP4 profiles published for the ring). ``pair``: two nodes
on one cable. On every cabled topology a fabric subnet is one cable: exactly two nodes have ports
in it, and the cables are read from the addresses.

A group is a profile over an ordered list of nodes: a node's place in the list is its rank in the
group, the first node its head. The list follows ``sparkctl_rank`` (ranks are numbered once,
there). Without ``sparkctl_groups`` the site has one group, ``main``: every node in
``sparkctl_rank`` order with ``sparkctl_profile`` (and its overrides), exactly today's site.
A group without ``profile`` takes the site's profile and overrides; one with its own ``profile``
takes only its own ``profile_overrides``.

Every problem names its field, like the other cross-field checks; nothing is contacted.
"""

from __future__ import annotations

import re
from collections import defaultdict
from ipaddress import IPv4Network
from itertools import pairwise
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from sparkctl.errors import SparkctlError
from sparkctl.model.cluster import Fabric, Group, Node
from sparkctl.model.draft import Draft
from sparkctl.model.problems import Problems, suggest
from sparkctl.model.types import ShortName
from sparkctl.profiles import Profile, list_profiles, load_profile
from sparkctl.profiles.shape import TOPOLOGY_NODES

DEFAULT_GROUP = "main"
# The physical ConnectX-7 port a netdev belongs to, from the kernel's name (…np0 / …np1).
_PHYS_PORT = re.compile(r"np(\d+)$")


class GroupSpec(BaseModel):
    """One entry of ``sparkctl_groups`` as written in the inventory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ShortName
    nodes: list[ShortName] = Field(min_length=1)  # in sparkctl_rank order: the first is the group's head
    profile: StrictStr | None = None  # null: sparkctl_profile
    profile_overrides: dict[StrictStr, Any] | None = None  # null: the site's, when profile is null


def _topology(d: Draft) -> str:
    return str(d.get("sparkctl_topology") or "switch")


def _in_rank_order(d: Draft) -> list[str]:
    return sorted(d.spark_names, key=lambda n: (d.ranks.get(n, 1 << 30), n))


def _load(name: str, overrides: dict[str, Any], i: int, p: Problems) -> Profile | None:
    where = f"sparkctl_groups[{i}].profile_overrides"
    try:
        return load_profile(name, overrides, where=where)
    except SparkctlError as exc:
        todo = exc.hint or "fix it"
        if not exc.details:
            p.add(f"sparkctl_groups[{i}].profile", exc.message, todo)
        for detail in exc.details:
            path, _, what = detail.partition(": ")
            if path.startswith(f"profile {name}"):
                path = f"sparkctl_groups[{i}].profile ({name})"
            p.add(path, what or detail, todo)
        return None


def resolve_groups(d: Draft, p: Problems) -> list[Group]:
    """The site's serving groups, their profiles loaded; problems for what cannot be loaded."""
    specs: list[GroupSpec] | None = d.get("sparkctl_groups")
    if specs is None:
        if d.profile is None or not d.spark_names:
            return []
        return [Group(name=DEFAULT_GROUP, profile=d.profile, nodes=_in_rank_order(d))]
    if not specs:
        p.add("sparkctl_groups", "an empty list", "list at least one group, or remove the key "
              "(one group of every node with sparkctl_profile)")
        return []
    site_name = d.get("sparkctl_profile")
    groups: list[Group] = []
    for i, spec in enumerate(specs):
        profile: Profile | None
        if spec.profile is None and spec.profile_overrides is None:
            profile = d.profile
        else:
            name = spec.profile if spec.profile is not None else site_name
            if not isinstance(name, str):
                continue  # sparkctl_profile itself is reported
            overrides = spec.profile_overrides
            if overrides is None:
                overrides = (d.get("sparkctl_profile_overrides") or {}) if spec.profile is None else {}
            profile = _load(name, overrides, i, p)
        if profile is not None:
            groups.append(Group(name=spec.name, profile=profile, nodes=list(spec.nodes)))
    return groups


def _profile_path(d: Draft, group: Group) -> str:
    """The field a group's profile comes from, for a problem with it."""
    specs: list[GroupSpec] | None = d.get("sparkctl_groups")
    for i, spec in enumerate(specs or []):
        if spec.name == group.name and (spec.profile is not None or spec.profile_overrides is not None):
            return f"sparkctl_groups[{i}].profile"
    return "sparkctl_profile"


def check_groups(d: Draft, p: Problems, warnings: list[str]) -> None:
    """Group names, members, overlaps, and each group's size against its profile's ranks."""
    specs: list[GroupSpec] | None = d.get("sparkctl_groups")
    if not specs:
        return  # the default group is held to the node count by check_topology
    known = set(d.spark_names)
    owner: dict[str, tuple[int, str]] = {}
    names: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if spec.name in names:
            p.add(f"sparkctl_groups[{i}].name", f"{spec.name} is also sparkctl_groups[{names[spec.name]}]",
                  "give each group its own name")
        names.setdefault(spec.name, i)
        for j, node in enumerate(spec.nodes):
            where = f"sparkctl_groups[{i}].nodes[{j}]"
            if node not in known:
                p.add(where, f"no node named {node}{suggest(node, known)}",
                      f"list hosts of the sparks group ({', '.join(sorted(known))})")
                continue
            if node in owner:
                k, other = owner[node]
                what = (f"{node} is listed twice in this group" if k == i
                        else f"{node} is already in group {other} (sparkctl_groups[{k}]): groups overlap")
                p.add(where, what, "give each node to one group only (a rank serves one group)")
                continue
            owner[node] = (i, spec.name)
    # Ranks are numbered once, by sparkctl_rank: a group lists its nodes in that order, so a node's
    # place in its group and its sparkctl_rank never disagree.
    for i, spec in enumerate(specs):
        ranked = [(d.ranks[n], n) for n in spec.nodes if n in d.ranks]
        for (r0, a), (r1, b) in pairwise(ranked):
            if r1 < r0:
                p.add(f"sparkctl_groups[{i}].nodes",
                      f"{b} (sparkctl_rank {r1}) is listed after {a} (sparkctl_rank {r0})",
                      "list the group's nodes in sparkctl_rank order (the first is the group's head)")
                break
    profiles = {g.name: g.profile for g in d.groups}
    for i, spec in enumerate(specs):
        prof = profiles.get(spec.name)
        if prof is None:
            continue
        pp = prof._int("--pp-size", 1)
        ranks = prof.tp_size * pp
        if len(spec.nodes) != ranks:
            p.add(f"sparkctl_groups[{i}].nodes",
                  f"{len(spec.nodes)} nodes, but {prof.name} has --tp-size {prof.tp_size} x --pp-size {pp} = "
                  f"{ranks} ranks (one rank per node)",
                  f"list {ranks} nodes in group {spec.name}, or give it a profile of {len(spec.nodes)} ranks")
    spare = [n for n in _in_rank_order(d) if n not in owner]
    if spare:
        warnings.append(f"{', '.join(spare)} in no serving group (sparkctl_groups): provisioned and staged, "
                        "but serving nothing")


def _subnet_members(nodes: list[Node], subnets: list[IPv4Network]) -> list[dict[str, list[int]]]:
    """Per fabric subnet: node name -> indexes of its ports in that subnet."""
    out: list[dict[str, list[int]]] = [defaultdict(list) for _ in subnets]
    for n in nodes:
        for j, port in enumerate(n.fabric_ports):
            for k, net in enumerate(subnets):
                if port.ip in net:
                    out[k][n.name].append(j)
    return out


def _phys_port(netdev: str) -> int | None:
    m = _PHYS_PORT.search(netdev)
    return int(m.group(1)) if m else None


def check_cabling(d: Draft, p: Problems) -> None:
    """A cabled topology (triangle, ring, pair): its node count, no switch, one cable per subnet,
    the cables the topology needs, and on a ring consecutive ranks on neighbouring nodes."""
    topo = _topology(d)
    if topo == "switch":
        return
    count = len(d.spark_names)
    need = TOPOLOGY_NODES[topo]
    if d.switch_names:
        p.add("all.children.switches", f"a switch is listed, but sparkctl_topology is {topo} (cabled "
              "directly, node to node)", "remove the switches group, or set sparkctl_topology: switch")
    if count != need:
        p.add("sparkctl_topology",
              f"{topo} needs exactly {need} nodes, the sparks group has {count}",
              f"cable {need} Sparks as a {topo}, or use sparkctl_topology: switch "
              f"(a RoCE switch) for {count}")
        return
    fabric: Fabric | None = d.get("sparkctl_fabric")
    if fabric is not None and topo in ("triangle", "ring"):
        # A node's fabric address is one cable's: reachable from one neighbour, not from every rank.
        if fabric.bootstrap_over == "fabric":
            p.add("sparkctl_fabric.bootstrap_over",
                  f"fabric on a {topo}: the head's fabric address is on one of its cables, which the "
                  "other ranks do not all reach directly",
                  "set bootstrap_over: mgmt (NCCL/Gloo bootstrap and --dist-init-addr on the management "
                  "network, as the publisher does) and stage_over_fabric: false")
        elif fabric.stage_over_fabric:
            p.add("sparkctl_fabric.stage_over_fabric",
                  f"true on a {topo}: staging fans out from the head's fabric address, which not every "
                  "node reaches directly",
                  "set stage_over_fabric: false (staging over the management network)")
    if fabric is None or len(d.nodes) != count:
        return  # the fabric section or a node did not validate: reported already
    members = _subnet_members(d.nodes, fabric.subnets)
    cables: dict[frozenset[str], list[int]] = defaultdict(list)
    for k, (net, owners) in enumerate(zip(fabric.subnets, members, strict=True)):
        where = f"sparkctl_fabric.subnets[{k}]"
        names = sorted(owners)
        if not names:
            p.add(where, f"no node has a port in {net}",
                  f"on a {topo} each subnet is one cable between two nodes: remove it, or address the "
                  "two ports of that cable in it")
        elif len(names) == 1:
            p.add(where, f"only {names[0]} has a port in {net}: the cable's other end has none",
                  "address the port at the other end of that cable in it")
        elif len(names) > 2:
            p.add(where, f"ports of {len(names)} nodes ({', '.join(names)}) in {net}: on a {topo} a "
                  "subnet is one point-to-point cable", "give each cable its own subnet")
        else:
            cables[frozenset(names)].append(k)
    order = _ring_order(d)
    if topo == "triangle":
        _check_triangle(d, p, cables, order)
    elif topo == "ring":
        _check_ring(d, p, cables, order)
    elif topo == "pair" and not cables:
        p.add("sparkctl_fabric.subnets", f"no subnet joins {order[0]} and {order[1]}",
              "address the two ends of the cable in one subnet (one per PCIe half)")


def _ring_order(d: Draft) -> list[str]:
    """The nodes in the order their ranks run: the one group's, else sparkctl_rank's."""
    if len(d.groups) == 1 and len(d.groups[0].nodes) == len(d.spark_names):
        return list(d.groups[0].nodes)
    return _in_rank_order(d)


def _peers(cables: dict[frozenset[str], list[int]], name: str) -> list[str]:
    return sorted(next(iter(c - {name})) for c in cables if name in c)


def _check_triangle(d: Draft, p: Problems, cables: dict[frozenset[str], list[int]], order: list[str]) -> None:
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            if frozenset((a, b)) not in cables:
                p.add("sparkctl_fabric.subnets", f"no subnet (cable) joins {a} and {b}",
                      f"a triangle cables every pair: add the {a}–{b} cable's subnet and address one port "
                      "of each node in it")
    # Both physical ports: the cables to two different peers cannot share one physical port.
    by_name = {n.name: n for n in d.nodes}
    fabric: Fabric = d.get("sparkctl_fabric")
    for name in order:
        node = by_name[name]
        seen: dict[int, tuple[str, int]] = {}
        for j, port in enumerate(node.fabric_ports):
            phys = _phys_port(port.netdev)
            peer = next((next(iter(c - {name})) for c, nets in cables.items()
                         if name in c and any(port.ip in fabric.subnets[k] for k in nets)), None)
            if phys is None or peer is None:
                continue
            if phys in seen and seen[phys][0] != peer:
                p.add(f"sparks.{name}.sparkctl_fabric_ports[{j}].netdev",
                      f"{port.netdev} (physical port {phys}) carries the cable to {peer}, but port "
                      f"[{seen[phys][1]}] on the same physical port carries the one to {seen[phys][0]}",
                      "a triangle uses both physical ports, one cable each: list the other port's netdev "
                      "(…np0 / …np1) for one of the two peers")
            seen.setdefault(phys, (peer, j))


def _check_ring(d: Draft, p: Problems, cables: dict[frozenset[str], list[int]], order: list[str]) -> None:
    ranks = {name: i for i, name in enumerate(order)}
    for name in order:
        peers = _peers(cables, name)
        if len(peers) != 2:
            p.add(f"sparks.{name}.sparkctl_fabric_ports",
                  f"cabled to {len(peers)} node(s) ({', '.join(peers) or 'none'}): on a ring each node has "
                  "its two neighbours only",
                  "cable each node to the next and the previous one around the ring, one subnet per cable")
    for i, a in enumerate(order):
        b = order[(i + 1) % len(order)]
        if frozenset((a, b)) not in cables:
            p.add(f"sparks.{b}.sparkctl_rank",
                  f"rank {ranks[b]} ({b}) and rank {ranks[a]} ({a}) share no cable: on a ring consecutive "
                  "ranks are neighbours (a rank has no direct path to the opposite node)",
                  "number the ranks in cable order around the ring")


def check_profiles_on_topology(d: Draft, p: Problems) -> None:
    """Each group's profile against the topology it would run on."""
    topo = _topology(d)
    for group in d.groups:
        prof = group.profile
        if prof.fabric.carried_on(topo):
            continue
        published = ", ".join(prof.fabric.topologies or ["switch", "triangle", "pair"])
        others = [n for n in list_profiles() if load_profile(n).fabric.carried_on(topo)]
        why = " (a ring needs NCCL run ring-only, which the profile must declare)" if topo == "ring" else ""
        p.add(_profile_path(d, group),
              f"{prof.name} is published for {published}, not for a {topo}{why}",
              f"use a profile published for a {topo} ({', '.join(others) or 'none ships'}), or cable "
              f"the site as {published}")


def check_group_profiles(d: Draft, p: Problems) -> None:
    """Memory and disk of every group profile that is not the site's own (that one is checked by
    check_memory and check_disk)."""
    ck = d.get("sparkctl_checkpoint")
    by_name = {n.name: n for n in d.nodes}
    for group in d.groups:
        prof = group.profile
        if prof is d.profile:
            continue
        path = _profile_path(d, group)
        for text in prof.memory_problems():
            what, _, todo = text.rpartition("; ")
            p.add(f"{path} ({prof.name})", what or text, todo or "lower it")
        if ck is None or ck.size_gib is None:
            continue
        m = prof.memory
        need = ck.size_gib + m.engram_packed_gib + m.disk_margin_gib
        for name in group.nodes:
            node = by_name.get(name)
            if node is not None and node.nvme_gib is not None and need > node.nvme_gib:
                p.add(f"sparks.{name}.sparkctl_nvme_gib",
                      f"{node.nvme_gib:g} GiB < checkpoint {ck.size_gib:g} + packed Engram "
                      f"{m.engram_packed_gib:g} + margin {m.disk_margin_gib:g} = {need:.2f} GiB "
                      f"(group {group.name}, {prof.name})",
                      "free space on the NVMe filesystem, or correct sparkctl_nvme_gib")


def check_shape(d: Draft, p: Problems, warnings: list[str]) -> None:
    """Every rule of the site's shape (run with the other cross-field checks)."""
    check_groups(d, p, warnings)
    check_cabling(d, p)
    check_profiles_on_topology(d, p)
    check_group_profiles(d, p)
