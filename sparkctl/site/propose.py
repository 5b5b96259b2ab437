"""From discovered nodes to a proposed site: ranks, names, fabric ports and addresses, management
network, NVMe size, switch cabling, and the site-wide settings. Pure: no I/O.

Precedence, highest first: init's flags, the ``--from`` file of defaults, what the nodes reported,
then the shipped example inventory (``sparkctl.site.example_dir()``), which stays the one place the
site-wide defaults (ports, runtime, kit, checkpoint, supervisor) are written down.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Interface, IPv4Network
from pathlib import Path
from typing import Any

from sparkctl.errors import InputError
from sparkctl.model.loader import SITE_KEYS, SWITCH_KEYS
from sparkctl.site.facts import NodeFacts, Port

DEFAULT_PROFILE = "r4-nvme"
DEFAULT_SUBNETS = ("10.77.0.0/24", "10.77.1.0/24")  # one per PCIe half, as inventory/example
HOST_BASE = 10  # rank K gets .(10+K) in each fabric subnet, as inventory/example
DEFAULT_NVME_MOUNT = "/mnt/nvme"
DEFAULT_SWITCH_MTU = 9216
HALF_NAMES = "AB"
# Site keys that pin what is served (an image, a kit commit, a checkpoint revision): kept from the
# example, they are named in init's notes, to be checked before `stage`.
PINS = ("sparkctl_runtime", "sparkctl_kit", "sparkctl_checkpoint")
# What each switch type needs beside its address (inventory/example for routeros).
SWITCH_CONNECTION: dict[str, dict[str, Any]] = {
    "routeros": {"ansible_user": "admin", "ansible_connection": "ansible.netcommon.network_cli",
                 "ansible_network_os": "community.routeros.routeros", "ansible_become": False},
    "nvue": {"ansible_user": "cumulus"},
    "linux": {},
}
_NAME_BAD = re.compile(r"[^a-z0-9-]+")


def node_name(rank: int) -> str:
    return f"spark-{rank}"


def cluster_name_for(site_dir: Path) -> str:
    """A cluster name (lowercase, digits, dashes; 40 at most) from the site directory's name."""
    name = _NAME_BAD.sub("-", site_dir.resolve().name.lower()).strip("-")[:40].strip("-")
    return name or "site"


@dataclass(frozen=True)
class SwitchOptions:
    address: str
    kind: str  # routeros | nvue | linux
    name: str = "switch"
    user: str | None = None
    key: Path | None = None  # the SSH key for the switch, when not the nodes' key
    port: int | None = None
    mtu: int | None = None
    # node name -> one switch port (both PCIe halves of the cable land there) or one per half
    ports: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Options:
    """What init was told (None: not given, so the next source decides)."""

    addresses: Sequence[tuple[str, int]]  # (address, ssh port) in rank order
    user: str
    key: Path | None
    known_hosts: Path
    api_key: Mapping[str, str]  # the secret reference written for sparkctl_secrets.api_key
    site_dir: Path
    profile: str | None = None
    cluster_name: str | None = None
    fabric: Sequence[tuple[str, str | None]] = ()  # (netdev, hca) per half, overriding discovery
    fabric_subnets: Sequence[str] | None = None
    mgmt_interface: str | None = None
    mgmt_subnet: str | None = None
    nvme_mount: str | None = None
    switch: SwitchOptions | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)  # --from FILE, checked by split_defaults
    defaults_file: str = ""


@dataclass
class ProposedNode:
    name: str
    rank: int
    address: str
    port: int
    fabric: list[dict[str, str]]
    half_notes: list[str]
    nvme_gib: int | None
    facts: NodeFacts


@dataclass
class Proposal:
    """The site to write: what goes where, plus what the admin should know."""

    all_vars: dict[str, Any]
    nodes: list[ProposedNode]
    switch_name: str | None
    switch_vars: dict[str, Any]
    site: dict[str, Any]  # group_vars/all/sparkctl.yml, in the example's key order
    sources: dict[str, str]  # site key -> where its value came from (comment in the file)
    notes: list[str] = field(default_factory=list)
    # nodes whose switch port neither LLDP nor --switch-port gave: node -> its fabric netdevs
    unknown_switch_ports: dict[str, list[str]] = field(default_factory=dict)
    # connection settings written on every host's own entry (see propose)
    per_host: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Defaults:
    """A --from file sorted by where each key goes."""

    site: dict[str, Any]
    all_vars: dict[str, Any]
    switch: dict[str, Any]


