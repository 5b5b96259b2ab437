"""Turning an Ansible inventory directory into a checked `Cluster`.

ansible-core reads the inventory (``ansible_read``: YAML or INI hosts file, group_vars/,
host_vars/, Ansible's own variable precedence, ``!vault`` values and vault-encrypted files,
templated values); this module sorts the hosts into sparkctl's two groups (``sparks``, and
``switches`` with zero or one switch; child groups under them are fine) and validates every
value with the pydantic model. Site keys come from the ``all`` group; a host sees its own
variables plus the site's defaults for host keys (e.g. ``sparkctl_nvme_gib`` in group_vars/all).

Every value is checked on its own, so one bad field never hides another; cross-field checks then
run on whatever validated. All problems are raised together in one InputError, each naming its
field and, where Ansible knows it, the file and line it came from.

Size: one module on purpose — the key tables, the per-key validation and the assembly of the
``Cluster`` are one pass over the same draft.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

from pydantic import StrictBool, StrictStr, TypeAdapter, ValidationError

from sparkctl.errors import InputError, SparkctlError
from sparkctl.model import cache as inventory_cache
from sparkctl.model import connection, sshconfig, topology
from sparkctl.model.checks import run_checks
from sparkctl.model.cluster import (
    Checkpoint,
    Cluster,
    Fabric,
    FabricPort,
    Kit,
    Mgmt,
    Node,
    Paths,
    Ports,
    Runtime,
    SecretRef,
    Supervisor,
    Switch,
    SwitchType,
    Upgrade,
)
from sparkctl.model.draft import Draft
from sparkctl.model.problems import Problems, from_validation_error, join_path, suggest
from sparkctl.model.router import Router
from sparkctl.model.types import Gib, HostName, Mtu, Rank, ShortName
from sparkctl.profiles.shape import Topology

SPARKS, SWITCHES = "sparks", "switches"
GROUPS = (SPARKS, SWITCHES)
GATEWAY_KEYS = ("gateway", "gateway4", "gateway6", "routes", "via", "default_route")


@dataclass(frozen=True)
class Key:
    """One inventory key: its type, whether it must be present, and its default."""

    type: Any
    required: bool = True
    default: Any = None


# Site-wide keys (group_vars/all or all.vars).
SITE_KEYS: dict[str, Key] = {
    "sparkctl_cluster_name": Key(ShortName),
    "sparkctl_profile": Key(StrictStr),
    "sparkctl_profile_overrides": Key(dict[StrictStr, Any], False, {}),
    "sparkctl_runtime": Key(Runtime),
    "sparkctl_mgmt": Key(Mgmt),
    "sparkctl_fabric": Key(Fabric),
    "sparkctl_ports": Key(Ports),
    "sparkctl_api_allow": Key(list[IPv4Network], False, None),
    "sparkctl_paths": Key(Paths),
    "sparkctl_checkpoint": Key(Checkpoint),
    "sparkctl_kit": Key(Kit | None, False, None),
    "sparkctl_secrets": Key(dict[StrictStr, SecretRef], False, {}),
    "sparkctl_upgrade": Key(Upgrade | None, False, None),
    "sparkctl_supervisor": Key(Supervisor, False, Supervisor()),
    "sparkctl_autostart": Key(StrictBool, False, False),
    # The fabric topology and the serving groups (sparkctl.model.topology).
    "sparkctl_topology": Key(Topology, False, "switch"),
    "sparkctl_groups": Key(list[topology.GroupSpec] | None, False, None),
    # SGLang's gateway in front of the groups (sparkctl.model.router).
    "sparkctl_router": Key(Router | None, False, None),
}
# Keys of one Spark (host entry, host_vars, group_vars/sparks; defaults may sit in group_vars/all).
SPARK_KEYS: dict[str, Key] = {
    "ansible_host": Key(IPv4Address),
    "sparkctl_rank": Key(Rank),
    "sparkctl_fabric_ports": Key(list[dict[str, Any]]),
    "sparkctl_nvme_gib": Key(Gib | None, False, None),
}
# Keys of the switch.
SWITCH_KEYS: dict[str, Key] = {
    "ansible_host": Key(HostName),
    "sparkctl_switch_type": Key(SwitchType),
    "sparkctl_switch_mtu": Key(Mtu),
    "sparkctl_switch_l2mtu": Key(Mtu | None, False, None),
    "sparkctl_switch_ports": Key(dict[StrictStr, dict[StrictStr, StrictStr]]),
}
# ansible_* keys sparkctl itself reads.
ANSIBLE_READ: dict[str, Key] = {
    "ansible_user": Key(StrictStr),
    "ansible_ssh_common_args": Key(StrictStr, False, None),
}
GROUP_KEYS = {SPARKS: SPARK_KEYS, SWITCHES: SWITCH_KEYS}


@cache
def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


def _known(tp: Any) -> list[str] | None:
    fields = getattr(tp, "model_fields", None)
    return list(fields) if fields else None


def check_value(value: Any, tp: Any, path: str, problems: Problems) -> tuple[bool, Any]:
    """Validate one value against one type; (ok, value) with problems recorded on failure."""
    try:
        return True, _adapter(tp).validate_python(value)
    except ValidationError as exc:
        problems.extend(from_validation_error(exc, path, _known(tp)))
        return False, None


@dataclass
class HostEntry:
    """A host of sparks or switches, and its variables (its own, plus the site's host defaults)."""

    name: str
    group: str
    vars: dict[str, Any] = field(default_factory=dict)


@dataclass
class Raw:
    """Everything Ansible resolved, before validation."""

    site: dict[str, Any] = field(default_factory=dict)
    hosts: dict[str, HostEntry] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)  # field path -> "file:line"
    vaulted: set[str] = field(default_factory=set)  # site variables kept with ansible-vault


