"""The typed cluster: what one inventory directory describes, after validation.

The field names of the sections below are the keys of the inventory (``sparkctl_runtime.kind``
and so on), so an error path in ``validate`` is also where to look in the YAML.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from sparkctl.errors import InputError
from sparkctl.model import secretenv
from sparkctl.model.problems import FieldError
from sparkctl.model.router import Router
from sparkctl.model.sshconfig import DEFAULT_PORT, controller_path, port_from_vars
from sparkctl.model.types import (
    AbsPath,
    Commit,
    EnvName,
    Gib,
    GitUrl,
    Hca,
    HfRepo,
    HostName,
    ImageId,
    Mtu,
    Netdev,
    Port,
    Rank,
    Sha256,
    ShortName,
)
from sparkctl.profiles import Profile
from sparkctl.profiles.shape import Topology

RuntimeKind = Literal["container", "venv", "lab"]
SwitchType = Literal["routeros", "nvue", "linux"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class Runtime(_Section):
    """How a rank runs on a node (``sparkctl_runtime``)."""

    kind: RuntimeKind
    # The reference the ranks run: name@sha256:<digest> for `pull`, a local tag for build/archive.
    image: StrictStr | None = None
    allow_mutable_tag: StrictBool = False
    venv_path: AbsPath | None = None
    # Where `sparkctl stage image` gets the image on the head before fanning it out: pulled by
    # digest, built from the serving kit's Dockerfile, or loaded from a `docker save` archive.
    image_source: Literal["pull", "build", "archive"] = "pull"
    image_archive: AbsPath | None = None  # on the controller (image_source: archive)
    image_id: ImageId | None = None  # optional pin: stage and up refuse any other image ID


class Kit(_Section):
    """The published serving kit (``sparkctl_kit``): a repository at a pinned commit, or a tree."""

    source: Literal["git", "dir", "tar"]
    url: GitUrl | None = None  # git
    commit: Commit | None = None  # git: the full 40-hex commit, never a branch
    path: AbsPath | None = None  # dir / tar
    location: Literal["controller", "head"] | None = None  # dir / tar: where `path` lives
    sha256: Sha256 | None = None  # expected digest of the whole tree (nodeside.kit.tree_digest)

    @property
    def on(self) -> str:
        """Where the kit's source lives (git is always fetched on the controller)."""
        return self.location or "controller"


class Mgmt(_Section):
    """The management network (``sparkctl_mgmt``)."""

    subnet: IPv4Network
    interface: Netdev
    # More places SSH may come from besides the subnet (a VPN, a jump host); the address the
    # controller connects from is added on each node at provision time as well.
    admin_sources: list[IPv4Network] = Field(default_factory=list)


class Fabric(_Section):
    """The RoCE fabric (``sparkctl_fabric``)."""

    subnets: list[IPv4Network] = Field(min_length=1)
    mtu: Mtu
    host_qos: StrictBool = True
    bootstrap_over: Literal["fabric", "mgmt"] = "fabric"
    stage_over_fabric: StrictBool = True
    # `check fabric`: a pair whose jumbo pings never get a full round fails above this loss (%).
    max_loss_pct: float = Field(5.0, ge=0, le=100)


class Ports(_Section):
    """TCP ports (``sparkctl_ports``)."""

    dist_init: Port
    api: Port
    nccl_test: Port
    # The node exporter (sparkctl-exporter.service), open to the management subnet only.
    exporter: Port = 9477


