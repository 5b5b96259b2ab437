"""`stage WHAT` before its playbook: what the inventory allows, the playbook's settings from the
options, and whether one SSH check round (``faststage``) finds nothing to stage."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparkctl.errors import InputError
from sparkctl.stage import faststage

if TYPE_CHECKING:
    from sparkctl.model import Cluster
    from sparkctl.ssh.fleet import Fleet

STALL_TIMEOUT_S = 120.0  # the role's spark_stage_stall_timeout_s, unless --stall-timeout says otherwise


def refuse_what_cannot_be_staged(cluster: Cluster, what: str) -> None:
    """Exit 2 (nothing touched) for a kit or an image the inventory does not configure."""
    if what == "kit" and getattr(cluster, "kit", None) is None:
        raise InputError(
            "stage kit: the inventory configures no serving kit (sparkctl_kit)",
            hint="add sparkctl_kit (source: git with url + commit, or dir/tar with path) to "
                 "group_vars/all/sparkctl.yml; the example site documents it (`sparkctl init --example DIR`)",
        )
    if what == "image" and cluster.runtime.kind != "container":
        raise InputError(
            f"stage image: sparkctl_runtime.kind is {cluster.runtime.kind}; only the container runtime "
            "runs an image",
            hint="set sparkctl_runtime.kind: container with image (and image_source) in "
            "group_vars/all/sparkctl.yml",
        )


def playbook_settings(bwlimit: float, stall_timeout: float) -> dict[str, Any]:
    """The role variables the options set (none at their defaults)."""
    settings: dict[str, Any] = {}
    if bwlimit:
        settings["spark_stage_bwlimit_mib_s"] = bwlimit
    if stall_timeout != STALL_TIMEOUT_S:
        settings["spark_stage_stall_timeout_s"] = stall_timeout
    return settings


def fast_check(
    cluster: Cluster, what: str, *, verify_only: bool, force: bool, full: bool,
    fleet: Callable[[Cluster], Fleet],
    kit_reference: Callable[[Cluster], faststage.KitReference | str | None],
) -> faststage.StageCheck:
    """Whether the playbook may be skipped: never with --verify-only, --force or --full (the playbook's
    own modes); else one check round, cheap reasons (a checkpoint the head must read, an unpinned
    pull) found before any connection is made."""
    if verify_only or force or full:
        return faststage.StageCheck(["--verify-only" if verify_only else "--force" if force else "--full"])
    todo = faststage.parts(cluster, what)
    kit = kit_reference(cluster) if "kit" in todo else None
    connections = fleet(cluster)
    try:
        return faststage.check(cluster, what, connections, kit)
    finally:
        connections.close()