# -- reading --------------------------------------------------------------------------------------


def read_raw(inv: Path, problems: Problems, vault_password_file: Path | str | None = None) -> Raw:
    """The inventory as Ansible resolves it, sorted into sparkctl's two groups."""
    # ansible-core is imported here, when the inventory is read for real (not from ``cache``).
    from sparkctl.model import ansible_read

    read = ansible_read.read(inv, problems, vault_password_file)
    raw = Raw(site=read.site, origins=read.origins, vaulted=read.vaulted)
    shown = " / ".join(read.sources)
    if SPARKS not in read.group_names:
        problems.add(
            f"{shown}: all.children.sparks", "missing", "list the Sparks under all.children.sparks.hosts"
        )
    for name, ancestors in sorted(read.group_names.items()):
        if name in ("all", "ungrouped", *GROUPS) or ancestors & set(GROUPS):
            continue
        problems.add(
            f"{shown}: all.children.{name}",
            f"unknown group{suggest(name, GROUPS)}",
            "sparkctl knows two groups: sparks (the nodes) and switches (zero or one switch); "
            "other groups may only sit under them",
        )
    for host in read.hosts.values():
        mine = [g for g in GROUPS if g in host.groups]
        if len(mine) > 1:
            problems.add(
                f"{host.source}: all.children.{SWITCHES}.hosts.{host.name}",
                f"host also listed in {SPARKS}",
                "give every host one group and a unique name",
            )
            continue
        if not mine:
            if host.groups <= {"all", "ungrouped"}:
                problems.add(
                    f"{host.source}: all.hosts.{host.name}",
                    "hosts outside a group",
                    "list Sparks under all.children.sparks.hosts",
                )
            continue  # otherwise its group is reported as unknown
        group = mine[0]
        defaults = {
            k: v for k, v in raw.site.items() if k in GROUP_KEYS[group] and not k.startswith("ansible_")
        }
        raw.hosts[host.name] = HostEntry(host.name, group, {**defaults, **host.vars})
    return raw


def _secret_vars(site: dict[str, Any]) -> set[str]:
    """Variables named by ``sparkctl_secrets.*.var`` (known keys, read as secrets)."""
    refs = site.get("sparkctl_secrets")
    if not isinstance(refs, dict):
        return set()
    return {r["var"] for r in refs.values() if isinstance(r, dict) and isinstance(r.get("var"), str)}


def _attach_secret_values(draft: Draft, raw: Raw, problems: Problems) -> None:
    """Give every ``{var: NAME}`` secret its decrypted value; a clear-text one is refused."""
    for name, ref in (draft.site.get("sparkctl_secrets") or {}).items():
        if ref.var is None:
            continue
        path = f"sparkctl_secrets.{name}.var"
        todo = (
            "keep it with ansible-vault: `ansible-vault encrypt_string --name NAME` into group_vars/all/, "
            "or a vault-encrypted group_vars/all/vault.yml"
        )
        if ref.var not in raw.site:
            if not any(p.path == ref.var for p in problems.items):  # not already: could not decrypt
                problems.add(path, f"no variable {ref.var} in the inventory's group_vars/all", todo)
        elif ref.var not in raw.vaulted:
            problems.add(path, f"{ref.var} is written in clear text", todo)
        else:
            value = raw.site[ref.var]
            if not isinstance(value, str) or not value.strip():
                problems.add(path, f"{ref.var} is empty or not text", "encrypt the key itself (one line)")
            else:
                ref.with_value(value.strip())


