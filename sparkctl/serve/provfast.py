"""The fast path of `sparkctl provision`: nothing due, no ansible-playbook at all.

A re-run of playbooks/provision.yml decides role by role what is due (role spark_applied): the
``sparkctl_applied`` module reads on each node what every role owns there and compares it, and a
digest of the role's inputs, with what the node recorded right after the role last ran. Starting
Ansible, its preflight, the switch play, fact gathering and the decision tasks cost far more than
that read. So `provision` keeps, per site, what the last whole run decided from (:func:`save`): each
node's roles with their inputs digests and state specs, as the playbook reported them
(``results.APPLIED_SPECS``). The next plain `provision` (no --check, --diff, --limit, --tags or
--full) then:

1. compares a digest of everything on the controller those inputs digests were computed from
   (:func:`controller_key`: the inventory directory, the roles' trees, the playbooks and plugins,
   the parts of the sparkctl package that Ansible's side runs (``CONTROLLER_PARTS``), ansible-core's
   version, the ANSIBLE_* environment and the state directory); any difference runs the playbook,
   which computes the digests afresh;
2. runs, in one SSH round, ``sparkctl.nodeside.provcheck`` on every node: the same probe
   (``nodeside.applied.probe``) against the node's record — a file edited by hand, a unit stopped,
   an MTU or address changed with ``ip``, a sysctl set by hand, a table deleted, a package removed
   all make that role due — and, on the lab's Linux switch, every node-facing port's MTU against
   the inventory's (what ``spark_switch``'s Linux tasks set);
3. takes the fast path only when no role is due anywhere and every host answered; otherwise the
   playbook runs, and decides again, on the nodes, which roles run (only those due).

A RouterOS or NVUE switch is read by its own play (over network_cli): with one in the inventory
the playbook runs. The preflight the playbook starts with is skipped with the rest when nothing
is due: it guards changes, and there is none to make.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol

from sparkctl.ansible import content
from sparkctl.ansible.treedigest import tree_digest
from sparkctl.nodeside import ship

if TYPE_CHECKING:
    from sparkctl.model import Cluster
    from sparkctl.ssh.fleet import Fleet
    from sparkctl.ssh.targets import Target

# Shipped to the node (sparkctl.nodeside.ship), dependencies first; the last is the check it runs.
NODE_MODULES = ("nodeside.system", "nodeside.links", "nodeside.applied", "nodeside.provcheck")
FORMAT = 1
# What the fast path is never taken with: the playbook's own modes.
PLAYBOOK_OPTIONS = ("--check", "--diff", "--limit", "--tags", "--full")
CHECK_TIMEOUT_S = 60.0


class Runs(Protocol):
    """What the check needs of a fan-out (``sparkctl.ssh.fleet.Fleet``)."""

    def run(self, script: Any, timeout: float = ..., only: Any = ...) -> Mapping[str, Any]: ...


class ProvisionCheck(ship.Verdict):
    """Whether `provision` may end without the playbook, and if not, why; ``applied`` is every
    node's per-role verdict ({role: {run, reasons}}, the playbook's ``results.APPLIED`` shape)."""

    applied: dict[str, dict[str, Any]]
    dark: list[str]  # hosts that did not answer the round (the playbook names each with its cause)

    def __init__(self, reasons: list[str], seconds: float = 0.0,
                 applied: dict[str, dict[str, Any]] | None = None, dark: list[str] | None = None) -> None:
        super().__init__(reasons, seconds, {})
        self.applied = applied or {}
        self.dark = dark or []

    def node_names(self) -> list[str]:
        return [*self.applied, *self.dark]


# --- what the controller decided from -------------------------------------------------------------


def _tree_path(name: str) -> Path:
    """A role's input tree as spark_applied names it: absolute, or relative to the roles directory."""
    return Path(name) if os.path.isabs(name) else content.root() / "roles" / name


def _ansible_version() -> str:
    try:
        return metadata.version("ansible-core")
    except metadata.PackageNotFoundError:
        return "absent"


# The parts of the sparkctl package that Ansible's side runs (the vars plugin renders with model and
# render, the lookups and the action plugin import ansible/, the roles ship nodeside/ and stage/):
# by the import-linter layers contract (pyproject.toml) none of them imports cli, serve, qa or site,
# which may change without changing what a role is given.
CONTROLLER_PARTS = ("ansible", "ssh", "model", "render", "profiles", "nodeside", "stage")


def sparkctl_digest() -> dict[str, str]:
    """The digests of the package parts Ansible's side runs, and of its top-level modules."""
    package = Path(__file__).resolve().parents[1]
    out = {part: tree_digest(package / part) for part in CONTROLLER_PARTS}
    out.update({f.name: tree_digest(f) for f in sorted(package.glob("*.py"))})
    return out