def split_defaults(doc: Any, file: str) -> Defaults:
    """Sort a --from file's keys: site keys, ansible_* connection settings, switch keys. Any other
    key is refused with its name (InputError, exit 2)."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise InputError(f"{file}: expected a mapping of inventory keys, got {type(doc).__name__}",
                         hint="write keys as in inventory/example/group_vars/all/sparkctl.yml")
    site: dict[str, Any] = {}
    all_vars: dict[str, Any] = {}
    switch: dict[str, Any] = {}
    bad = []
    for key, value in doc.items():
        key = str(key)
        if key in SITE_KEYS:
            site[key] = value
        elif key in SWITCH_KEYS and key != "ansible_host":
            switch[key] = value
        elif key.startswith("ansible_"):
            all_vars[key] = value
        else:
            bad.append(key)
    if bad:
        raise InputError(
            f"{file}: unknown key{'s' if len(bad) > 1 else ''} {', '.join(sorted(bad))}",
            hint="use site keys (sparkctl_*, as in group_vars/all/sparkctl.yml), sparkctl_switch_* "
                 "or ansible_*",
        )
    return Defaults(site, all_vars, switch)


def _cabled_port(f: NodeFacts, name: str, problems: list[str]) -> Port | None:
    """The ConnectX-7 port this node is cabled on: the one whose halves are both up."""
    ports = f.cx7_ports()
    if not ports:
        problems.append(
            f"{name} ({f.address}): no ConnectX-7 interface found (no netdev with driver mlx5_core) — "
            "name the fabric ports with --fabric NETDEV=HCA (one per PCIe half)")
        return None
    up = [p for p in ports if p.up]
    if up:
        return up[0]
    partly = [p for p in ports if p.any_up]
    for p in partly:
        for i, h in enumerate(p.halves):
            if not h.up:
                problems.append(
                    f"{name} ({f.address}): ConnectX-7 port {p.index} PCIe half {HALF_NAMES[i]} {h.name} "
                    f"({h.hca or 'no RDMA device'}, {h.pci}) link is {h.link_text()} while the other half "
                    f"is up — check `ip link show {h.name}` and the cable; both halves carry the fabric")
    if not partly:
        names = ", ".join(h.name for p in ports for h in p.halves)
        problems.append(f"{name} ({f.address}): no ConnectX-7 link is up ({names}) — cable port 0 to the "
                        "switch and bring its interfaces up, or name the fabric ports with --fabric")
    return None


def _fabric_halves(f: NodeFacts, name: str, opts: Options, problems: list[str],
                   notes: list[str]) -> list[tuple[str, str, str]]:
    """(netdev, hca, note) per PCIe half, from --fabric or from the cabled ConnectX-7 port."""
    if opts.fabric:
        out = []
        for netdev, hca in opts.fabric:
            nd = f.netdev(netdev)
            if nd is None:
                problems.append(f"{name} ({f.address}): no interface {netdev} (given with --fabric); it has "
                                f"{', '.join(n.name for n in f.netdevs) or 'none'}")
                continue
            if not nd.up:
                problems.append(f"{name} ({f.address}): fabric interface {netdev} link is {nd.link_text()}"
                                f" — check `ip link show {netdev}` and the cable")
            chosen = hca or nd.hca
            if not chosen:
                problems.append(f"{name} ({f.address}): {netdev} has no RDMA device — give it as "
                                f"--fabric {netdev}=HCA")
                continue
            out.append((netdev, chosen, "given with --fabric"))
        return out
    port = _cabled_port(f, name, problems)
    if port is None:
        return []
    if len(port.halves) != 2:
        problems.append(f"{name} ({f.address}): ConnectX-7 port {port.index} shows {len(port.halves)} PCIe "
                        "function(s), not two halves — name the fabric ports with --fabric")
    others = [p.index for p in f.cx7_ports() if p.up and p.index != port.index]
    if others:
        notes.append(f"{name}: ConnectX-7 ports {port.index} and {others[0]} are both up; the site uses "
                     f"port {port.index} (one cable per node to the switch)")
    out = []
    for i, h in enumerate(port.halves):
        if not h.hca:
            problems.append(f"{name} ({f.address}): {h.name} ({h.pci}) has no RDMA device in "
                            "/sys/class/infiniband — load the mlx5_ib module, or give --fabric NETDEV=HCA")
            continue
        out.append((h.name, h.hca, f"port {port.index} PCIe half {HALF_NAMES[i] if i < 2 else i} ({h.pci})"))
    return out


IDENTITY = (("DGX OS", "dgx_os"), ("kernel", "kernel"), ("NVIDIA driver", "nvidia_driver"), ("BIOS", "bios"))


def identity_notes(facts: Sequence[NodeFacts]) -> list[str]:
    """What the nodes do not agree on (`preflight` refuses such a group; said here first)."""
    out = []
    rows = [(what, [str(getattr(f, attr) or "unknown") for f in facts]) for what, attr in IDENTITY]
    rows.append(("ConnectX-7 firmware",
                 [", ".join(sorted({n.hca_fw for n in f.netdevs if n.hca_fw})) or "unknown" for f in facts]))
    for what, values in rows:
        if len(set(values)) > 1:
            out.append(f"the nodes differ in {what}: "
                       + ", ".join(f"{node_name(i)} {v}" for i, v in enumerate(values))
                       + " — `sparkctl preflight` requires one identity")
    return out


def _subnets(opts: Options, d: Defaults) -> list[IPv4Network]:
    given = opts.fabric_subnets
    if given is None:
        fab = d.site.get("sparkctl_fabric")
        given = fab.get("subnets") if isinstance(fab, dict) else None
    try:
        return [IPv4Network(str(s)) for s in (given or DEFAULT_SUBNETS)]
    except ValueError as exc:
        raise InputError(f"fabric subnet: {exc}", hint="give networks such as 10.77.0.0/24") from exc


def _mgmt(facts: Sequence[NodeFacts], opts: Options, d: Defaults,
          problems: list[str]) -> dict[str, str] | None:
    raw = d.site.get("sparkctl_mgmt")
    given: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    iface, subnet = opts.mgmt_interface or given.get("interface"), opts.mgmt_subnet or given.get("subnet")
    seen = {}
    for i, f in enumerate(facts):
        found = f.mgmt()
        if found is not None:
            seen[node_name(i)] = found
    if iface is None:
        names = {nd.name for nd, _ in seen.values()}
        if len(names) > 1:
            problems.append("the management address sits on different interfaces ("
                            + ", ".join(f"{n}: {nd.name}" for n, (nd, _) in seen.items())
                            + ") — give the one name with --mgmt-interface")
        elif not names:
            problems.append(f"no node holds the address it was reached on ({facts[0].address} is not on "
                            "any interface of spark-0: NAT or a jump host?) — give --mgmt-interface and "
                            "--mgmt-subnet")
        else:
            iface = names.pop()
    if subnet is None:
        nets = {str(ifc.network) for _, ifc in seen.values()}
        if len(nets) == 1:
            subnet = nets.pop()
        elif nets:
            problems.append("the nodes' management addresses are in different subnets "
                            f"({', '.join(sorted(nets))}) — give the one holding them all with --mgmt-subnet")
        elif iface is not None:
            problems.append("the management subnet could not be read from the nodes — give --mgmt-subnet")
    if iface is None or subnet is None:
        return None
    return {"subnet": str(subnet), "interface": str(iface)}


def _switch_ports(nodes: Sequence[ProposedNode], sw: SwitchOptions, problems: list[str],
                  notes: list[str], unknown: dict[str, list[str]]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for n in nodes:
        netdevs = [p["netdev"] for p in n.fabric]
        given = sw.ports.get(n.name)
        if given is not None:
            if len(given) == 1:
                out[n.name] = dict.fromkeys(netdevs, given[0])
            elif len(given) == len(netdevs):
                out[n.name] = dict(zip(netdevs, given, strict=True))
            else:
                raise InputError(
                    f"--switch-port {n.name}: {len(given)} ports for {len(netdevs)} fabric interfaces",
                    hint="give one port (both PCIe halves of the cable) or one per half, in half order")
            continue
        lldp = n.facts.lldp or {}
        ports = {nd: str(lldp[nd]["port"]) for nd in netdevs if isinstance(lldp.get(nd), Mapping)
                 and lldp[nd].get("port")}
        if ports and len(ports) == len(netdevs):
            out[n.name] = ports
            notes.append(f"{n.name}: switch port{'s' if len(set(ports.values())) > 1 else ''} "
                         f"{', '.join(sorted(set(ports.values())))} from LLDP")
        elif netdevs:
            where = ("no LLDP answer (lldpd not installed)" if n.facts.lldp is None
                     else "LLDP names no switch port")
            problems.append(f"{n.name}: which switch port its cable goes to is unknown ({where}) — give "
                            f"--switch-port {n.name}=PORT")
            unknown[n.name] = netdevs
    for name in sw.ports:
        if name not in {n.name for n in nodes}:
            raise InputError(f"--switch-port {name}: no such node",
                             hint=f"nodes are {', '.join(n.name for n in nodes)} (in --node order)")
    return out


def nvme_mount_for(given: str | None, defaults: Mapping[str, Any]) -> str:
    """The NVMe mount the site's paths sit under (and discovery sizes): --nvme-mount, else the --from
    file's sparkctl_paths.nvme_mount, else /mnt/nvme."""
    paths = defaults.get("sparkctl_paths")
    from_file = paths.get("nvme_mount") if isinstance(paths, dict) else None
    return str(given or from_file or DEFAULT_NVME_MOUNT)


