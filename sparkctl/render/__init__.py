"""Pure renderers: Cluster (with its resolved profile) -> argv, env, unit, netplan, QoS, switch and
firewall text. No I/O, no host contacted; the same input gives byte-identical output.

``plan_document`` assembles everything into the ``plan --json`` document (design.md): one entry per
node with its rank launch and the files sparkctl writes there, plus the switch configuration.
Secrets appear only as ``<secret:NAME>`` markers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkctl.render import common, facts, groups, host, kit, monitoring, rank, router, switch
from sparkctl.render.common import secret_mark
from sparkctl.render.facts import cluster_facts, node_facts
from sparkctl.render.rank import RankLaunch, rank_argv, rank_env, rank_launch
from sparkctl.render.switch import switch_config

if TYPE_CHECKING:  # annotations only: render never imports the model at run time
    from sparkctl.model.cluster import Cluster, Node

__all__ = [
    "RankLaunch",
    "cluster_facts",
    "common",
    "facts",
    "groups",
    "host",
    "kit",
    "monitoring",
    "node_entry",
    "node_facts",
    "plan_document",
    "rank",
    "rank_argv",
    "rank_env",
    "rank_launch",
    "router",
    "secret_mark",
    "switch",
    "switch_config",
    "switch_entry",
]


def node_files(cluster: Cluster, node: Node) -> tuple[dict[str, str], dict[str, str]]:
    """Files sparkctl writes on one node (path -> text) and their modes (path -> octal string)."""
    files: dict[str, str] = {}
    modes: dict[str, str] = {}
    # The rank's files come from the node's serving group (its profile, its ranks, its rendezvous);
    # the host's (netplan, QoS, firewall, exporter) from the site.
    gc, gn = groups.node_view(cluster, node) or (cluster, node)

    def put(path: str, text: str, mode: str) -> None:
        files[path] = text
        modes[path] = mode

    put(common.RANK_UNIT_FILE, rank.rank_unit(gc, gn), "0644")
    put(common.RANK_ENV_FILE, rank.rank_env_text(gc, gn), "0600")
    if rank.has_rank_secrets(gc):
        put(common.RANK_SECRETS_FILE, rank.rank_secrets_text(gc), "0600")
    for path, text in kit.rendered_files(gc).items():
        put(path, text, "0644")
    put(common.NETPLAN_FILE, host.netplan(cluster, node), "0600")
    if cluster.fabric.host_qos:
        put(common.QOS_SCRIPT, host.qos_script(cluster, node), "0755")
        put(common.QOS_UNIT_FILE, host.qos_unit(cluster, node), "0644")
        put(common.QOS_LINK_HOOK, host.qos_link_hook(cluster, node), "0755")
    put(common.FIREWALL_FILE, host.firewall(cluster, node), "0644")
    put(common.FIREWALL_UNIT_FILE, host.firewall_unit(cluster, node), "0644")
    put(monitoring.EXPORTER_UNIT_FILE, monitoring.exporter_unit(cluster, node), "0644")
    if cluster.router is not None and cluster.router.node == node.name:
        put(router.UNIT_FILE, router.unit(cluster), "0644")
    return files, modes


def node_entry(cluster: Cluster, node: Node) -> dict[str, Any]:
    """One node of the plan document: its rank as its serving group runs it (on a site of several
    groups, or of a group that leaves nodes out, also ``group``: the group's name, null on a spare
    node). The NCCL check is the site's: `check fabric` tests the fabric across every node."""
    files, modes = node_files(cluster, node)
    found = groups.node_view(cluster, node)
    gc, gn = found or (cluster, node)
    extra: dict[str, Any] = {}
    if not groups.plain(cluster):
        extra["group"] = None if found is None else gc.groups[0].name
    if cluster.router is not None and cluster.router.node == node.name:
        extra["router"] = router.entry(cluster)  # what the spark_router role installs here
    return {
        **node_facts(gc, gn),
        **extra,
        "rank_launch": rank.rank_launch(gc, gn).as_json(),
        "nccl_check": rank.nccl_check(cluster, node),
        "files": files,
        "file_modes": modes,
        "secret_files": [path for path, text in files.items() if common.SECRET_PREFIX in text],
        # Where the rendered files put things, for the roles (and spark_applied) to read instead of
        # parsing the unit or ruleset text back.
        "exporter": {"unit": monitoring.EXPORTER_UNIT_FILE, "dir": monitoring.EXPORTER_DIR,
                     "venv": monitoring.EXPORTER_VENV, "python": monitoring.EXPORTER_PYTHON,
                     "url": f"http://{node.mgmt_ip}:{cluster.ports.exporter}/metrics"},
        "firewall": {"table": common.FIREWALL_TABLE, "ruleset": common.FIREWALL_FILE,
                     "unit": common.FIREWALL_UNIT_FILE, "dropin_dir": common.FIREWALL_DROPIN_DIR},
    }


def switch_entry(cluster: Cluster) -> dict[str, Any]:
    sw = cluster.switch
    if sw is None:
        return {"type": "none", "config": ""}
    return {
        "type": sw.type,
        "name": sw.name,
        "host": str(sw.host),
        "file": switch.FILE_NAMES[sw.type],
        "config": switch_config(cluster),
    }


def plan_document(cluster: Cluster, node: str | None = None) -> dict[str, Any]:
    """The `sparkctl plan --json` document; with ``node``, only that node's entry.

    A site of several serving groups (or of one that leaves nodes out) also lists ``groups``: each
    group's name, profile, TP, nodes, head, rendezvous, API and start waves (design.md). A site of
    one group of every node has no ``groups`` key: its document is what it always was."""
    nodes = [cluster.node(node)] if node is not None else list(cluster.nodes)
    doc: dict[str, Any] = {
        "cluster": cluster.name,
        "profile": cluster.profile.name,
        "nodes": [node_entry(cluster, n) for n in nodes],
        "switch": switch_entry(cluster),
    }
    if not groups.plain(cluster):
        doc["groups"] = [groups.group_entry(cluster, g) for g in cluster.groups]
    if cluster.router is not None:
        doc["router"] = router.entry(cluster)  # SGLang's gateway in front of the groups
    return doc
