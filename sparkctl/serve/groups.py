"""The serving verbs over several groups: which groups a verb acts on (``--group``, default all),
each as the cluster it runs on, and one verdict over them.

Each group is served as a one-group site is: ``Target.cluster`` is the group's view
(``sparkctl.render.groups.view``: its profile, its nodes with their group ranks 0..n-1, its head),
``Target.doc`` the site's plan document with that group's nodes only (each node's entry already
renders its group's rank), and ``Target.limit`` the Ansible ``--limit`` that keeps a playbook on
the group's nodes. `up` brings the groups up one after the other in the site's order, each ordered
(workers, then rank 0) and readiness-gated as today: a group is ready before the next one starts, so
two groups never compete for the controller's attention or hide each other's failing gate; a group
that fails stops its own ranks only and `up` stops there. `down` stops them in the same order.

A site of one group (every node, no ``sparkctl_groups``) is one target: the site itself, its whole
plan document and no limit, exactly what the verbs always ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkctl.render import groups as rgroups
from sparkctl.serve.verdict import DEGRADED, DOWN, READY

if TYPE_CHECKING:
    from sparkctl.model import Cluster

_ORDER = (READY, DEGRADED, DOWN)  # worst last


@dataclass(frozen=True)
class Target:
    """One serving group as a verb runs it."""

    group: str
    cluster: Cluster
    doc: dict[str, Any]
    limit: str | None  # Ansible --limit (the group's nodes); None: the whole site


def group_doc(doc: Mapping[str, Any], names: Sequence[str], profile: str) -> dict[str, Any]:
    """The plan document with only the nodes ``names`` (in the document's order) and their profile."""
    keep = set(names)
    return {**doc, "profile": profile, "nodes": [e for e in doc["nodes"] if e["name"] in keep]}


def targets(cluster: Cluster, doc: dict[str, Any], names: Iterable[str] | None = None) -> list[Target]:
    """The groups a verb acts on, in the site's order (``names``: the ``--group`` values; none: all).
    An unknown name is bad input (exit 2) naming the site's groups."""
    wanted = list(names or ())
    if rgroups.plain(cluster):
        rgroups.select(cluster, wanted)  # a --group that names no group is refused here too
        main = cluster.groups[0].name if cluster.groups else "main"
        return [Target(main, cluster, doc, None)]
    out = []
    for g in rgroups.select(cluster, wanted):
        view = rgroups.view(cluster, g)
        out.append(Target(g.name, view, group_doc(doc, g.nodes, g.profile.name), ",".join(g.nodes)))
    return out


def several(found: Sequence[Target]) -> bool:
    """True when the verb reports per group (more than one group on the site, or one named by
    ``--group`` out of several): its output then carries each group and an overall verdict."""
    return len(found) > 1 or (len(found) == 1 and found[0].limit is not None)


def named_clusters(cluster: Cluster, names: Iterable[str] | None = None) -> list[tuple[str | None, Cluster]]:
    """The clusters a verb that measures rank 0 (qualify, bench) runs against: the site itself (name
    None) on a site of one group; else each group ``names`` picks (default all) as its own cluster
    (its rank 0's API, its profile, no router), in the site's order."""
    from sparkctl.render import plan_document

    if not names and len(getattr(cluster, "groups", None) or ()) <= 1:
        return [(None, cluster)]  # one group: the site itself, nothing to render for the choice
    found = targets(cluster, plan_document(cluster), names)
    # Measured on its own rank 0, a group has no router in front of it; the router may also sit on
    # another group's node, which the group's own plan (its identity, its /server_info check) lacks.
    measured = [(t.group, t.cluster.model_copy(update={"router": None})) for t in found]
    if not several(found):
        return [(None, measured[0][1])]
    return [(name, c) for name, c in measured]


def overall(verdicts: Iterable[str]) -> str:
    """The site's verdict over its groups': ready when every group is, else the worst of them."""
    seen = list(verdicts)
    if not seen:
        return DOWN
    return max(seen, key=lambda v: _ORDER.index(v) if v in _ORDER else len(_ORDER))


def state_names(cluster: Cluster, names: Iterable[str] | None = None) -> list[str]:
    """The names the supervisor keeps state under for the groups ``names`` (default all): the
    site's own name, and on a site of several groups each group's (``<site>-<group>``), under which
    its supervisor pauses, takes the lifecycle lock and keeps its breaker. The admin's `up` and
    `down` hold every one of them, so no group's supervisor heals a group the admin is changing."""
    out = [cluster.name]
    if not rgroups.plain(cluster):
        out += [rgroups.view_name(cluster, g) for g in rgroups.select(cluster, names)]
    return out
