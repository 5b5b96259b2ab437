"""Reading an Ansible YAML inventory directory into a `Cluster`, without importing Ansible.

Where variables come from, lowest precedence first (Ansible's order for these sources):
  site:   hosts.yml ``all.vars`` < ``group_vars/all`` (file or directory, files sorted)
  a host: site defaults for host keys < ``<group>.vars`` in hosts.yml < ``group_vars/<group>``
          < the host's entry in hosts.yml < ``host_vars/<host>``
A key set twice replaces the earlier value (Ansible's ``hash_behaviour=replace``).

Every value is checked on its own, so one bad field never hides another; cross-field checks then
run on whatever validated. All problems are raised together in one InputError.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from functools import cache
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

from pydantic import StrictStr, TypeAdapter, ValidationError

from sparkctl.errors import InputError, SparkctlError
from sparkctl.model.cluster import (
    Checkpoint,
    Cluster,
    Fabric,
    FabricPort,
    Mgmt,
    Node,
    Paths,
    Ports,
    Runtime,
    SecretRef,
    Switch,
    SwitchType,
)
from sparkctl.model.problems import Problems, from_validation_error, join_path, suggest
from sparkctl.model.types import Gib, HostName, Mtu, Rank, ShortName

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
    "sparkctl_secrets": Key(dict[StrictStr, SecretRef], False, {}),
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
    """A host as written: its group, and its merged variables with where each came from."""

    name: str
    group: str
    vars: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)

    def put(self, values: dict[str, Any], origin: str) -> None:
        for key, value in values.items():
            self.vars[key] = value
            self.origin[key] = origin


@dataclass
class Raw:
    """Everything read from disk, before validation."""

    site: dict[str, Any] = field(default_factory=dict)
    site_origin: dict[str, str] = field(default_factory=dict)
    hosts: dict[str, HostEntry] = field(default_factory=dict)


# -- reading --------------------------------------------------------------------------------------


def _hosts_file(inv: Path) -> Path:
    for name in ("hosts.yml", "hosts.yaml"):
        if (inv / name).is_file():
            return inv / name
    raise InputError(
        f"{inv}: no hosts.yml",
        hint="an inventory directory holds hosts.yml and group_vars/all/ (copy inventory/example/)",
    )


def _mapping(value: Any, path: str, problems: Problems, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.add(
            path, f"expected a mapping ({what}), got {type(value).__name__}", "write `key: value` lines"
        )
        return {}
    return value


def read_raw(inv: Path, problems: Problems) -> Raw:
    from sparkctl.model.yamlio import read_mapping, var_files, var_names

    raw = Raw()
    hosts_path = _hosts_file(inv)
    disp = hosts_path.name
    top = read_mapping(hosts_path, disp)
    for key in top:
        if key != "all":
            problems.add(
                f"{disp}: {key}",
                "unknown top-level group",
                "put everything under `all:` (children: sparks, switches)",
            )
    everything = _mapping(top.get("all"), f"{disp}: all", problems, "vars and children")
    if "all" not in top:
        problems.add(
            f"{disp}: all", "missing", "start the file with `all:` (see inventory/example/hosts.yml)"
        )
    for key in everything:
        if key == "hosts":
            problems.add(
                f"{disp}: all.hosts", "hosts outside a group", "list Sparks under all.children.sparks.hosts"
            )
        elif key not in ("vars", "children"):
            problems.add(
                f"{disp}: all.{key}",
                f"unknown key{suggest(key, ['vars', 'children'])}",
                "use all.vars and all.children",
            )
    site_vars = _mapping(everything.get("vars"), f"{disp}: all.vars", problems, "variables")
    raw.site.update(site_vars)
    raw.site_origin.update(dict.fromkeys(site_vars, f"{disp} all.vars"))

    group_dir = inv / "group_vars"
    for path in var_files(group_dir, "all"):
        display = str(path.relative_to(inv))
        values = read_mapping(path, display)
        raw.site.update(values)
        raw.site_origin.update(dict.fromkeys(values, display))
    for name in sorted(var_names(group_dir) - {"all", *GROUPS}):
        problems.add(
            f"group_vars/{name}",
            "vars for a group sparkctl does not know",
            "use group_vars/all, group_vars/sparks or group_vars/switches",
        )

    children = _mapping(everything.get("children"), f"{disp}: all.children", problems, "groups")
    for key in children:
        if key not in GROUPS:
            problems.add(
                f"{disp}: all.children.{key}",
                f"unknown group{suggest(key, GROUPS)}",
                "sparkctl knows two groups: sparks (the nodes) and switches (zero or one switch)",
            )
    if SPARKS not in children:
        problems.add(
            f"{disp}: all.children.sparks", "missing", "list the Sparks under all.children.sparks.hosts"
        )

    for group in GROUPS:
        if group not in children:
            continue
        where = f"all.children.{group}"
        body = _mapping(children[group], f"{disp}: {where}", problems, "hosts and vars")
        for key in body:
            if key not in ("hosts", "vars"):
                problems.add(
                    f"{disp}: {where}.{key}",
                    f"unknown key{suggest(key, ['hosts', 'vars'])}",
                    "a group holds `hosts:` (and optionally `vars:`)",
                )
        group_vars = _mapping(body.get("vars"), f"{disp}: {where}.vars", problems, "variables")
        file_vars: list[tuple[dict[str, Any], str]] = []
        for path in var_files(group_dir, group):
            display = str(path.relative_to(inv))
            file_vars.append((read_mapping(path, display), display))
        hosts = _mapping(body.get("hosts"), f"{disp}: {where}.hosts", problems, "host names")
        for name, hvars in hosts.items():
            if name in raw.hosts:
                problems.add(
                    f"{disp}: {where}.hosts.{name}",
                    f"host also listed in {raw.hosts[name].group}",
                    "give every host one group and a unique name",
                )
                continue
            entry = HostEntry(str(name), group)
            defaults = {
                k: v for k, v in raw.site.items() if k in GROUP_KEYS[group] and not k.startswith("ansible_")
            }
            entry.put(defaults, "group_vars/all")
            entry.put(group_vars, f"{disp} {where}.vars")
            for values, display in file_vars:
                entry.put(values, display)
            entry.put(_mapping(hvars, f"{group}.{name}", problems, "host variables"), disp)
            raw.hosts[entry.name] = entry

    host_dir = inv / "host_vars"
    for name in sorted(var_names(host_dir)):
        if name not in raw.hosts:
            problems.add(
                f"host_vars/{name}",
                f"vars for a host not in {disp}{suggest(name, raw.hosts)}",
                "rename the file after a host in hosts.yml or remove it",
            )
            continue
        for path in var_files(host_dir, name):
            display = str(path.relative_to(inv))
            raw.hosts[name].put(read_mapping(path, display), display)
    return raw


# -- validation -----------------------------------------------------------------------------------


@dataclass
class Draft:
    """What validated, section by section (None where a section had problems)."""

    inventory_dir: Path
    site: dict[str, Any] = field(default_factory=dict)  # SITE_KEYS -> validated value
    ansible: dict[str, Any] = field(default_factory=dict)  # ANSIBLE_READ -> validated value
    spark_names: list[str] = field(default_factory=list)  # every host of the sparks group
    ranks: dict[str, int] = field(default_factory=dict)  # host -> rank, where it validated
    nodes: list[Node] = field(default_factory=list)  # hosts that validated completely
    switch_names: list[str] = field(default_factory=list)
    switch: Switch | None = None
    profile: Any = None

    def get(self, key: str) -> Any:
        return self.site.get(key)


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
            continue
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
                join_path(prefix, [key]), "missing", "add it (inventory/example shows every key, commented)"
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
    if args:
        try:
            words = shlex.split(args)
        except ValueError:
            words = args.split()
        for word in words:
            if word.startswith("UserKnownHostsFile="):
                return Path(word.split("=", 1)[1])
    candidate = inv / "known_hosts"
    return candidate if candidate.is_file() else None


def validate_raw(raw: Raw, inv: Path, problems: Problems) -> Draft:
    draft = Draft(inventory_dir=inv)
    site_only = {
        k: v
        for k, v in raw.site.items()
        if not any(k in spec for spec in GROUP_KEYS.values()) or k.startswith("ansible_")
    }
    draft.site = _validate_keys(site_only, SITE_KEYS, "", problems, host_level=False)
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
                        hostvars={k: v for k, v in entry.vars.items() if k.startswith("ansible_")},
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
                    hostvars={k: v for k, v in entry.vars.items() if k.startswith("ansible_")},
                )
    draft.nodes.sort(key=lambda n: n.rank)
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


def load_inventory(path: Path | str) -> Cluster:
    """Load and check one inventory directory; raises InputError listing every problem."""
    from sparkctl.model.checks import run_checks

    inv = Path(path)
    if not inv.is_dir():
        what = "does not exist" if not inv.exists() else "is not a directory"
        raise InputError(
            f"inventory {inv} {what}", hint="pass the inventory directory with --inventory/-i DIR"
        )
    problems = Problems()
    raw = read_raw(inv, problems)
    draft = validate_raw(raw, inv, problems)
    warnings = run_checks(draft, problems)
    problems.raise_if_any(str(inv))
    site = draft.site
    mgmt: Mgmt = site["sparkctl_mgmt"]
    api_allow = site["sparkctl_api_allow"]
    secrets = {k: v.with_base(inv) for k, v in site["sparkctl_secrets"].items()}
    return Cluster(
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
        secrets=secrets,
        switch=draft.switch,
        ssh_user=draft.ansible["ansible_user"],
        known_hosts=_known_hosts(draft.ansible.get("ansible_ssh_common_args"), inv),
        warnings=warnings,
    )
