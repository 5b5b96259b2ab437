"""Pure planning: (Cluster, verb, options) -> Plan. No I/O, no host contacted.

A Plan says which playbook runs, on which hosts, with which tags and variables, and whether in
check mode. `runner.execute(plan, on_event)` is the only thing that runs one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.ansible import reach, roledefaults

if TYPE_CHECKING:
    from sparkctl.model import Cluster


@dataclass(frozen=True)
class Plan:
    playbook: str                      # file name under playbooks/, e.g. "provision.yml"
    inventory: Path                    # the inventory directory
    limit: str | None = None           # Ansible --limit pattern
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    extravars: dict[str, Any] = field(default_factory=dict)  # never secrets
    # Controller environment variables the inventory's secrets live in: the runner keeps them out
    # of ansible-playbook's recorded environment and hands them over through memory instead.
    secret_env: tuple[str, ...] = ()
    check: bool = False
    diff: bool = False
    verbosity: int = 0
    # name -> (address, SSH port) of the nodes the controller dials directly: the runner asks each
    # for a TCP answer first (sparkctl.ansible.reach) and gives a silent one a short SSH timeout.
    ssh_endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)

    def argv(self) -> list[str]:
        """The equivalent manual command, for logs and for `--verbose`."""
        return ["ansible-playbook", "-i", str(self.inventory), f"playbooks/{self.playbook}", *self.options()]

    def options(self) -> list[str]:
        """ansible-playbook's options for the limit, tags, check and diff of this plan (the short
        form above and ``command.for_plan``'s runnable line both end with them)."""
        opts: list[str] = []
        if self.limit:
            opts += ["--limit", self.limit]
        if self.tags:
            opts += ["--tags", ",".join(self.tags)]
        if self.skip_tags:
            opts += ["--skip-tags", ",".join(self.skip_tags)]
        if self.check:
            opts.append("--check")
        if self.diff:
            opts.append("--diff")
        return opts


def secret_env_names(cluster: Cluster) -> tuple[str, ...]:
    """The controller's environment variables that hold this site's secrets, as the inventory and
    the roles declare them: each ``{env: VAR}`` of ``sparkctl_secrets``, and the Hugging Face token
    variable the stage role reads (``spark_stage_hf_token_env``). Only these are withheld."""
    names = {ref.env for ref in cluster.secrets.values() if ref.env}
    names.add(str(roledefaults.role_default("spark_stage", "spark_stage_hf_token_env")))
    return tuple(sorted(names))


def _plan(cluster: Cluster, **kw: Any) -> Plan:
    """A plan on this cluster's inventory, with the names of the environment variables its secrets
    are read from (never their values)."""
    return Plan(inventory=Path(cluster.inventory_dir), secret_env=secret_env_names(cluster),
                ssh_endpoints=reach.endpoints(cluster), **kw)


STAGE_WHAT = ("kit", "image", "weights", "engram", "all")


def for_stage(
    cluster: Cluster,
    what: str = "all",
    verify_only: bool = False,
    force: bool = False,
    settings: dict[str, Any] | None = None,
) -> Plan:
    """`sparkctl stage [kit|image|weights|engram|all] [--verify-only] [--force]` → playbooks/stage.yml.

    ``all`` stages the serving kit first when the inventory has one (the playbook decides from
    ``sparkctl_cluster.kit``, so a manual run does the same), then the engine image when the
    runtime is ``container`` (``sparkctl_cluster.runtime``).

    ``settings`` carries extra ``spark_stage_*`` knobs (e.g. ``spark_stage_bwlimit_mib_s``); every
    other value (TP size, disk margin, paths) comes from the inventory through the role defaults,
    so a manual ``ansible-playbook playbooks/stage.yml`` computes the same values.
    """
    if what not in STAGE_WHAT:
        raise ValueError(f"what must be one of {', '.join(STAGE_WHAT)}, got {what!r}")
    extravars: dict[str, Any] = {
        "spark_stage_what": what,
        "spark_stage_verify_only": verify_only,
        "spark_stage_force": force,
    }
    for key, value in (settings or {}).items():
        if not key.startswith("spark_stage_"):
            raise ValueError(f"not a stage setting: {key}")
        extravars[key] = value
    return _plan(cluster, playbook="stage.yml", extravars=extravars)


# --- provision, switch, preflight, check fabric (playbooks/provision.yml and friends) ---------------

# Tags of playbooks/provision.yml, in the order the roles run.
PROVISION_TAGS = ("preflight", "switch", "base", "fabric", "qos", "runtime", "exporter", "firewall")


def _limit(cluster: Cluster, limit: str | None) -> str | None:
    """Check a --limit of host names (comma-separated) against the inventory; InputError otherwise."""
    if not limit:
        return None
    from sparkctl.errors import InputError

    known = [n.name for n in cluster.nodes] + ([cluster.switch.name] if cluster.switch else [])
    names = [s.strip() for s in limit.split(",") if s.strip()]
    unknown = [s for s in names if s not in known]
    if unknown or not names:
        raise InputError(
            f"--limit: unknown host(s) {', '.join(unknown) or repr(limit)}",
            hint=f"use host names from the inventory: {', '.join(known)} (comma-separated)",
        )
    return ",".join(names)