# -- validation -----------------------------------------------------------------------------------


def _odd_keys(value: Any, path: str) -> list[tuple[str, Any]]:
    """Mapping keys that are not text, e.g. `on:` or `yes:`, which YAML 1.1 reads as booleans."""
    found: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                found.append((path, k))
            else:
                found.extend(_odd_keys(v, f"{path}.{k}"))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(_odd_keys(v, f"{path}[{i}]"))
    return found


def _validate_keys(
    values: dict[str, Any], spec: dict[str, Key], prefix: str, problems: Problems, *, host_level: bool
) -> dict[str, Any]:
    """Validate every known key, refuse unknown ones; returns the keys that validated."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        path = join_path(prefix, [key])
        if key in spec:
            odd = _odd_keys(value, path)
            for where, k in odd:
                problems.add(
                    f"{where}.{k}",
                    f"key {k!r} is not text (YAML reads on/off/yes/no as booleans)",
                    "quote the key or use its documented name (e.g. location: head, not on: head)",
                )
            if odd or key == "sparkctl_fabric_ports":
                continue  # fabric ports are checked port by port by the caller
            ok, checked = check_value(value, spec[key].type, path, problems)
            if ok:
                out[key] = checked
        elif key.startswith("ansible_"):
            connection.check(key, value, path if prefix else f"all.vars.{key}", problems, check_value)
        elif host_level and key in SITE_KEYS:
            problems.add(path, "a site-wide key set on one host", "move it to group_vars/all/sparkctl.yml")
        else:
            known = sorted(spec)
            problems.add(
                path,
                f"unknown key{suggest(key, known)}",
                f"remove it or fix its spelling (known here: {', '.join(known)}, ansible_*)",
            )
    for key, item in spec.items():
        if key in values:
            continue
        if item.required:
            problems.add(
                join_path(prefix, [key]), "missing",
                "add it (the example site shows every key, commented: `sparkctl init --example DIR`)",
            )
        else:
            out[key] = item.default
    return out


def _fabric_ports(value: Any, path: str, problems: Problems) -> list[FabricPort] | None:
    ok, items = check_value(value, list[Any], path, problems)
    if not ok:
        return None
    ports: list[FabricPort] = []
    good = True
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        if isinstance(item, dict):
            item = dict(item)
            for key in GATEWAY_KEYS:
                if key in item:
                    item.pop(key)
                    problems.add(
                        f"{where}.{key}",
                        "a gateway or route on a fabric port",
                        "remove it: fabric ports are one L2 segment and carry no default route",
                    )
        ok, port = check_value(item, FabricPort, where, problems)
        if ok:
            ports.append(port)
        else:
            good = False
    if not items:
        problems.add(path, "no fabric ports", "list both PCIe halves of the cabled ConnectX-7 port")
        return None
    return ports if good else None


def _known_hosts(args: str | None, inv: Path) -> Path | None:
    """The site's pinned known_hosts: UserKnownHostsFile of the ssh arguments (``-o Key=Value`` or
    ``-o "Key Value"``; a relative path read from the inventory directory), else the inventory's own
    known_hosts when there is one."""
    named = sshconfig.ssh_options_from_args(args).get("userknownhostsfile")
    if named and named[0].split():
        return sshconfig.controller_path(named[0].split()[0], inv)
    candidate = inv / "known_hosts"
    return candidate.absolute() if candidate.is_file() else None


def _one_port(host_vars: dict[str, Any], prefix: str, problems: Problems) -> None:
    """``ansible_port`` and ``ansible_ssh_port`` both set (at any level) and different: Ansible takes
    ``ansible_ssh_port`` whatever the levels, which is rarely what the one who wrote both meant."""
    port, ssh_port = host_vars.get("ansible_port"), host_vars.get("ansible_ssh_port")
    if port is not None and ssh_port is not None and str(port).strip() != str(ssh_port).strip():
        problems.add(f"{prefix}.ansible_port",
                     f"is {port} but ansible_ssh_port is {ssh_port} (Ansible connects on {ssh_port})",
                     "set one of the two")


def _ansible_vars(host_vars: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in host_vars.items() if k.startswith("ansible_")}


def _ssh_config_port(host_vars: dict[str, Any], inv: Path, address: Any, name: str) -> int | None:
    """The Port the host's ssh_config files give it, when its Ansible variables name none."""
    hostvars = _ansible_vars(host_vars)
    if sshconfig.port_from_vars(hostvars) is not None:
        return None
    return sshconfig.config_port(sshconfig.config_files(hostvars, inv), str(address), name)


