"""`sparkctl init`: from reachable nodes (key login) to a site inventory that validates.

The steps, each with its collaborator handed in (tests give fakes): read each node's host key and
have it confirmed (``hostkeys``); log in with the pinned keys and run ``nodeside.discover`` on every
node at once (the SSH fan-out, host keys always verified); propose the site (``propose``) and render
it (``text``); show what would change in an existing site and write nothing unconfirmed; validate
the site as it would be, then write it (``files``). ``--example`` copies the shipped example instead.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sparkctl import yamltext
from sparkctl.errors import EXIT_FAILED, InputError, SparkctlError
from sparkctl.model import Cluster
from sparkctl.nodeside import ship
from sparkctl.site import example_dir, files, hostkeys, propose, text
from sparkctl.site.facts import NodeFacts, from_answer
from sparkctl.ssh.targets import Target

NODE_MODULES = ("nodeside.system", "nodeside.links", "nodeside.rdma", "nodeside.discover")
DISCOVER_TIMEOUT_S = 60.0
# Hidden: ansible-playbook reads every other file of the site's directory as an inventory source
# (its INI plugin takes a bare token for a host), whatever ansible.cfg ignores.
API_KEY_FILE = ".api_key"
# With --vault: the key as a variable of a vault-encrypted vars file (the model decrypts it).
VAULT_FILE = "group_vars/all/vault.yml"
VAULT_VAR = "vault_sparkctl_api_key"
KNOWN_HOSTS_FILE = "known_hosts"
EXAMPLE_GROUP_VARS = "group_vars/all/sparkctl.yml"

Discover = Callable[[Sequence[Target], Mapping[str, Any]], Mapping[str, Mapping[str, Any] | str]]


def discover_over_ssh(targets: Sequence[Target],
                      params: Mapping[str, Any]) -> dict[str, Mapping[str, Any] | str]:
    """Each node's ``nodeside.discover`` answer (or why there is none), over verified SSH."""
    from sparkctl.ssh.fleet import Fleet

    script = ship.python_script(NODE_MODULES, params, "SPARKCTL_DISCOVER_EOF")
    with Fleet(targets) as fleet:
        results = fleet.run(script, timeout=DISCOVER_TIMEOUT_S)
    return ship.answers(results, "discover")


@dataclass
class Tools:
    """init's collaborators: the real ones by default, except the questions (the CLI's terminal)."""

    scan: Callable[[str, int, Sequence[str]], hostkeys.HostKey] = (
        lambda address, port, key_types: hostkeys.scan(address, port, key_types=key_types))
    discover: Discover = discover_over_ssh
    ask_key: hostkeys.Ask = lambda key: None
    ask_write: Callable[[str], bool | None] = lambda diff: None
    say: Callable[[str], None] = lambda line: None
    # the switch port(s) a node's fabric netdevs are cabled to, asked when LLDP does not say; None:
    # nobody to ask
    ask_port: Callable[[str, Sequence[str]], str | None] = lambda node, netdevs: None
    new_secret: Callable[[], str] = files.new_api_key


@dataclass(frozen=True)
class Request:
    site_dir: Path
    nodes: Sequence[tuple[str, int]] = ()
    user: str = "sparkctl"
    key: Path | None = None
    known_hosts: Path | None = None
    host_keys: Path | None = None
    trust_on_first_use: bool = False
    switch: propose.SwitchOptions | None = None
    profile: str | None = None
    cluster_name: str | None = None
    fabric: Sequence[tuple[str, str | None]] = ()
    fabric_subnets: Sequence[str] | None = None
    mgmt_interface: str | None = None
    mgmt_subnet: str | None = None
    nvme_mount: str | None = None
    api_key_file: Path | None = None
    vault: bool = False  # the API key in a vault-encrypted group_vars/all/vault.yml
    defaults_file: Path | None = None
    yes: bool = False


@dataclass
class Result:
    site_dir: Path
    written: list[str] = field(default_factory=list)  # relative paths (or absolute, outside the site)
    diff: str = ""
    existed: bool = False
    host_keys: list[dict[str, str]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cluster: Cluster | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": True, "site": str(self.site_dir), "written": self.written, "unchanged": not self.written,
            "host_keys": self.host_keys, "nodes": self.nodes, "notes": self.notes,
            "cluster": self.cluster.name if self.cluster else None,
            "profile": self.cluster.profile.name if self.cluster else None,
        }


def _rel(site_dir: Path, path: Path) -> str:
    try:
        return str(path.relative_to(site_dir))
    except ValueError:
        return str(path)


def _existed(site_dir: Path) -> bool:
    return (site_dir / text.HOSTS_FILE).exists() or (site_dir / text.GROUP_VARS_FILE).exists()


def _site_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise InputError(f"{path} is not a directory",
                         hint="name the site's inventory directory (made if absent)")


