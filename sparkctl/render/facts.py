"""The cluster as one plain, JSON-ready dict: the only place the typed model becomes data.

``cluster_facts`` is what `validate --json` prints, what the ``sparkctl_rendered`` vars plugin hands
every host as ``sparkctl_cluster``, and ``node_facts`` is the head of each node's entry in
`plan --json`. Nothing else turns the cluster into a dict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkctl.render import fabric, groups
from sparkctl.render.kit import kit_facts
from sparkctl.render.rank import api_url, run_image, served_model_name

if TYPE_CHECKING:  # annotations only: render never imports the model at run time
    from sparkctl.model.cluster import Cluster, Node


def node_facts(cluster: Cluster, node: Node) -> dict[str, Any]:
    """One node: name, rank, role, addresses and fabric ports."""
    return {
        "name": node.name,
        "rank": node.rank,
        "role": "head" if node.rank == 0 else "worker",
        "mgmt": str(node.mgmt_ip),
        # The port Ansible connects on, the firewall opens and the roles' own ssh/rsync use.
        "ssh_port": node.ssh_port,
        "bootstrap_ip": str(cluster.bootstrap_ips[node.name]),
        "fabric": [{"netdev": str(p.netdev), "hca": str(p.hca), "ip": str(p.ip)} for p in node.fabric_ports],
        "nvme_gib": node.nvme_gib,
    }


def _memory(cluster: Cluster) -> dict[str, Any]:
    prof = cluster.profile
    return {
        "kv_pin_tokens": prof.max_total_tokens,
        "kv_pool_gib": round(prof.kv_pool_gib, 2),
        "static_pool_gib": round(prof.static_pool_gib, 2),
        "weights_gib_per_rank": prof.memory.weights_gib_per_rank,
        "prefill_transient_gib": round(prof.prefill_transient_gib, 2),
        "transient_limit_gib": round(prof.transient_limit_gib, 2),
        "disk_margin_gib": prof.memory.disk_margin_gib,
    }


def disk_need_gib(cluster: Cluster) -> float | None:
    """NVMe each node needs for the checkpoint, the packed Engram shards and the margin."""
    if cluster.checkpoint.size_gib is None:
        return None
    m = cluster.profile.memory
    return round(cluster.checkpoint.size_gib + m.engram_packed_gib + m.disk_margin_gib, 2)


def cluster_facts(cluster: Cluster) -> dict[str, Any]:
    """The whole site as data. Secrets appear only by name, never by value or reference."""
    sw = cluster.switch
    runtime = cluster.runtime
    switch = None if sw is None else {"name": sw.name, "type": sw.type, "host": str(sw.host), "mtu": sw.mtu}
    return {
        "cluster": cluster.name,
        "inventory": str(cluster.inventory_dir),
        "profile": cluster.profile.name,
        "tp_size": cluster.profile.tp_size,
        "served_model_name": served_model_name(cluster),
        "api_url": api_url(cluster),
        "runtime": runtime.kind,
        "image": runtime.image,
        "image_source": runtime.image_source,
        # The name `docker run` uses on every node (a pulled image: a tag derived from its digest).
        "image_run_ref": None if runtime.image is None else run_image(cluster),
        "image_archive": None if runtime.image_archive is None else str(runtime.image_archive),
        "image_id": runtime.image_id,
        # What the rank's container gets from the host (the profile's `container` section).
        "container": cluster.profile.container.model_dump(),
        "kit": kit_facts(cluster),
        # The profile is served by the lab's rank simulator (its host-side helpers are installed).
        "simulator": cluster.profile.simulator is not None,
        "venv_path": None if runtime.venv_path is None else str(runtime.venv_path),
        "head": cluster.head.name,
        # Rank waves in start order (workers, then rank 0): the role and the fast path of `up` read it.
        # With several groups every group's workers, then every group's rank 0 (groups side by side).
        "start_waves": groups.start_waves(cluster),
        "nodes": [node_facts(cluster, n) for n in cluster.nodes],
        "bootstrap_ips": {k: str(v) for k, v in cluster.bootstrap_ips.items()},
        "switch": switch,
        "mgmt": {"subnet": str(cluster.mgmt.subnet), "interface": str(cluster.mgmt.interface)},
        "fabric": {
            "subnets": [str(s) for s in cluster.fabric.subnets],
            "mtu": cluster.fabric.mtu,
            "host_qos": cluster.fabric.host_qos,
            "bootstrap_over": cluster.fabric.bootstrap_over,
            "stage_over_fabric": cluster.fabric.stage_over_fabric,
        },
        # The fabric's links and the `check fabric` matrix (sparkctl.render.fabric): what each node's
        # probe pings, and the node pairs with no direct path (a ring's opposite nodes).
        "fabric_check": fabric.check_matrix(cluster),
        "ports": {
            "dist_init": cluster.ports.dist_init,
            "api": cluster.ports.api,
            "nccl_test": cluster.ports.nccl_test,
            "exporter": cluster.ports.exporter,
        },
        "api_allow": [str(s) for s in cluster.api_allow],
        "paths": {k: str(v) for k, v in cluster.paths.model_dump().items()},
        "secrets": sorted(cluster.secrets),
        "memory": _memory(cluster),
        "disk_need_gib": disk_need_gib(cluster),
        "warnings": list(cluster.warnings),
        **_groups(cluster),
    }


def _groups(cluster: Cluster) -> dict[str, Any]:
    """A site of several serving groups (or one leaving nodes out): ``groups``, each as in the plan."""
    if groups.plain(cluster):
        return {}
    return {"groups": [groups.group_entry(cluster, g) for g in cluster.groups]}