_TRUE = {"true", "yes", "on", "1", "y", "t"}


def _become_not_for_everyone(site: dict[str, Any], problems: Problems) -> None:
    """``ansible_become: true`` under ``all`` reaches Ansible's implicit localhost too (it takes
    group all's variables), and a variable outranks a task's ``become: false``: every task sparkctl
    runs on the controller (fetching the kit and the checkpoint, building and saving the image)
    would run sudo there, as root or stopped at a password prompt."""
    value = site.get("ansible_become")
    if value is True or (isinstance(value, str | int) and str(value).strip().lower() in _TRUE):
        problems.add("all.vars.ansible_become",
                     "true for every host, the controller's own tasks included (Ansible gives its "
                     "implicit localhost group all's variables), which would run sudo on the controller",
                     "set ansible_become: true under children.sparks.vars instead (as hosts.yml of the "
                     "example site does: `sparkctl init --example DIR`)")


def validate_raw(raw: Raw, inv: Path, problems: Problems) -> Draft:
    draft = Draft(inventory_dir=inv)
    secret_vars = _secret_vars(raw.site)
    site_only = {
        k: v
        for k, v in raw.site.items()
        if k not in secret_vars
        and (not any(k in spec for spec in GROUP_KEYS.values()) or k.startswith("ansible_"))
    }
    draft.site = _validate_keys(site_only, SITE_KEYS, "", problems, host_level=False)
    _attach_secret_values(draft, raw, problems)
    _become_not_for_everyone(raw.site, problems)
    for key, item in ANSIBLE_READ.items():
        if key in raw.site:
            ok, value = check_value(raw.site[key], item.type, key, problems)
            if ok:
                draft.ansible[key] = value
        elif item.required:
            problems.add(f"all.vars.{key}", "missing", "set the SSH user sparkctl and Ansible log in as")
        else:
            draft.ansible[key] = item.default

    overrides = draft.get("sparkctl_profile_overrides")
    if "sparkctl_profile" in draft.site and overrides is not None:
        draft.profile = _profile(draft.site["sparkctl_profile"], overrides, problems)

    for entry in raw.hosts.values():
        prefix = f"{entry.group}.{entry.name}"
        ok_name, _ = check_value(entry.name, ShortName, prefix, problems)
        values = _validate_keys(entry.vars, GROUP_KEYS[entry.group], prefix, problems, host_level=True)
        _one_port(entry.vars, prefix, problems)
        # What Ansible dials this host with: `all`'s connection variables under the host's own (a
        # port or key file written once for the site applies to every node, as in Ansible).
        dialled = {**_ansible_vars(raw.site), **entry.vars}
        if entry.group == SPARKS:
            draft.spark_names.append(entry.name)
            if "sparkctl_rank" in values:
                draft.ranks[entry.name] = values["sparkctl_rank"]
            ports = None
            if "sparkctl_fabric_ports" in entry.vars:
                ports = _fabric_ports(
                    entry.vars["sparkctl_fabric_ports"], f"{prefix}.sparkctl_fabric_ports", problems
                )
            if ok_name and ports is not None and all(k in values for k in ("ansible_host", "sparkctl_rank")):
                draft.nodes.append(
                    Node(
                        name=entry.name,
                        rank=values["sparkctl_rank"],
                        mgmt_ip=values["ansible_host"],
                        fabric_ports=ports,
                        nvme_gib=values.get("sparkctl_nvme_gib"),
                        hostvars=_ansible_vars(dialled),
                        ssh_config_port=_ssh_config_port(dialled, inv, values["ansible_host"], entry.name),
                    )
                )
        else:
            draft.switch_names.append(entry.name)
            needed = ("ansible_host", "sparkctl_switch_type", "sparkctl_switch_mtu", "sparkctl_switch_ports")
            if all(k in values for k in needed):
                draft.switch = Switch(
                    name=entry.name,
                    host=values["ansible_host"],
                    type=values["sparkctl_switch_type"],
                    mtu=values["sparkctl_switch_mtu"],
                    l2mtu=values.get("sparkctl_switch_l2mtu"),
                    ports=values["sparkctl_switch_ports"],
                    hostvars=_ansible_vars(dialled),
                    ssh_config_port=_ssh_config_port(dialled, inv, values["ansible_host"], entry.name),
                )
    draft.nodes.sort(key=lambda n: n.rank)
    draft.groups = topology.resolve_groups(draft, problems)
    return draft


