"""The source identity of a bench or qualify result: what produced the numbers, in the spirit of the
publisher's ``results/source-identity.json``, ``measurement-summary.json`` and sanitized measured
profile (R4).

``gather`` collects, before anything is timed:

- sparkctl's version; the profile's name, the digest of its file and of the profile as resolved with
  the site's overrides;
- the serving kit: its commit (or tree digest), every overlay's pinned ``after_sha256`` (the plan
  document's ``rank_launch.kit``), and per node the version ``current`` points at, sparkctl's build
  record (``.sparkctl-build.json``: the image ID it compiled in and each product's SHA-256) and a
  digest of each adapter tree;
- the engine image: the reference the ranks run and per node its image ID;
- the checkpoint: its source and revision, and per node the SHA-256 of ``config.json`` and of
  ``model.safetensors.index.json``;
- the workloads: name, kind, the SHA-256 of the workload file and the upstream file it was
  extracted from (repository, commit, path, SHA-256);
- each node: OS, DGX OS, kernel, NVIDIA driver, CX-7 firmware, BIOS (``nodeside.benchid``, one SSH
  round, no GPU query).

``SourceIdentity`` is its schema (a unit test validates every result kind against it).
``measured_profile`` is the profile as measured, with secrets and addresses removed;
``summary`` the machine-readable headline of a result.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

import sparkctl
from sparkctl.model.redaction import strip_secrets
from sparkctl.nodeside import ship
from sparkctl.render import kit as render_kit
from sparkctl.render import plan_document
from sparkctl.render.rank import run_image, served_model_name
from sparkctl.ssh.fleet import Fleet, HostResult, targets_for

if TYPE_CHECKING:
    from sparkctl.model import Cluster
    from sparkctl.qa.workload import Workload


class FleetLike(Protocol):
    """What the identity round needs of an SSH fan-out (``sparkctl.ssh.fleet.Fleet``)."""

    def run(
        self, script: Any, timeout: float = ..., only: Iterable[str] | None = ...
    ) -> dict[str, HostResult]: ...


NODE_MODULES = (
    "nodeside.system",
    "nodeside.links",
    "nodeside.rdma",
    "nodeside.discover",
    "nodeside.kit",
    "nodeside.benchid",
)
_IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?:/\d{1,2})?\b")
ADDRESS = "<address>"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProfileIdentity(_Model):
    name: str
    file_sha256: str | None  # the profile's YAML as shipped (None: not a built-in profile)
    resolved_sha256: str  # the profile with the site's overrides, as sparkctl rendered the ranks from it


class KitIdentity(_Model):
    source: str | None
    commit: str | None
    sha256: str | None
    manifest: str | None  # the overlay manifest (rel -> before/after sha256), digested per node
    overlays: list[str]  # bound over the engine's files; each one's SHA-256 is read per node
    adapters: list[str]


class WorkloadIdentity(_Model):
    name: str
    kind: str
    sha256: str
    origin: str
    source: dict[str, Any] | None  # repository, commit, path, sha256 of the upstream file


class NodeKit(_Model):
    version: str | None
    build_record: dict[str, Any] | None
    adapters: dict[str, str | None]
    overlays: dict[str, str | None]
    manifest_sha256: str | None


class NodeIdentity(_Model):
    name: str
    rank: int
    os: str | None = None
    dgx_os: str | None = None
    kernel: str | None = None
    nvidia_driver: str | None = None
    cx7_firmware: str | None = None
    bios: str | None = None
    image_id: str | None = None
    checkpoint: dict[str, str | None] = {}
    kit: NodeKit | None = None
    error: str | None = None  # the node did not answer: every field above is unknown


class SourceIdentity(_Model):
    schema_version: Literal[1] = 1
    sparkctl_version: str
    profile: ProfileIdentity
    kit: KitIdentity | None
    image: str | None  # the reference the ranks run (None: not the container runtime)
    checkpoint: dict[str, Any]
    workloads: list[WorkloadIdentity]
    nodes: list[NodeIdentity]
    # Which run of the ranks was measured: each rank's unit invocation and container start when `up`
    # made the group ready (its ready.json), None when no readiness was recorded here.
    ready: dict[str, Any] | None = None
    gathered: str
    # Measured through the router: each serving group's own block (its profile, kit, ranks, readiness)
    # beside the site's (qa.verbs.identities); None for one group's own rank 0.
    groups: dict[str, SourceIdentity] | None = None


def _sha256_json(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def profile_identity(cluster: Cluster) -> ProfileIdentity:
    name = cluster.profile.name
    path = resources.files("sparkctl.profiles").joinpath(f"{name}.yml")
    file_digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return ProfileIdentity(
        name=name,
        file_sha256=file_digest,
        resolved_sha256=_sha256_json(cluster.profile.model_dump(mode="json")),
    )


def kit_identity(cluster: Cluster) -> KitIdentity | None:
    facts = render_kit.kit_facts(cluster)
    if facts is None:
        return None
    return KitIdentity(
        source=facts.get("source"),
        commit=facts.get("commit"),
        sha256=facts.get("sha256"),
        manifest=facts.get("manifest"),
        overlays=[str(o) for o in facts.get("overlays") or []],
        adapters=[str(a) for a in facts.get("adapters") or []],
    )


def workload_identity(workloads: Iterable[Workload]) -> list[WorkloadIdentity]:
    return [
        WorkloadIdentity(name=w.name, kind=w.kind, sha256=w.sha256, origin=w.origin, source=w.source)
        for w in workloads
    ]


def node_params(cluster: Cluster, entry: Mapping[str, Any]) -> dict[str, Any]:
    """What ``nodeside.benchid`` reads on one node (all from the model and the plan document)."""
    facts = render_kit.kit_facts(cluster)
    container = cluster.runtime.kind == "container"
    return {
        "model_dir": str(cluster.paths.model_dir),
        "image": run_image(cluster) if container and cluster.runtime.image else None,
        "hcas": [p["hca"] for p in entry.get("fabric", [])],
        "kit_store": facts.get("store") if facts else None,
        "adapters": list(facts.get("adapters") or []) if facts else [],
        "overlay_source": facts.get("overlay_source") if facts else None,
        "overlays": list(facts.get("overlays") or []) if facts else [],
        "manifest": facts.get("manifest") if facts else None,
    }


def node_identities(
    cluster: Cluster, doc: Mapping[str, Any], fleet: FleetLike, timeout: float = 60.0
) -> list[NodeIdentity]:
    entries = {e["name"]: e for e in doc["nodes"]}
    scripts = {
        n.name: ship.python_script(
            NODE_MODULES, node_params(cluster, entries[n.name]), "SPARKCTL_BENCHID_EOF"
        )
        for n in cluster.nodes
    }
    answers = fleet.run(scripts, timeout=timeout)
    out = []
    for node in sorted(cluster.nodes, key=lambda n: n.rank):
        res = answers.get(node.name)
        if res is None or not res.reachable:
            out.append(
                NodeIdentity(
                    name=node.name,
                    rank=node.rank,
                    error=(res.error if res is not None else None) or "no answer",
                )
            )
            continue
        try:
            data = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            why = (res.stderr.strip().splitlines() or [f"exited {res.rc} with no output"])[-1]
            out.append(
                NodeIdentity(name=node.name, rank=node.rank, error=f"identity probe failed: {why[:200]}")
            )
            continue
        data.pop("mode", None)
        data.pop("hostname", None)
        out.append(NodeIdentity(name=node.name, rank=node.rank, **data))
    return out


def gather(
    cluster: Cluster, workloads: Sequence[Workload] = (), fleet: FleetLike | None = None,
    ready: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The source identity block (``SourceIdentity`` as JSON); nodes that do not answer are named in
    it, never fatal: the numbers are still worth keeping."""
    doc = plan_document(cluster)
    own = fleet is None
    connections: Any = Fleet(targets_for(cluster)) if fleet is None else fleet
    try:
        nodes = node_identities(cluster, doc, connections)
    finally:
        if own:
            connections.close()
    container = cluster.runtime.kind == "container"
    identity = SourceIdentity(
        sparkctl_version=sparkctl.__version__,
        profile=profile_identity(cluster),
        kit=kit_identity(cluster),
        image=run_image(cluster) if container and cluster.runtime.image else None,
        checkpoint={
            "source": cluster.checkpoint.source,
            "repo": cluster.checkpoint.repo,
            "revision": cluster.checkpoint.revision,
        },
        workloads=workload_identity(workloads),
        nodes=nodes,
        ready=dict(ready) if ready else None,
        gathered="before the run, outside every timed window (one SSH round per node, no GPU query)",
    )
    return identity.model_dump(mode="json")