def _paths(mount: str, base: Mapping[str, Any] | None) -> dict[str, str]:
    root = mount.rstrip("/")
    return {"model_dir": f"{root}/models/DeepSeek-V4.1-Flash", "engram_dir": f"{root}/engram-tp4",
            "run_dir": str((base or {}).get("run_dir") or "/srv/sparkctl/run"), "nvme_mount": mount}


def propose(facts: Sequence[NodeFacts], opts: Options,
            example: Mapping[str, Any]) -> tuple[Proposal, list[str]]:
    """The proposed site and the problems that keep it from being written (each names its node)."""
    d = split_defaults(dict(opts.defaults), opts.defaults_file or "--from")
    problems: list[str] = []
    notes: list[str] = []
    sources: dict[str, str] = {}
    subnets = _subnets(opts, d)
    nvme_mount = nvme_mount_for(opts.nvme_mount, d.site)
    nodes: list[ProposedNode] = []
    for rank, (f, (address, port)) in enumerate(zip(facts, opts.addresses, strict=True)):
        name = node_name(rank)
        halves = _fabric_halves(f, name, opts, problems, notes)
        if halves and len(halves) > len(subnets):
            problems.append(f"{name}: {len(halves)} fabric interfaces but {len(subnets)} fabric subnet(s) — "
                            "give one subnet per PCIe half (--fabric-subnet, repeated)")
        ports: list[dict[str, str]] = []
        half_notes: list[str] = []
        for i, (netdev, hca, note) in enumerate(halves[: len(subnets)]):
            host = subnets[i].network_address + HOST_BASE + rank
            address_i = IPv4Interface(f"{host}/{subnets[i].prefixlen}")
            ports.append({"netdev": netdev, "hca": hca, "address": str(address_i)})
            half_notes.append(note)
        fs = f.filesystem(str(nvme_mount))
        if fs is None:
            notes.append(f"{name}: no filesystem mounted at {nvme_mount}; sparkctl_nvme_gib left out "
                         "(the disk budget is not checked for it)")
        nodes.append(ProposedNode(name, rank, address, port, ports, half_notes,
                                  fs.size_gib if fs is not None else None, f))
    notes += identity_notes(facts)
    mgmt = _mgmt(facts, opts, d, problems)
    site: dict[str, Any] = copy.deepcopy(dict(example))
    site.pop("sparkctl_upgrade", None)  # rolling upgrades pin a site's own versions
    for key in site:
        sources[key] = "the shipped example (inventory/example)"
    site["sparkctl_cluster_name"] = opts.cluster_name or cluster_name_for(opts.site_dir)
    sources["sparkctl_cluster_name"] = "--cluster-name" if opts.cluster_name else "the site directory's name"
    site["sparkctl_profile"] = opts.profile or DEFAULT_PROFILE
    sources["sparkctl_profile"] = "--profile" if opts.profile else f"the default ({DEFAULT_PROFILE})"
    if mgmt is not None:
        site["sparkctl_mgmt"] = mgmt
        sources["sparkctl_mgmt"] = "the interface holding each node's management address"
        site["sparkctl_api_allow"] = [mgmt["subnet"]]
        sources["sparkctl_api_allow"] = "the management subnet"
    fabric = dict(site.get("sparkctl_fabric") or {})
    fabric["subnets"] = [str(s) for s in subnets]
    site["sparkctl_fabric"] = fabric
    sources["sparkctl_fabric"] = "--fabric-subnet" if opts.fabric_subnets else "one subnet per PCIe half"
    site["sparkctl_paths"] = _paths(str(nvme_mount), site.get("sparkctl_paths"))
    sources["sparkctl_paths"] = f"under the NVMe mount {nvme_mount}"
    site["sparkctl_secrets"] = {"api_key": dict(opts.api_key)}
    sources["sparkctl_secrets"] = "a reference, never the key itself"
    for key, value in d.site.items():
        site[key] = value
        sources[key] = f"{opts.defaults_file or '--from'}"
    # flags given explicitly win over the --from file
    if opts.profile:
        site["sparkctl_profile"] = opts.profile
    if opts.cluster_name:
        site["sparkctl_cluster_name"] = opts.cluster_name
    if opts.fabric_subnets:
        site["sparkctl_fabric"] = {**dict(site.get("sparkctl_fabric") or {}),
                                   "subnets": [str(s) for s in subnets]}
    # Inside the site, named relative to it (sparkctl reads a relative path from the inventory
    # directory and hands Ansible the absolute one): the site can move, or be kept in git.
    try:
        known: Path = opts.known_hosts.relative_to(opts.site_dir)
    except ValueError:
        known = opts.known_hosts
    all_vars: dict[str, Any] = {
        "ansible_user": opts.user,
        "ansible_become": opts.user != "root",
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes",
    }
    per_host: dict[str, Any] = {}
    if opts.key is not None:
        # On each host's own entry: sparkctl's SSH fan-out reads a node's key from its entry (and
        # ssh_config), Ansible from either.
        per_host["ansible_ssh_private_key_file"] = str(opts.key)
        # that key, not whatever an agent offers first (sshd counts each offered key against MaxAuthTries)
        all_vars["ansible_ssh_common_args"] += " -o IdentitiesOnly=yes"
    all_vars.update(d.all_vars)
    switch_vars: dict[str, Any] = {}
    unknown: dict[str, list[str]] = {}
    sw = opts.switch
    if sw is not None:
        switch_vars = {"ansible_host": sw.address, **per_host, **SWITCH_CONNECTION.get(sw.kind, {})}
        if sw.user:
            switch_vars["ansible_user"] = sw.user
        if sw.key:
            switch_vars["ansible_ssh_private_key_file"] = str(sw.key)
        if sw.port:
            switch_vars["ansible_port"] = sw.port
        mtu = sw.mtu or DEFAULT_SWITCH_MTU
        switch_vars.update({"sparkctl_switch_type": sw.kind, "sparkctl_switch_mtu": mtu})
        if sw.kind == "routeros":
            switch_vars["sparkctl_switch_l2mtu"] = mtu
        if "sparkctl_switch_ports" not in d.switch:
            switch_vars["sparkctl_switch_ports"] = _switch_ports(nodes, sw, problems, notes, unknown)
        switch_vars.update(d.switch)
        if sw.mtu:
            switch_vars["sparkctl_switch_mtu"] = sw.mtu
    elif d.switch:
        raise InputError(f"{opts.defaults_file}: switch keys ({', '.join(d.switch)}) but no --switch",
                         hint="give the switch's management address with --switch ADDR --switch-kind KIND")
    kept = [k for k in PINS if k in site and site[k] == example.get(k)]
    if kept:
        notes.append(f"{', '.join(kept)} as in the shipped example: check each pin (image, kit commit, "
                     "checkpoint revision) against what this site serves before `sparkctl stage`")
    proposal = Proposal(all_vars, nodes, sw.name if sw else None, switch_vars, site, sources, notes, unknown,
                        per_host)
    return proposal, problems


__all__ = ["DEFAULT_PROFILE", "Defaults", "Options", "Proposal", "ProposedNode", "SwitchOptions",
           "cluster_name_for", "node_name", "nvme_mount_for", "propose", "split_defaults"]