class Supervisor(_Section):
    """`sparkctl watch`, the controller's supervisor (``sparkctl_supervisor``).

    A TP group cannot take back one restarted rank, so healing is always a whole-group restart
    (down, ``settle_s``, the gated up), at most ``max_restarts`` in ``window_s`` (the breaker).
    """

    interval_s: float = Field(default=10.0, ge=1, le=3600)  # between two probes (same probe as `status`)
    # Failed checks in a row before acting: the canary completion, or one node not answering SSH.
    canary_failures: StrictInt = Field(default=3, ge=1, le=100)
    max_restarts: StrictInt = Field(default=3, ge=1, le=100)  # group restarts allowed within window_s ...
    window_s: float = Field(default=3600.0, ge=1)  # ... before the circuit breaker opens
    settle_s: float = Field(default=10.0, ge=0, le=3600)  # pause between the group's down and its up
    # Told about every restart and the breaker opening: a program run without a shell (argv, the
    # first word an absolute path; the event as JSON on stdin), and/or a URL the event is POSTed to.
    notify_command: list[StrictStr] | None = Field(default=None, min_length=1)
    notify_webhook: HttpUrl | None = None

    @field_validator("notify_command")
    @classmethod
    def _absolute_program(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value[0].startswith("/"):
            raise FieldError(f"{value[0]!r} is not an absolute path",
                             "name the program by its absolute path (it runs without a shell or PATH)")
        return value


class Paths(_Section):
    """Paths on the nodes (``sparkctl_paths``)."""

    model_dir: AbsPath
    engram_dir: AbsPath
    run_dir: AbsPath
    nvme_mount: AbsPath


class Checkpoint(_Section):
    """The checkpoint and where it comes from (``sparkctl_checkpoint``)."""

    source: Literal["hf", "dir"]
    repo: HfRepo | None = None
    revision: Commit | None = None
    path: AbsPath | None = None
    location: Literal["controller", "head"] | None = None  # where a `dir` source lives
    size_gib: Gib | None = None

    @property
    def on(self) -> str | None:
        """Where a `dir` checkpoint lives (the YAML key is `location`: YAML reads `on` as true)."""
        return self.location


class SecretRef(_Section):
    """A secret by reference, never a value written in clear in the inventory.

    ``{env: VAR}``: an environment variable on the controller; ``{file: PATH}``: a file on the
    controller (relative to the inventory); ``{var: NAME}``: an inventory variable kept with
    ansible-vault (``!vault`` or a vault-encrypted vars file), decrypted when the inventory loads.
    """

    env: EnvName | None = None
    file: StrictStr | None = None
    var: EnvName | None = None
    _base: Path = PrivateAttr(default_factory=Path.cwd)
    _value: str | None = PrivateAttr(default=None)

    @field_validator("file")
    @classmethod
    def _plain_path(cls, value: str | None) -> str | None:
        if value is not None and ("~" in value or ".." in PurePosixPath(value).parts or not value.strip()):
            raise FieldError(
                f"{value!r}: a secret file is named plainly",
                "give an absolute path, or one relative to the inventory directory, without ~ or ..",
            )
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        given = [k for k in ("env", "file", "var") if getattr(self, k) is not None]
        if len(given) != 1:
            what = f"both {given[0]} and {given[1]} given" if given else "neither env, file nor var given"
            raise FieldError(
                what, "give exactly one: {env: VAR}, {file: /path/to/secret} or {var: vaulted_variable}"
            )
        return self

    def with_base(self, base: Path) -> SecretRef:
        """Relative ``file`` references are resolved against the inventory directory."""
        self._base = base
        return self

    def with_value(self, value: str) -> SecretRef:
        """The decrypted value of a ``var`` reference (set by the loader; never dumped)."""
        self._value = value
        return self

    def describe(self) -> str:
        if self.var is not None:
            return f"var:{self.var}"
        return f"env:{self.env}" if self.env is not None else f"file:{self.file}"

    def resolve(self) -> str:
        """The secret's value, read now on the controller. Never logged, never rendered."""
        if self.var is not None:
            if not self._value:
                raise InputError(
                    f"secret variable {self.var} was not decrypted",
                    hint="load the inventory with its vault password (--vault-password-file)",
                )
            return self._value
        if self.env is not None:
            value = secretenv.get(self.env)
            if not value:
                raise InputError(
                    f"secret environment variable {self.env} is not set",
                    hint=f"export {self.env}=... before running sparkctl",
                )
            return value
        assert self.file is not None
        path = controller_path(self.file, self._base)  # relative: from the inventory directory
        try:
            value = path.read_text().strip()
        except OSError as exc:
            raise InputError(
                f"secret file {path} cannot be read: {exc.strerror}", hint="create it (mode 0600)"
            ) from exc
        if not value:
            raise InputError(f"secret file {path} is empty", hint="write the secret into it")
        return value


class FabricPort(_Section):
    """One PCIe half of the cabled ConnectX-7 port."""

    netdev: Netdev
    hca: Hca
    address: IPv4Interface

    @property
    def ip(self) -> IPv4Address:
        return self.address.ip


def _ssh_port(hostvars: dict[str, Any], config_port: int | None) -> int:
    port = port_from_vars(hostvars)
    if port is None:
        port = config_port
    return DEFAULT_PORT if port is None else port


class Node(_Section):
    """One DGX Spark: one SGLang rank."""

    name: ShortName
    rank: Rank
    mgmt_ip: IPv4Address
    fabric_ports: list[FabricPort] = Field(min_length=1)
    nvme_gib: Gib | None = None
    # The ansible_* keys Ansible dials the node with: `all`'s, then the node's own over them.
    hostvars: dict[str, Any] = Field(default_factory=dict)
    ssh_config_port: int | None = None  # the Port its ssh_config files give it (read by the loader)

    @property
    def fabric_ip(self) -> IPv4Address:
        return self.fabric_ports[0].ip

    @property
    def ssh_port(self) -> int:
        """The port Ansible and sparkctl reach this node's sshd on, and the one its firewall opens:
        ``ansible_ssh_port`` / ``ansible_port`` / ssh arguments / ssh_config / 22 (see sshconfig)."""
        return _ssh_port(self.hostvars, self.ssh_config_port)

    @property
    def is_head(self) -> bool:
        return self.rank == 0


IdentityField = Literal["os", "kernel", "nvidia_driver", "cuda", "cx7_firmware", "bios"]
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_VERSION = re.compile(r"^[A-Za-z0-9.+~:-]+$")


class Upgrade(_Section):
    """`sparkctl upgrade` (``sparkctl_upgrade``): what a rolling upgrade brings every node to, one
    node at a time. Nothing here is a range: each package is pinned to one exact version."""

    packages: dict[StrictStr, StrictStr] = Field(default_factory=dict)  # name -> exact apt version
    debs: list[AbsPath] = Field(default_factory=list)  # .deb files on the controller, installed on each node
    update_cache: StrictBool = True  # `apt-get update` before installing `packages`
    # Firmware or driver steps run on each node in order, without a shell (argv lists, the first
    # word an absolute path); each must be safe to repeat, since a resumed upgrade runs them again.
    commands: list[list[StrictStr]] = Field(default_factory=list)
    reboot: StrictBool = True  # reboot a node its update changed (or that asks for it)
    reboot_timeout_s: StrictInt = Field(900, ge=30, le=7200)  # until SSH answers again
    expect: dict[IdentityField, StrictStr] = Field(default_factory=dict)  # identity after the upgrade

    @field_validator("packages")
    @classmethod
    def _exact_versions(cls, value: dict[str, str]) -> dict[str, str]:
        for name, version in value.items():
            if not _PACKAGE.match(name):
                raise ValueError(f"{name!r} is not a Debian package name")
            if not _VERSION.match(version) or version[0] in "<>=~":
                raise ValueError(f"{name}: {version!r} is not an exact version (write it as "
                                 "`apt-cache policy` shows it, e.g. 580.95.05-0ubuntu1)")
        return value

    @field_validator("debs")
    @classmethod
    def _deb_files(cls, value: list[PurePosixPath]) -> list[PurePosixPath]:
        for path in value:
            if path.suffix != ".deb":
                raise ValueError(f"{path} is not a .deb file")
        return value

    @field_validator("commands")
    @classmethod
    def _absolute_programs(cls, value: list[list[str]]) -> list[list[str]]:
        for argv in value:
            if not argv or not argv[0].startswith("/"):
                raise ValueError(f"{argv!r}: each command is an argv list whose first word is an "
                                 "absolute path (no shell, no PATH lookup)")
        return value

    @property
    def empty(self) -> bool:
        """Nothing to apply at all (no package, .deb or command, and no reboot)."""
        return not (self.packages or self.debs or self.commands or self.reboot)


class Switch(_Section):
    """The RoCE switch, when there is one."""

    name: StrictStr
    host: HostName
    type: SwitchType
    mtu: Mtu
    l2mtu: Mtu | None = None
    ports: dict[StrictStr, dict[StrictStr, StrictStr]] = Field(default_factory=dict)
    hostvars: dict[str, Any] = Field(default_factory=dict)
    ssh_config_port: int | None = None  # as Node's

    @property
    def ssh_port(self) -> int:
        """The port Ansible reaches the switch on (the vars plugin hands it over as ``ansible_port``,
        so network_cli, which reads no other variable, connects there too)."""
        return _ssh_port(self.hostvars, self.ssh_config_port)


class Group(BaseModel):
    """One serving group (``sparkctl_groups``): a profile over an ordered list of nodes. A node's
    place in the list is its rank in the group; the first node is the group's head."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: ShortName
    profile: Profile
    nodes: list[ShortName] = Field(min_length=1)

    @property
    def head(self) -> str:
        return self.nodes[0]

    def rank_of(self, name: str) -> int:
        """The rank ``name`` serves in this group (its --node-rank, the shards' ``r{rank}of{tp}``)."""
        return self.nodes.index(name)


class Cluster(BaseModel):
    """One site: four Sparks, their fabric, the switch and the serving profile."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: ShortName
    inventory_dir: Path
    profile: Profile  # resolved, with the site's overrides
    nodes: list[Node]
    runtime: Runtime
    mgmt: Mgmt
    fabric: Fabric
    ports: Ports
    api_allow: list[IPv4Network]
    paths: Paths
    checkpoint: Checkpoint
    kit: Kit | None = None
    secrets: dict[str, SecretRef]
    upgrade: Upgrade | None = None  # `sparkctl upgrade` (sparkctl_upgrade); None: nothing pinned
    supervisor: Supervisor = Field(default_factory=lambda: Supervisor())
    autostart: bool = False  # `sparkctl watch` brings the group up when the nodes answer again
    switch: Switch | None
    ssh_user: str
    known_hosts: Path | None = None
    warnings: list[str] = Field(default_factory=list)  # facts worth knowing that do not block
    # The fabric topology (sparkctl_topology) and the serving groups (sparkctl_groups; by default one
    # group "main" of every node in rank order with the site's profile). sparkctl.model.topology.
    topology: Topology = "switch"
    groups: list[Group] = Field(default_factory=list)
    router: Router | None = None  # SGLang's gateway in front of the groups (sparkctl_router)

    @property
    def head(self) -> Node:
        return next(n for n in self.nodes if n.rank == 0)

    @property
    def workers(self) -> list[Node]:
        return [n for n in self.nodes if n.rank != 0]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        names = ", ".join(n.name for n in self.nodes)
        raise InputError(f"no node named {name!r} in {self.inventory_dir}", hint=f"use one of {names}")

    def group_of(self, name: str) -> Group | None:
        """The serving group the node ``name`` belongs to (None: a spare node)."""
        return next((g for g in self.groups if name in g.nodes), None)

    @property
    def bootstrap_ips(self) -> dict[str, IPv4Address]:
        """Per node, the address NCCL/Gloo bootstrap and --dist-init-addr use."""
        if self.fabric.bootstrap_over == "fabric":
            return {n.name: n.fabric_ip for n in self.nodes}
        return {n.name: n.mgmt_ip for n in self.nodes}
