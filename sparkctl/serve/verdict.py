"""The cluster verdict (ready | degraded | down, with reasons) and the status snapshot.

Beside the verdict the snapshot carries warnings that do not change it: GPUs hot or throttled
against the profile's ``thermals`` thresholds (``sparkctl.serve.thermals``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from sparkctl.serve import thermals
from sparkctl.serve.http import HeadFacts, head_checks
from sparkctl.serve.probe import FleetLike, NodeFacts, collect

if TYPE_CHECKING:
    from sparkctl.model import Cluster

GIB = 1024**3

READY, DEGRADED, DOWN = "ready", "degraded", "down"


# --- the verdict --------------------------------------------------------------------------------


@dataclass
class Snapshot:
    nodes: dict[str, NodeFacts]
    head: HeadFacts | None
    verdict: str
    reasons: list[str]
    seconds: float = 0.0
    warnings: list[thermals.ThermalWarning] = field(default_factory=list)
    taken_at: float = field(default_factory=time.time)

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reasons": self.reasons,
            "warnings": [w.as_dict() for w in self.warnings],
            "seconds": round(self.seconds, 3),
            "nodes": [f.as_dict() for f in sorted(self.nodes.values(), key=lambda f: f.rank)],
            "head": self.head.as_dict() if self.head else None,
        }


def verdict(cluster: Cluster, nodes: Mapping[str, NodeFacts],
            head: HeadFacts | None) -> tuple[str, list[str]]:
    """ready: every rank active and rank 0 answering /health, /ready and /v1/models; down: no rank
    active; degraded otherwise. Reasons say what is wrong, one line each."""
    reasons: list[str] = []
    active = 0
    floor = float(cluster.profile.memory.floor_gib) * GIB
    for f in sorted(nodes.values(), key=lambda f: f.rank):
        who = f"{f.name} (rank {f.rank})"
        if not f.reachable:
            reasons.append(f"{who}: unreachable: {f.error}")
            continue
        if f.error:
            reasons.append(f"{who}: {f.error}")
            continue
        state = f.active
        if state == "active":
            active += 1
        else:
            unit = f.unit
            detail = unit.get("error") or f"{state}/{unit.get('sub', '')}"
            if unit.get("result") not in (None, "", "success"):
                detail += f", result {unit.get('result')}"
            reasons.append(f"{who}: rank unit not running ({detail})")
        mem = f.mem_available
        if mem is not None and mem < floor and state == "active":
            reasons.append(f"{who}: MemAvailable {mem / GIB:.2f} GiB below the floor "
                           f"{floor / GIB:.2f} GiB")
        for dev, link in (f.data.get("links") or {}).items():
            if not link.get("present"):
                reasons.append(f"{who}: fabric port {dev} missing")
            elif link.get("state") not in ("up", "unknown"):
                reasons.append(f"{who}: fabric port {dev} is {link.get('state')}")
            elif link.get("mtu") and link["mtu"] < int(cluster.fabric.mtu):
                reasons.append(f"{who}: fabric port {dev} MTU {link['mtu']} < {cluster.fabric.mtu}")
        shards = f.data.get("shards")
        if shards is not None and not shards.get("verified"):
            reasons.append(f"{who}: Engram shards not verified ({shards.get('problem')})")
    if head is not None and active:
        for what, ans in (("/health", head.health), ("/ready", head.ready), ("/v1/models", head.models)):
            if not ans.ok:
                reasons.append(f"rank 0 {what}: {ans.code if ans.code is not None else ans.error}")
    if active == 0:
        return DOWN, reasons or ["no rank is running"]
    if reasons or active < len(nodes):
        return DEGRADED, reasons
    return READY, []


def snapshot(cluster: Cluster, doc: Mapping[str, Any], fleet: FleetLike, http: httpx.Client,
             api_key: str | None, timeout: float = 5.0) -> Snapshot:
    """Probe every node and rank 0's API concurrently; judge."""
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=1) as pool:
        head_future = pool.submit(head_checks, cluster, http, api_key, min(timeout, 2.0))
        nodes = collect(cluster, doc, fleet, "status", timeout=timeout)
        head = head_future.result()
    state, reasons = verdict(cluster, nodes, head)
    return Snapshot(nodes, head, state, reasons, time.monotonic() - start,
                    warnings=thermals.warnings(cluster, nodes))