def _confirm_and_write(req: Request, tools: Tools, out: list[files.SiteFile], result: Result) -> Result:
    site_dir = req.site_dir.absolute()  # the files' paths are absolute
    found = files.changes(out)
    result.existed = _existed(site_dir)
    result.diff = files.diff(site_dir, found)
    if found and result.existed and not req.yes:
        answer = tools.ask_write(result.diff)
        if answer is None:
            raise InputError(
                f"{site_dir} differs from what init would write; refusing without a confirmation",
                hint="read the diff above, then pass --yes to write it (there is no terminal to ask)",
                details=[f"would change {_rel(site_dir, c.file.path)}" for c in found],
            )
        if not answer:
            raise SparkctlError(
                f"{site_dir} differs from what init would write; nothing changed",
                hint="read the diff above, then run again with --yes to write it",
                exit_code=EXIT_FAILED,
                details=[f"would change {_rel(site_dir, c.file.path)}" for c in found],
            )
    result.cluster = files.write(site_dir, out, found)
    result.written = [_rel(site_dir, c.file.path) for c in found]
    return result


def example(req: Request, tools: Tools) -> Result:
    """`init --example`: the shipped example inventory copied into the site (same diff and
    confirmation as any re-run)."""
    _site_dir(req.site_dir)
    src = example_dir()
    site_dir = req.site_dir.absolute()
    out = [files.SiteFile(site_dir / p.relative_to(src), p.read_text())
           for p in sorted(src.rglob("*")) if p.is_file()]
    return _confirm_and_write(req, tools, out, Result(site_dir))