def controller_key(cluster: Cluster, extravars: Mapping[str, Any], trees: list[str],
                   environ: Mapping[str, str] | None = None) -> str:
    """One digest of everything on the controller that the roles' inputs digests derive from."""
    env = os.environ if environ is None else environ
    root = content.root()
    doc = {
        "format": FORMAT,
        "inventory": tree_digest(Path(cluster.inventory_dir).resolve()),
        "content": {name: tree_digest(root / name) for name in ("ansible.cfg", "playbooks", "plugins")},
        "sparkctl": sparkctl_digest(),
        "trees": {name: tree_digest(_tree_path(name)) for name in sorted(set(trees))},
        "ansible": _ansible_version(),
        "extravars": {k: v for k, v in sorted(extravars.items()) if k != "spark_applied_full"},
        "env": {k: v for k, v in sorted(env.items()) if k.startswith("ANSIBLE_") or k == content.STATE_ENV},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=repr).encode()).hexdigest()


def record_path(cluster: Cluster, state: Path | None = None) -> Path:
    """Where the controller keeps the last whole run's decisions for this inventory directory."""
    where = str(Path(cluster.inventory_dir).resolve())
    name = hashlib.sha256(where.encode()).hexdigest()[:16]
    return (state or content.state_dir()) / "provision" / f"{name}.json"


def trees_of(specs: Mapping[str, Any]) -> list[str]:
    """Every role input tree the reported specs name (``{host: {roles: {role: {trees}}}}``)."""
    out: set[str] = set()
    for host in specs.values():
        for role in (host.get("roles") or {}).values():
            out.update(str(t) for t in role.get("trees") or [])
    return sorted(out)


def save(cluster: Cluster, extravars: Mapping[str, Any], specs: Mapping[str, Any], base_before: str,
         state: Path | None = None) -> bool:
    """Keep what a whole, successful run decided from (``specs``: ``results.APPLIED_SPECS``), when it
    covers every node and nothing on the controller changed during the run (``base_before``: the
    :func:`controller_key` without trees, taken before it). Returns whether it was kept; otherwise
    the previous record is removed (it may no longer hold)."""
    path = record_path(cluster, state)
    nodes = {n.name for n in cluster.nodes}
    if not nodes <= set(specs) or controller_key(cluster, extravars, []) != base_before:
        path.unlink(missing_ok=True)
        return False
    trees = trees_of(specs)
    doc = {"format": FORMAT, "inventory": str(Path(cluster.inventory_dir).resolve()),
           "key": controller_key(cluster, extravars, trees), "trees": trees,
           "extravars": {k: v for k, v in sorted(extravars.items()) if k != "spark_applied_full"},
           "nodes": {n: specs[n] for n in sorted(nodes)}}
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".partial")
    tmp.write_text(json.dumps(doc, sort_keys=True))
    tmp.chmod(0o600)
    tmp.replace(path)
    return True


def load(cluster: Cluster, state: Path | None = None) -> dict[str, Any] | None:
    try:
        doc = json.loads(record_path(cluster, state).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("nodes"), dict):
        return None
    return doc


# --- the check round --------------------------------------------------------------------------------


def check_script(params: Mapping[str, Any]) -> str:
    """Shell text that runs the node check with ``params`` under python3 (on stdin, not in argv)."""
    return ship.python_script(NODE_MODULES, params, "SPARKCTL_PROVCHECK_EOF")


def switch_ports(cluster: Cluster) -> list[str]:
    """The switch ports the nodes are cabled to (what spark_switch's Linux tasks set the MTU of)."""
    sw = cluster.switch
    return sorted({port for ports in (sw.ports.values() if sw else []) for port in ports.values()})


def switch_target(cluster: Cluster) -> Target | None:
    """How to reach a Linux switch over SSH, resolved exactly as a node is (``targets_for``)."""
    from sparkctl.ssh.targets import targets_for

    sw = cluster.switch
    if sw is None or sw.type != "linux":
        return None
    host = SimpleNamespace(name=sw.name, hostvars=sw.hostvars, mgmt_ip=sw.host, ssh_port=sw.ssh_port,
                           rank=None)
    shim = SimpleNamespace(inventory_dir=cluster.inventory_dir, nodes=[host],
                           ssh_user=getattr(cluster, "ssh_user", None),
                           known_hosts=getattr(cluster, "known_hosts", None))
    (target,) = targets_for(shim)  # type: ignore[arg-type]
    return target