# ------------------------------------------------------------------------------ what results carry
def _no_addresses(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_addresses(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_addresses(v) for v in value]
    if isinstance(value, str):
        return _IPV4.sub(ADDRESS, value)
    return value


def measured_profile(cluster: Cluster, secrets: Iterable[str] = ()) -> dict[str, Any]:
    """The profile as measured — its flags and environment as rank 0 ran them — with every secret
    and every IPv4 address replaced (R4 ships such a sanitized profile beside its results)."""
    doc = plan_document(cluster)
    head = next(e for e in doc["nodes"] if e["name"] == cluster.head.name)
    launch = head.get("rank_launch") or {}
    facts = render_kit.kit_facts(cluster) or {}
    measured = {
        "profile": cluster.profile.name,
        "served_model_name": served_model_name(cluster),
        "tp_size": cluster.profile.tp_size,
        "nodes": len(cluster.nodes),
        "runtime": cluster.runtime.kind,
        "argv": list(launch.get("argv") or []),
        "env": dict(launch.get("env") or {}),
        "kit_commit": facts.get("commit"),
    }
    clean: dict[str, Any] = _no_addresses(strip_secrets(measured, list(secrets)))
    return clean


def _level_summary(lvl: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "workload": lvl["workload"],
        "suite": lvl.get("suite"),  # --after-long: 1 before the long request, 2 after it
        "concurrency": lvl["concurrency"],
        "definition": lvl["definition"],
        "mean": (lvl.get("headline_tps") or {}).get("mean"),
        "n": (lvl.get("headline_tps") or {}).get("n"),
        "ttft_mean_s": (lvl.get("ttft_s") or {}).get("mean"),
        "published": {p["label"]: p["value"] for p in lvl.get("published") or []},
    }


def summary(kind: str, document: Mapping[str, Any]) -> dict[str, Any]:
    """The machine-readable headline of a result (``measurement-summary.json``)."""
    out: dict[str, Any] = {
        "kind": kind,
        "started": document.get("started"),
        "simulator": document.get("simulator"),
        "profile": document.get("profile"),
        "errors": list(document.get("errors") or []),
    }
    if kind == "bench":
        out["workloads"] = {n: w.get("sha256") for n, w in (document.get("workloads") or {}).items()}
        protocols = document.get("protocols") or {}
        after = protocols.get("after_long") or {}
        levels = (document.get("levels") or []) + (after.get("levels") or [])
        out["levels"] = [_level_summary(lvl) for lvl in levels]
        arrivals, ab = protocols.get("arrivals"), protocols.get("ab")
        out["protocols"] = {
            "after_long": (after.get("long_request") or {}).get("prompt_tokens") if after else None,
            "arrivals": {k: arrivals.get(k) for k in ("sha256", "cohorts", "throughput_tps",
                                                      "median_latency_mean_of_cohorts_s", "latency_s")}
            if arrivals else None,
            "ab": {"variant": (ab.get("variant") or {}).get("name"), "differences": ab.get("differences")}
            if ab else None,
        }
    else:
        out.update(
            passed=document.get("passed"),
            failed=document.get("failed"),
            skipped=document.get("skipped"),
            checks={c["name"]: c["passed"] for c in document.get("checks") or []},
        )
    return out


__all__ = ["NodeIdentity", "SourceIdentity", "gather", "measured_profile", "summary"]
