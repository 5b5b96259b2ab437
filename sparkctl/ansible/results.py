"""What a playbook reports to sparkctl, read by key: never by a task's display name.

A playbook hands its results over with ``ansible.builtin.set_stats`` (aggregated, one key per kind
of result, each a mapping ``{host: result}``); ansible-runner carries them in the final stats event
and ``runner.execute`` keeps them in ``RunResult.reported``. Renaming or reordering tasks therefore
never changes what a command reads. The keys are listed here, next to the playbook that sets them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# playbooks/stage.yml: per node {stage, transfer, pack} (spark_stage's module results).
STAGE = "sparkctl_stage"
# playbooks/stage.yml: per node the serving kit {version, tree_sha256, current, verified, switched,
# transfer, image} (spark_kit's module results).
KIT = "sparkctl_kit"
# playbooks/stage.yml: per node the engine image {id, ref, source, made, received, bytes_moved, seconds,
# rate_mib_s, loaded} (spark_image's spark_image_report; only {id} for --verify-only).
IMAGE = "sparkctl_image"
# playbooks/provision.yml: per node {role: {run, reasons}} (spark_applied: which roles were up to date).
APPLIED = "sparkctl_applied"
# playbooks/provision.yml: per node {path, roles: {role: {inputs, state, trees}}} (spark_applied: what
# the decision was made from; `provision` keeps it for its fast path, sparkctl/serve/provfast.py).
APPLIED_SPECS = "sparkctl_applied_specs"
# playbooks/check_fabric.yml: per node the fabric probe (spark_fabric's sparkctl_fabric_probe result).
FABRIC_PROBE = "sparkctl_fabric_probe"
# playbooks/check_fabric.yml: per switch the "PORT MTU" lines it read (Linux switch; empty elsewhere).
SWITCH_MTUS = "sparkctl_switch_mtus"
# playbooks/check_fabric.yml: per node the RDMA measurements (only where every node has RDMA devices).
FABRIC_RDMA = "sparkctl_fabric_rdma"
# playbooks/upgrade.yml: per upgraded node {before, after, installed, commands, rebooted, reboot_why,
# skipped (it already matched the pins), check_mode, identity} (spark_upgrade's spark_upgrade_report
# and the identity it showed after the update).
UPGRADE = "sparkctl_upgrade"


def per_host(result: Any, key: str) -> dict[str, Any]:
    """``{host: result}`` reported under ``key``; empty when the playbook did not report it."""
    value = (getattr(result, "reported", None) or {}).get(key) or {}
    if not isinstance(value, Mapping):
        return {}
    return {str(host): res for host, res in value.items()}


def reported(result: Any, key: str) -> Any:
    """The raw value reported under ``key`` (``None`` when absent)."""
    return (getattr(result, "reported", None) or {}).get(key)
