"""Preflight before ``up``: every check on every node, reported together."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkctl.ansible import failures
from sparkctl.serve.probe import FleetLike, NodeFacts, collect

if TYPE_CHECKING:
    from sparkctl.model import Cluster

GIB = 1024**3
# Seconds the preflight probe may take on a node (it drops the page cache, reads docker and systemd).
TIMEOUT_S = 60.0


# --- preflight ----------------------------------------------------------------------------------


@dataclass
class Check:
    node: str           # a node name, or "cluster" for cross-node checks
    name: str
    ok: bool
    detail: str = ""
    skipped: bool = False


def preflight_checks(cluster: Cluster, facts: Mapping[str, NodeFacts], force: bool = False) -> list[Check]:
    """Judge the preflight probe of every node; cross-node checks last. Pure (tested on fixtures)."""
    checks: list[Check] = []
    floor = float(cluster.profile.memory.floor_gib) * GIB
    ports = {cluster.ports.api: "api", cluster.ports.dist_init: "dist_init"}
    identities: dict[str, str] = {}
    gids: dict[str, dict[str, int | None]] = {}
    for f in sorted(facts.values(), key=lambda f: f.rank):
        add = lambda name, ok, detail="", skipped=False, n=f.name: checks.append(  # noqa: E731
            Check(n, name, ok, detail, skipped))
        if not f.reachable or f.error:
            add("reachable", False, failures.ssh_failure(cluster, f.name, f.error or "no answer").reason())
            continue
        d = f.data
        add("reachable", True, d.get("host", ""))
        unit = f.unit
        if "error" in unit:
            add("systemd", False, unit["error"])
        procs = d.get("rank_processes") or []
        alive = f.active in ("active", "activating", "deactivating") or procs
        who_alive = "; ".join(f"pid {p['pid']}: {p['cmd']}" for p in procs) or f"unit {f.active}"
        add("no earlier rank alive", not alive, who_alive if alive else "none")
        others = list(d.get("gpu_apps") or []) + list(d.get("gpu_containers") or [])
        if others:
            add("GPU idle", force, ("ignored (--force): " if force else "in use: ") + "; ".join(others)[:300])
        else:
            add("GPU idle", True, "no compute process or GPU container")
        model = d.get("model") or {}
        add("model files", bool(model.get("config")) and (model.get("safetensors", 0) > 0),
            f"config.json {'present' if model.get('config') else 'missing'}, "
            f"{model.get('safetensors', 0)} safetensors in {cluster.paths.model_dir}")
        shards = d.get("shards")
        if shards is None:
            add("Engram shards", True, "not used by this profile", skipped=True)
        else:
            verified = bool(shards.get("verified"))
            add("Engram shards", verified,
                f"{shards.get('files')} files verified" if verified else str(shards.get("problem")))
        mem = f.mem_available
        dropped = "after dropping caches" if d.get("caches_dropped") else "caches not dropped"
        if mem is None:
            add("MemAvailable", False, "no /proc/meminfo")
        else:
            add("MemAvailable", mem >= floor, f"{mem / GIB:.2f} GiB {dropped} (floor {floor / GIB:.2f} GiB)")
        listening = set(d.get("ports_listening") or [])
        busy = [f"{p} ({what})" for p, what in ports.items() if p in listening]
        add("ports free", not busy, ("in use: " + ", ".join(busy)) if busy else
            ", ".join(str(p) for p in ports))
        ident = str(d.get("identity") or "")
        identities[f.name] = ident
        if ident.startswith("missing"):
            add("runtime present", False, ident)
        elif "image_env" in d:
            add("required image", *required_image(cluster, d.get("image_env")))
        g = d.get("gids")
        if g is None:
            add("RoCE GID index", True, "no RDMA devices on this node (lab)", skipped=True)
        else:
            gids[f.name] = g
            missing = [h for h, i in g.items() if i is None]
            add("RoCE GID index", not missing,
                ("no RoCE v2 IPv4 GID on " + ", ".join(missing)) if missing else
                ", ".join(f"{h}={i}" for h, i in g.items()))
    good = {n: i for n, i in identities.items() if i and not i.startswith("missing")}
    if len(set(good.values())) > 1:
        groups: dict[str, list[str]] = {}
        for n, i in good.items():
            groups.setdefault(i, []).append(n)
        detail = "; ".join(f"{i[:23]}…: {', '.join(ns)}" for i, ns in groups.items())
        checks.append(Check("cluster", "same runtime everywhere", False, detail))
    elif good:
        checks.append(Check("cluster", "same runtime everywhere", True, next(iter(good.values()))[:40]))
    if gids:
        values = {i for g in gids.values() for i in g.values() if i is not None}
        if len(values) > 1:
            checks.append(Check("cluster", "common GID index", False,
                                "; ".join(f"{n}: {g}" for n, g in gids.items())))
        elif values:
            checks.append(Check("cluster", "common GID index", True, f"{values.pop()} on every port"))
    return checks


def required_image(cluster: Cluster, env: Mapping[str, str] | None) -> tuple[bool, str]:
    """(ok, detail) of the node's image against the profile's ``image`` requirement: every
    ``image.env`` entry in the image's Config.Env (a stock or another publisher's image lacks them)."""
    need = cluster.profile.image
    if need is None:
        return True, "any image"
    if env is None:
        return False, f"cannot read the environment of {cluster.runtime.image}"
    wrong = [f"{k}={env.get(k, '<unset>')}" for k, v in need.env.items() if env.get(k) != v]
    if wrong:
        want = ", ".join(f"{k}={v}" for k, v in need.env.items())
        return False, (f"{cluster.runtime.image} has {', '.join(wrong)}, not {want}: it is not the image "
                       f"built from {need.source}'s {need.dockerfile}; build it with `sparkctl stage image` "
                       "(sparkctl_runtime.image_source: build)")
    return True, f"built from {need.source}'s {need.dockerfile}"


def preflight(cluster: Cluster, doc: Mapping[str, Any], fleet: FleetLike, force: bool = False,
              timeout: float = TIMEOUT_S) -> tuple[list[Check], dict[str, NodeFacts]]:
    facts = collect(cluster, doc, fleet, "preflight", timeout=timeout)
    return preflight_checks(cluster, facts, force), facts