def _tags(tags: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    from sparkctl.errors import InputError

    flat = tuple(t.strip() for item in tags for t in item.split(",") if t.strip())
    unknown = [t for t in flat if t not in PROVISION_TAGS]
    if unknown:
        raise InputError(
            f"--tags: unknown tag(s) {', '.join(unknown)}", hint=f"known tags: {', '.join(PROVISION_TAGS)}"
        )
    return flat


def for_provision(
    cluster: Cluster,
    *,
    check: bool = False,
    diff: bool = False,
    limit: str | None = None,
    tags: tuple[str, ...] | list[str] = (),
    full: bool = False,
) -> Plan:
    """playbooks/provision.yml: preflight, switch, base, fabric, qos, runtime, exporter, firewall.

    ``full`` runs every role even where spark_applied finds its inputs and on-node state unchanged.
    """
    return _plan(cluster, playbook="provision.yml",
                limit=_limit(cluster, limit),
        tags=_tags(tags),
        check=check,
        diff=diff,
        extravars={"spark_applied_full": True} if full else {},
    )


def for_check_fabric(cluster: Cluster) -> Plan:
    """playbooks/check_fabric.yml: read-only probes of every fabric port and pair."""
    return _plan(cluster, playbook="check_fabric.yml")


# --- up / down (playbooks/up.yml, playbooks/down.yml) ----------------------------------------------


def for_up(cluster: Cluster, install_only: bool = False) -> Plan:
    """playbooks/up.yml: install the rank units (files only), then start ranks 1..n and rank 0 last."""
    extravars: dict[str, Any] = {"spark_rank_install_only": True} if install_only else {}
    return _plan(cluster, playbook="up.yml", extravars=extravars)


def for_down(cluster: Cluster, grace_s: int | None = None) -> Plan:
    """playbooks/down.yml: SIGTERM rank 0, wait ``grace_s``, force the rest, every unit inactive."""
    extravars: dict[str, Any] = {"spark_rank_grace_s": int(grace_s)} if grace_s is not None else {}
    return _plan(cluster, playbook="down.yml", extravars=extravars)


# --- preflight and the switch on their own (playbooks/preflight.yml, playbooks/switch.yml) ----------


def for_preflight(cluster: Cluster, limit: str | None = None) -> Plan:
    """playbooks/preflight.yml: read-only inventory asserts, reachability and the identity of every node."""
    return _plan(cluster, playbook="preflight.yml", limit=_limit(cluster, limit))


def for_switch(cluster: Cluster, *, check: bool = False, diff: bool = False, rollback: bool = False) -> Plan:
    """playbooks/switch.yml limited to the switch: the RoCE switch alone (``check`` + ``diff``: what
    would change; ``rollback``: restore the newest backup the role saved instead of applying). The
    limit leaves the playbook's preflight of the nodes with no host, so an admin can do the switch
    before the nodes answer; `provision` runs the same role after the nodes' preflight."""
    extravars: dict[str, Any] = {"spark_switch_rollback": True} if rollback else {}
    limit = cluster.switch.name if cluster.switch is not None else None
    return _plan(cluster, playbook="switch.yml", check=check, diff=diff, limit=limit,
                extravars=extravars)


# --- lifecycle: upgrade, reset (playbooks/upgrade.yml, playbooks/reset.yml) -------------------------


def for_upgrade(cluster: Cluster, *, check: bool = False) -> Plan:
    """playbooks/upgrade.yml: the group down, then one node at a time as ``sparkctl_upgrade`` pins it
    (serial 1; the first failing node stops the run), then the identity preflight across all nodes.
    The pins are read from the inventory by the role, so a manual run applies the same ones."""
    from sparkctl.errors import InputError

    if cluster.upgrade is None:
        raise InputError(
            "upgrade: the inventory pins no upgrade (sparkctl_upgrade is not set); nothing was touched",
            hint="add sparkctl_upgrade (packages with exact versions, debs, commands, reboot) to "
                 "group_vars/all/sparkctl.yml; the example site documents it (`sparkctl init --example DIR`)",
        )
    return _plan(cluster, playbook="upgrade.yml", check=check, diff=check)


def for_reset(cluster: Cluster, *, purge_data: bool = False, check: bool = False) -> Plan:
    """playbooks/reset.yml: take back everything sparkctl put on the nodes; the NVMe data stays
    unless ``purge_data``. The playbook refuses to run without ``spark_reset_confirm=yes`` (a manual
    run must say it); the plan carries it because `sparkctl reset` runs the plan only after its own
    confirmation (or ``--yes``). A check run needs none."""
    extravars: dict[str, Any] = {"spark_reset_purge_data": bool(purge_data)}
    if not check:
        extravars["spark_reset_confirm"] = "yes"
    return _plan(cluster, playbook="reset.yml", check=check, extravars=extravars)
