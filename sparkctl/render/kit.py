"""The serving kit as the rank's container sees it: where each version lives on a node, what is
bound where, and the files sparkctl renders for the kit from the inventory (no I/O).

A kit version is a directory ``<run_dir>/kit/<version>`` (the git commit, or ``tree-<16 hex>`` of
the tree digest for a dir/tar kit); ``<run_dir>/kit/current`` is a symlink switched atomically by
`sparkctl stage kit` once every file of the new version is verified. Containers mount ``current``,
so a new kit takes effect at the next `up` and a failed stage leaves the running one alone.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: render never imports the model at run time
    from sparkctl.model.cluster import Cluster
    from sparkctl.profiles import Kit as ProfileKit


# Files sparkctl renders for a kit (KitFile.render), on the node under <run_dir>/kit-files/.
KIT_FILES_DIR = "kit-files"


def store(cluster: Cluster) -> str:
    """Where the staged kit versions live on every node."""
    return str(PurePosixPath(cluster.paths.run_dir) / "kit")


def current(cluster: Cluster) -> str:
    """The symlink to the active kit version (what the containers mount)."""
    return f"{store(cluster)}/current"


def mounted(cluster: Cluster) -> ProfileKit | None:
    """The profile's kit when the ranks mount it (the site configures a kit, the profile says how
    to mount it, and the ranks run in containers); None otherwise."""
    if cluster.kit is None or cluster.runtime.kind != "container":
        return None
    return cluster.profile.kit


def enabled(cluster: Cluster) -> bool:
    """True when the site configures a kit and the profile says how to mount it."""
    return mounted(cluster) is not None


def file_host_path(cluster: Cluster, dst: str) -> str:
    """Where sparkctl writes a rendered kit file on the node (named after its container path)."""
    name = PurePosixPath(dst).name
    return str(PurePosixPath(cluster.paths.run_dir) / KIT_FILES_DIR / name)


def overlay_binds(cluster: Cluster) -> list[tuple[str, str]]:
    """(host source, container target) of every overlay, in the profile's order."""
    pk = mounted(cluster)
    if pk is None:
        return []
    return [
        (f"{current(cluster)}/{pk.overlay_source}/{rel}", f"{pk.overlay_target}/{rel}") for rel in pk.overlays
    ]


def rendered_files(cluster: Cluster) -> dict[str, str]:
    """Host path -> text of every file the profile's kit wants rendered from the inventory."""
    pk = mounted(cluster)
    if pk is None:
        return {}
    out: dict[str, str] = {}
    for f in pk.files:
        if f.render == "r4-cluster-json":
            out[file_host_path(cluster, f.dst)] = r4_cluster_json(cluster)
    return out


def file_binds(cluster: Cluster) -> list[tuple[str, str]]:
    """(host path, container path) of every rendered kit file."""
    pk = mounted(cluster)
    if pk is None:
        return []
    return [(file_host_path(cluster, f.dst), f.dst) for f in pk.files]


def _int_env(cluster: Cluster, name: str, default: int) -> int:
    value = cluster.profile.env.get(name)
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def r4_cluster_json(cluster: Cluster) -> str:
    """The kit's ``configs/cluster.json`` (rhys101's schema, configs/cluster.example.json), from the
    inventory: the same values the rendered argv and environment carry, never a second source."""
    prof = cluster.profile
    head = cluster.head
    model_dir = PurePosixPath(cluster.paths.model_dir)
    args = prof.args
    doc = {
        "name": cluster.name,
        "image": cluster.runtime.image,
        "expected_image_id": cluster.runtime.image_id,
        "model_store": str(model_dir.parent),
        "model_subpath": model_dir.name,
        "run_dir": str(cluster.paths.run_dir),
        "engram_dir": str(cluster.paths.engram_dir),
        "head_ip": str(cluster.bootstrap_ips[head.name]),
        "fabric_interface": str(head.fabric_ports[0].netdev),
        "nccl_hcas": "=" + ",".join(f"{p.hca}:1" for p in head.fabric_ports),
        "dist_port": cluster.ports.dist_init,
        "api_host": "0.0.0.0",
        "api_port": cluster.ports.api,
        "nccl_test_port": cluster.ports.nccl_test,
        "tp_size": prof.tp_size,
        "ep_size": prof.ep_size,
        "context_length": prof.context_length,
        "max_running_requests": prof.max_running_requests,
        "max_total_tokens": prof.max_total_tokens,
        "chunked_prefill_size": prof.chunk,
        "max_prefill_tokens": args.get("--max-prefill-tokens"),
        "mem_fraction_static": prof.mem_fraction_static,
        "draft_length": args.get("--speculative-dspark-block-size"),
        "min_free_slots_delay": args.get("--min-free-slots-delay"),
        "minimum_available_gib": prof.memory.floor_gib,
        "io_threads": _int_env(cluster, "DSV41_IO_THREADS", 96),
        "row_cache_gib": _int_env(cluster, "DSV41_CACHE_GIB", 0),
        "resident_scales": prof.env.get("DSV41_RESIDENT_SCALES", "0") == "1",
        "roce_enabled": prof.env.get("SGLANG4_ROCE_ALLREDUCE", "0") == "1",
        "workers": [
            {
                "rank": n.rank,
                "host": f"{cluster.ssh_user}@{cluster.bootstrap_ips[n.name]}",
                "ip": str(cluster.bootstrap_ips[n.name]),
            }
            for n in sorted(cluster.nodes, key=lambda n: n.rank)
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


def kit_facts(cluster: Cluster) -> dict[str, Any] | None:
    """The kit as data for the roles (`sparkctl_cluster.kit`), or None without one."""
    if cluster.kit is None:
        return None
    kit = cluster.kit
    out: dict[str, Any] = {
        "source": kit.source,
        "url": kit.url,
        "commit": kit.commit,
        "path": None if kit.path is None else str(kit.path),
        "location": kit.on if kit.source != "git" else "controller",
        "sha256": kit.sha256,
        "store": store(cluster),
        "current": current(cluster),
    }
    need = cluster.profile.image
    if cluster.profile.kit is None and need is not None and need.requires == "build-from-kit":
        # The kit is only the build context of the profile's image (its Dockerfile on its base): the
        # ranks mount nothing of it.
        out.update(dockerfile=need.dockerfile, base=need.base)
    pk = cluster.profile.kit
    if pk is not None:
        out.update(
            mount=pk.mount,
            manifest=pk.manifest,
            overlay_source=pk.overlay_source,
            overlay_target=pk.overlay_target,
            overlays=list(pk.overlays),
            adapters=list(pk.adapters),
            dockerfile=pk.dockerfile,
            files=[{"host": host, "dst": dst} for host, dst in file_binds(cluster)],
            markers=[m.pattern for m in cluster.profile.gates.log_markers if m.required == "with-kit"],
            build=build_steps(cluster),
        )
    return out


def build_steps(cluster: Cluster) -> list[dict[str, Any]]:
    """The profile's kit build steps as data (``nodeside.kitbuild``) where the ranks mount the kit
    (the compile runs in their image, ``render.rank.run_image``); [] otherwise or without any."""
    pk = mounted(cluster)
    return [] if pk is None else [step.as_fact() for step in pk.build]