def fleet_for(cluster: Cluster) -> Fleet:
    """Every node, and a Linux switch, in one fan-out."""
    from sparkctl.ssh.fleet import Fleet
    from sparkctl.ssh.targets import targets_for

    targets = list(targets_for(cluster))
    sw = switch_target(cluster)
    return Fleet([*targets, sw] if sw is not None else targets)


def cheap_reasons(cluster: Cluster, recorded: Mapping[str, Any] | None, extravars: Mapping[str, Any],
                  environ: Mapping[str, str] | None = None) -> list[str]:
    """Reasons found before any connection: no record, a controller that changed, a switch whose
    configuration only its own play reads."""
    if recorded is None:
        return ["no whole provision run recorded from this controller for this inventory"]
    if cluster.switch is not None and cluster.switch.type != "linux":
        return [f"{cluster.switch.name}: the {cluster.switch.type} switch is read by its own play"]
    missing = sorted({n.name for n in cluster.nodes} - set(recorded["nodes"]))
    if missing:
        return [f"{', '.join(missing)}: not in the last whole run"]
    key = controller_key(cluster, extravars, list(recorded.get("trees") or []), environ)
    if key != recorded.get("key"):
        return ["the inventory, the roles, sparkctl or its environment changed since the last whole run"]
    return []


def judge(cluster: Cluster, answers: Mapping[str, Mapping[str, Any] | str]
          ) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Reasons the playbook must run (empty: it need not), and each node's per-role verdict. Pure."""
    reasons: list[str] = []
    applied: dict[str, dict[str, Any]] = {}
    for node in cluster.nodes:
        ans = answers.get(node.name, "no answer")
        if isinstance(ans, str):
            reasons.append(f"{node.name}: {ans}")
            continue
        if ans.get("error"):
            reasons.append(f"{node.name}: {ans['error']}")
            continue
        roles = ans.get("roles")
        if not isinstance(roles, Mapping) or not roles:
            reasons.append(f"{node.name}: the roles were not checked")
            continue
        applied[node.name] = {str(r): dict(v) for r, v in roles.items()}
        for role, verdict in roles.items():
            if verdict.get("run"):
                why = list(verdict.get("reasons") or ["due"])
                more = f"; … ({len(why) - 3} more)" if len(why) > 3 else ""
                reasons.append(f"{role} on {node.name}: {'; '.join(str(w) for w in why[:3])}{more}")
    sw = cluster.switch
    if sw is not None and sw.type == "linux":
        ans = answers.get(sw.name, "no answer")
        ports = ans.get("ports") if isinstance(ans, Mapping) else None
        if isinstance(ans, str):
            reasons.append(f"{sw.name}: {ans}")
        elif not isinstance(ports, Mapping):
            reasons.append(f"{sw.name}: the switch ports were not read")
        else:
            for port in switch_ports(cluster):
                mtu = ports.get(port, "absent")
                if mtu != int(sw.mtu):
                    now = "is absent" if mtu == "absent" else f"has MTU {mtu}"
                    reasons.append(f"{sw.name}: port {port} {now}, the inventory says {int(sw.mtu)}")
    return reasons, applied


def check(cluster: Cluster, fleet: Runs | None, extravars: Mapping[str, Any] | None = None,
          state: Path | None = None, timeout: float = CHECK_TIMEOUT_S) -> ProvisionCheck:
    """Whether the playbook may be skipped: the record of the last whole run, then one check round on
    every node (and a Linux switch). ``fleet`` is None where the caller opens it only when needed:
    then :func:`fleet_for` is used and closed here."""
    t0 = time.monotonic()
    extra = dict(extravars or {})
    recorded = load(cluster, state)
    cheap = cheap_reasons(cluster, recorded, extra)
    if cheap or recorded is None:
        return ProvisionCheck(cheap, time.monotonic() - t0)
    scripts = {name: check_script({"roles": spec.get("roles") or {},
                                   "path": spec.get("path")})
               for name, spec in recorded["nodes"].items()}
    if cluster.switch is not None and cluster.switch.type == "linux":
        scripts[cluster.switch.name] = check_script({"ports": switch_ports(cluster)})
    own = fleet is None
    connections: Any = fleet_for(cluster) if fleet is None else fleet
    try:
        results = connections.run(scripts, timeout=timeout, only=list(scripts))
    finally:
        if own:
            connections.close()
    answers = ship.answers(results, "provcheck")
    reasons, applied = judge(cluster, answers)
    dark = sorted(n for n, a in answers.items() if isinstance(a, str) and a.startswith("unreachable"))
    return ProvisionCheck(reasons, time.monotonic() - t0, applied, dark)


__all__ = ["NODE_MODULES", "PLAYBOOK_OPTIONS", "ProvisionCheck", "check", "check_script", "controller_key",
           "judge", "load", "record_path", "save", "switch_target", "tree_digest"]
