"""The cluster verdict (ready | degraded | down, with reasons) and the status snapshot.

Beside the verdict the snapshot carries warnings that do not change it: GPUs hot or throttled
against the profile's ``thermals`` thresholds (``sparkctl.serve.thermals``).

A rank that runs is still not trusted when it was OOM-killed or restarted since `up` made the group
ready (``rank_faults``): a restarted rank cannot rejoin its TP group, whatever its unit says. The
publisher's start-up guard fails on the same facts (R4 scripts/cluster.py ``serve()``: a container not
running, ``OOMKilled``, ``RestartCount`` > 0). Each rank runs under a systemd unit, so systemd's own
restart count and a new unit invocation or container start since readiness (``ready.json``, written
by the boot watch when the gates passed) count as restarts too.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from sparkctl.ansible import failures
from sparkctl.serve import events, router_status, thermals
from sparkctl.serve.http import HeadFacts, head_checks
from sparkctl.serve.probe import FleetLike, NodeFacts, collect

if TYPE_CHECKING:
    from sparkctl.model import Cluster

GIB = 1024**3

READY, DEGRADED, DOWN = "ready", "degraded", "down"


# --- OOM kills and restarts ----------------------------------------------------------------------

READY_FILE = "ready.json"


def ready_file(cluster_name: str) -> Path:
    """Where `up` leaves each rank's unit invocation and container start at readiness."""
    return events.supervisor_dir(cluster_name) / READY_FILE


def ready_mark(f: NodeFacts) -> dict[str, Any]:
    """What identifies this run of the rank: the unit's invocation and the container's start."""
    container = f.container or {}
    return {"invocation": f.unit.get("invocation") or "", "started_at": container.get("started_at") or ""}


def save_ready_marks(path: Path, nodes: Mapping[str, NodeFacts]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    doc = {"at": time.time(), "nodes": {n: ready_mark(f) for n, f in nodes.items()}}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def load_ready_marks(path: Path) -> dict[str, dict[str, Any]]:
    """node -> its mark at readiness; empty when `up` never made this group ready (or the file is
    unreadable: then nothing is compared, as before readiness)."""
    try:
        doc = json.loads(path.read_text())
        nodes = doc.get("nodes") or {}
        return {str(k): dict(v) for k, v in nodes.items() if isinstance(v, dict)}
    except (OSError, ValueError, AttributeError):
        return {}


def rank_faults(f: NodeFacts, mark: Mapping[str, Any] | None = None) -> list[str]:
    """Why this rank cannot be trusted even while it runs, in words (empty: nothing seen): its
    container or unit was OOM-killed, docker or systemd restarted it, or it was started again
    since ``mark`` (the rank at readiness)."""
    out: list[str] = []
    unit = f.unit
    box = f.container or {}
    name = f"container {box.get('name')}" if box.get("name") else "container"
    if box.get("oom_killed"):
        out.append(f"{name} was OOM-killed")
    if unit.get("result") == "oom-kill":
        out.append("rank unit was OOM-killed (systemd result oom-kill)")
    count = int(box.get("restart_count") or 0)
    if count:
        out.append(f"{name} restarted {count}× (docker RestartCount)")
    count = int(unit.get("restarts") or 0)
    if count:
        out.append(f"rank unit restarted {count}× (systemd NRestarts)")
    if mark:
        was, now = mark.get("invocation"), unit.get("invocation")
        began, begins = mark.get("started_at"), box.get("started_at")
        # A unit's invocation counts while it runs; a container's start whatever it does now (a
        # `docker restart` of a rank whose `docker run` then exited leaves the unit stopped).
        if f.active == "active" and was and now and was != now:
            out.append("restarted since `up` made it ready (≥1×: the rank unit runs a new invocation)")
        elif began and begins and began != begins:
            out.append(f"{name} restarted since `up` made it ready (≥1×: started {begins}, "
                       f"ready with the start of {began})")
    return out


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
    # node -> rank_faults in words (OOM-killed, restarted), for the status table and the supervisor.
    faults: dict[str, list[str]] = field(default_factory=dict)
    # The router in front of the groups (sparkctl_router), when the status covers the whole site.
    router: router_status.RouterFacts | None = None

    def as_dict(self) -> dict[str, Any]:
        extra = {} if self.router is None else {"router": self.router.as_dict()}
        return {
            "verdict": self.verdict,
            "reasons": self.reasons,
            "warnings": [w.as_dict() for w in self.warnings],
            "seconds": round(self.seconds, 3),
            "nodes": [f.as_dict() for f in sorted(self.nodes.values(), key=lambda f: f.rank)],
            "head": self.head.as_dict() if self.head else None,
            "faults": {n: list(v) for n, v in self.faults.items() if v},
            **extra,
        }


def verdict(cluster: Cluster, nodes: Mapping[str, NodeFacts],
            head: HeadFacts | None, marks: Mapping[str, Mapping[str, Any]] | None = None
            ) -> tuple[str, list[str]]:
    """ready: every rank active, none OOM-killed or restarted (``rank_faults`` against ``marks``, the
    ranks at readiness) and rank 0 answering /health, /ready and /v1/models; down: no rank active;
    degraded otherwise. Reasons say what is wrong, one line each."""
    reasons: list[str] = []
    marks = marks or {}
    active = 0
    floor = float(cluster.profile.memory.floor_gib) * GIB
    for f in sorted(nodes.values(), key=lambda f: f.rank):
        who = f"{f.name} (rank {f.rank})"
        if not f.reachable:
            reasons.append(f"{who}: {failures.ssh_failure(cluster, f.name, str(f.error)).reason()}")
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
        reasons += [f"{who}: {fault}" for fault in rank_faults(f, marks.get(f.name))]
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
             api_key: str | None, timeout: float = 5.0,
             nodes_round: Callable[[], dict[str, NodeFacts]] | None = None) -> Snapshot:
    """Probe every node and rank 0's API concurrently; judge. ``nodes_round`` reads the nodes' status
    facts in place of the status probe's own round (`up` reads more in the same round)."""
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=1) as pool:
        head_future = pool.submit(head_checks, cluster, http, api_key, min(timeout, 2.0))
        nodes = (nodes_round() if nodes_round is not None
                 else collect(cluster, doc, fleet, "status", timeout=timeout))
        head = head_future.result()
    router = router_status.probe(doc, fleet, http, api_key, timeout) if router_status.covers(doc) else None
    marks = load_ready_marks(ready_file(cluster.name))
    state, reasons = verdict(cluster, nodes, head, marks)
    if router is not None and router.reasons():  # the groups may serve, but not through the router
        reasons += router.reasons()
        state = DEGRADED if state == READY else state
    faults = {n: rank_faults(f, marks.get(n)) for n, f in nodes.items() if f.reachable and not f.error}
    return Snapshot(nodes, head, state, reasons, time.monotonic() - start,
                    warnings=thermals.warnings(cluster, nodes), faults=faults, router=router)