def _defaults(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        doc = yamltext.safe_load(path.read_text())
    except OSError as exc:
        raise InputError(f"--from {path}: {exc.strerror}", hint="name a readable YAML file") from exc
    except yaml.YAMLError as exc:
        raise InputError(f"--from {path}: not YAML ({exc})", hint="fix the file") from exc
    propose.split_defaults(doc, str(path))  # its keys, checked before anything is contacted
    return dict(doc or {})


def _pin(req: Request, tools: Tools, known_path: Path, hosts: list[tuple[str, str, int]],
         result: Result) -> str:
    """Confirm each host's key; the known_hosts text with the new ones added."""
    known = hostkeys.read(known_path)
    given = hostkeys.read(req.host_keys) if req.host_keys is not None else None
    added: list[hostkeys.HostKey] = []
    for label, address, port in hosts:
        name = hostkeys.known_name(address, port)
        if given is not None:
            decision = hostkeys.decide(name, known, offered=None, from_file=hostkeys.pinned(given, name),
                                       file_name=str(req.host_keys), ask=tools.ask_key)
        else:
            offered = tools.scan(address, port, [k.keytype for k in hostkeys.pinned(known, name)])
            decision = hostkeys.decide(name, known, offered=offered, from_file=None, ask=tools.ask_key,
                                       trust_on_first_use=req.trust_on_first_use)
        if decision.new:
            added.append(decision.key)
        result.host_keys.append({"host": label, "name": name, "type": decision.key.keytype,
                                 "fingerprint": decision.key.fingerprint, "how": decision.how})
        tools.say(f"{label} {name}: {decision.key.keytype} {decision.key.fingerprint} ({decision.how})")
    existing = known_path.read_text() if known_path.is_file() else ""
    return hostkeys.text_with(existing, added)


def _vault_secrets() -> list[tuple[str, Any]]:
    """The vault secrets of the password file(s) Ansible would use (--vault-password-file,
    $ANSIBLE_VAULT_PASSWORD_FILE, ansible.cfg); InputError (exit 2) without one."""
    from ansible.parsing.dataloader import DataLoader

    from sparkctl.model import vault

    found = vault.vault_password_files()
    if not found:
        raise InputError("--vault needs the vault password",
                         hint="give sparkctl --vault-password-file FILE (or ANSIBLE_VAULT_PASSWORD_FILE)")
    return vault.secrets_from(DataLoader(), found)


def _vaulted(secrets: list[tuple[str, Any]], values: Mapping[str, str]) -> str:
    """A vars file encrypted whole with ansible-vault (what `ansible-vault encrypt` writes)."""
    from ansible.parsing.vault import VaultLib

    plain = yaml.safe_dump(dict(values), default_flow_style=False).encode()
    encrypted: bytes = VaultLib(secrets).encrypt(plain)
    return encrypted.decode()


def _ask_ports(tools: Tools, unknown: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """The switch ports asked for each node LLDP did not answer for (empty when nobody answers)."""
    out: dict[str, tuple[str, ...]] = {}
    for node, netdevs in unknown.items():
        answer = tools.ask_port(node, netdevs)
        if answer is None:
            return {}
        ports = tuple(p.strip() for p in answer.split(",") if p.strip())
        if ports:
            out[node] = ports
    return out


def _facts(req: Request, tools: Tools, known_text: str, params: Mapping[str, Any]) -> list[NodeFacts]:
    with tempfile.TemporaryDirectory(prefix="sparkctl-init-") as tmp:
        kh = Path(tmp) / KNOWN_HOSTS_FILE
        kh.write_text(known_text)
        targets = [
            Target(name=propose.node_name(rank), address=address, user=req.user, port=port,
                   key_files=(req.key,) if req.key else (), known_hosts=kh, rank=rank)
            for rank, (address, port) in enumerate(req.nodes)
        ]
        answers = tools.discover(targets, params)
    facts, missing = [], []
    for t in targets:
        ans = answers.get(t.name, "no answer")
        if isinstance(ans, str):
            missing.append(f"{t.name} ({t.address}:{t.port}): {ans}")
        else:
            facts.append(from_answer(t.address, ans))
    if missing:
        raise SparkctlError(
            f"{len(missing)} of {len(targets)} node(s) could not be read; nothing written",
            hint=f"check that {req.user} logs in with {req.key or 'your key'} "
                 "(`sparkctl bootstrap` sets that up)",
            exit_code=EXIT_FAILED, details=missing,
        )
    return facts


def run(req: Request, tools: Tools) -> Result:
    """The whole of `sparkctl init` for ``req``; raises SparkctlError with its exit code."""
    _site_dir(req.site_dir)
    if not req.nodes:
        raise InputError("no node given",
                         hint="give each node's management address with --node, in rank order")
    if req.key is not None and not req.key.is_file():
        raise InputError(f"--key {req.key}: no such file",
                         hint="give the private key that logs in to the nodes")
    if req.vault and req.api_key_file is not None:
        raise InputError("--vault and --api-key-file exclude each other",
                         hint="keep the key in your file (--api-key-file), or have init make one vaulted")
    if req.api_key_file is not None and not req.api_key_file.is_file():
        raise InputError(f"--api-key-file {req.api_key_file}: no such file",
                         hint="write the API key into it (mode 0600), or leave the flag out to have one made")
    addresses = [a for a, _ in req.nodes]
    if len(set(req.nodes)) != len(req.nodes):
        raise InputError(f"a node is given twice: {', '.join(addresses)}",
                         hint="give each node once, in rank order")
    defaults = _defaults(req.defaults_file)
    vault_secrets = _vault_secrets() if req.vault else None  # a vault password that works, before any contact
    site_dir = req.site_dir.absolute()
    known_path = (req.known_hosts or site_dir / KNOWN_HOSTS_FILE).absolute()
    result = Result(site_dir)
    hosts = [(propose.node_name(i), a, p) for i, (a, p) in enumerate(req.nodes)]
    if req.switch is not None:
        hosts.append((req.switch.name, req.switch.address, req.switch.port or hostkeys.DEFAULT_PORT))
    known_text = _pin(req, tools, known_path, hosts, result)
    nvme_mount = propose.nvme_mount_for(req.nvme_mount, defaults)
    facts = _facts(req, tools, known_text, {"mounts": [nvme_mount]})
    result.nodes = [{"name": propose.node_name(i), **f.summary()} for i, f in enumerate(facts)]
    api_ref = ({"file": str(req.api_key_file.absolute())} if req.api_key_file
               else {"var": VAULT_VAR} if req.vault else {"file": API_KEY_FILE})
    opts = propose.Options(
        addresses=list(req.nodes), user=req.user, key=req.key.absolute() if req.key else None,
        known_hosts=known_path, api_key=api_ref, site_dir=site_dir, profile=req.profile,
        cluster_name=req.cluster_name, fabric=list(req.fabric), fabric_subnets=req.fabric_subnets,
        mgmt_interface=req.mgmt_interface, mgmt_subnet=req.mgmt_subnet, nvme_mount=req.nvme_mount,
        switch=req.switch, defaults=defaults, defaults_file=str(req.defaults_file or ""),
    )
    src = example_dir()
    example_text = (src / EXAMPLE_GROUP_VARS).read_text()
    example_doc = yamltext.safe_load(example_text) or {}
    proposal, problems = propose.propose(facts, opts, example_doc)
    if proposal.unknown_switch_ports and opts.switch is not None:
        asked = _ask_ports(tools, proposal.unknown_switch_ports)
        if asked:
            switch = dataclasses.replace(opts.switch, ports={**opts.switch.ports, **asked})
            opts = dataclasses.replace(opts, switch=switch)
            proposal, problems = propose.propose(facts, opts, example_doc)
    if problems:
        raise SparkctlError(
            f"the nodes do not make a site yet ({len(problems)} problem{'s' if len(problems) > 1 else ''}); "
            "nothing written",
            hint="fix what is named (cabling, links, flags) and run init again",
            exit_code=EXIT_FAILED, details=problems,
        )
    result.notes = proposal.notes
    out = [files.SiteFile(site_dir / rel, body) for rel, body in text.render(proposal, example_text).items()]
    out.append(files.SiteFile(known_path, known_text))
    if vault_secrets is not None:
        vaulted = _vaulted(vault_secrets, {VAULT_VAR: tools.new_secret()})
        out.append(files.SiteFile(site_dir / VAULT_FILE, vaulted, 0o600, secret=True))
    elif req.api_key_file is None:
        out.append(files.SiteFile(site_dir / API_KEY_FILE, tools.new_secret() + "\n", 0o600, secret=True))
    return _confirm_and_write(req, tools, out, result)


__all__ = ["NODE_MODULES", "Request", "Result", "Tools", "discover_over_ssh", "example", "run"]