def _profile(name: str, overrides: dict[str, Any], problems: Problems) -> Any:
    from sparkctl.profiles import load_profile

    try:
        return load_profile(name, overrides, where="sparkctl_profile_overrides")
    except SparkctlError as exc:
        todo = exc.hint or "fix it"
        if not exc.details:
            path = (
                "sparkctl_profile_overrides"
                if exc.message.startswith("sparkctl_profile_overrides")
                else "sparkctl_profile"
            )
            problems.add(path, exc.message.removeprefix(f"{path}: ").removeprefix(f"{path}."), todo)
        for detail in exc.details:
            path, _, what = detail.partition(": ")
            problems.add(path, what or detail, todo)
        return None


def load_inventory(path: Path | str, *, vault_password_file: Path | str | None = None) -> Cluster:
    """Load and check one inventory directory; raises InputError listing every problem.

    ``vault_password_file`` adds to ``$ANSIBLE_VAULT_PASSWORD_FILE`` and ansible.cfg's
    ``vault_password_file`` (see ``ansible_read``).
    """
    inv = Path(path)
    if not inv.is_dir():
        what = "does not exist" if not inv.exists() else "is not a directory"
        raise InputError(
            f"inventory {inv} {what}", hint="pass the inventory directory with --inventory/-i DIR"
        )
    problems = Problems()
    ticket = inventory_cache.lookup(inv, vault_password_file)
    if ticket.raw is not None:
        raw, kept = _raw_from(ticket.raw), None
    else:
        raw = read_raw(inv, problems, vault_password_file)
        # as plain data now, before validation touches it
        kept = None if problems.items else inventory_cache.plain(_raw_doc(raw))
    draft = validate_raw(raw, inv, problems)
    warnings = run_checks(draft, problems)
    problems.drop_missing_where_reported()
    problems.locate(raw.origins)
    problems.raise_if_any(str(inv))
    site = draft.site
    mgmt: Mgmt = site["sparkctl_mgmt"]
    api_allow = site["sparkctl_api_allow"]
    secrets = {k: v.with_base(inv) for k, v in site["sparkctl_secrets"].items()}
    cluster = Cluster(
        name=site["sparkctl_cluster_name"],
        inventory_dir=inv,
        profile=draft.profile,
        nodes=draft.nodes,
        runtime=site["sparkctl_runtime"],
        mgmt=mgmt,
        fabric=site["sparkctl_fabric"],
        ports=site["sparkctl_ports"],
        api_allow=list(api_allow) if api_allow is not None else [mgmt.subnet],
        paths=site["sparkctl_paths"],
        checkpoint=site["sparkctl_checkpoint"],
        kit=site["sparkctl_kit"],
        secrets=secrets,
        upgrade=site["sparkctl_upgrade"],
        supervisor=site["sparkctl_supervisor"],
        autostart=site["sparkctl_autostart"],
        switch=draft.switch,
        ssh_user=draft.ansible["ansible_user"],
        known_hosts=_known_hosts(draft.ansible.get("ansible_ssh_common_args"), inv),
        warnings=warnings,
        topology=site["sparkctl_topology"],
        groups=draft.groups,
        router=site["sparkctl_router"],
    )
    if kept is not None:
        switch = None if cluster.switch is None else [cluster.switch.name, str(cluster.switch.type)]
        ticket.keep(kept, {"nodes": [[n.name, n.rank] for n in cluster.nodes], "switch": switch})
    return cluster


def _raw_doc(raw: Raw) -> dict[str, Any]:
    """``raw`` as plain data, for the cache (``_raw_from`` reads it back)."""
    return {
        "site": raw.site,
        "hosts": [[h.name, h.group, h.vars] for h in raw.hosts.values()],
        "origins": raw.origins,
        "vaulted": sorted(raw.vaulted),
    }


def _raw_from(doc: dict[str, Any]) -> Raw:
    return Raw(
        site=doc["site"],
        hosts={name: HostEntry(name, group, values) for name, group, values in doc["hosts"]},
        origins=doc["origins"],
        vaulted=set(doc["vaulted"]),
    )
