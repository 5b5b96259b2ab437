"""Every node's fabric probe answering the rendered `check fabric` matrix (``render.fabric``):
links up at MTU 9000, no RDMA device, every ping answered except the ``failing`` (node, peer) pairs,
which the probe classes as ``kind`` with ``detail`` (what the verdict and the CLI read)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sparkctl.render import fabric


def fabric_answers(cluster: Any, failing: Collection[tuple[str, str]] = (), kind: str = "mtu",
                   detail: str = "0/15 replies, small pings 2/2") -> dict[str, Any]:
    out: dict[str, Any] = {}
    matrix = fabric.check_matrix(cluster)["pings"]
    for node in cluster.nodes:
        ports = [{"netdev": str(p.netdev), "present": True, "state": "UP", "carrier": True, "mtu": 9000,
                  "addresses": [str(p.address)], "speed_mbps": 200000, "rdma": False, "gid_index": None,
                  "gid_error": "no RDMA device"} for p in node.fabric_ports]
        pings = []
        for job in matrix[node.name]:
            ok = (node.name, job["peer"]) not in failing
            pings.append({**job, "ok": ok, "kind": "ok" if ok else kind,
                          "detail": "5/5 replies" if ok else detail})
        out[node.name] = {"ports": ports, "pings": pings, "rdma": False}
    return out
