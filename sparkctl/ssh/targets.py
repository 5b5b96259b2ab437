"""Where and how to reach each node over SSH, resolved the way ``ssh`` (and so Ansible) would.

A node's connection comes from three layers, the first value found winning, as in OpenSSH:

1. the inventory's Ansible variables: ``ansible_host``, ``ansible_user``, ``ansible_port``,
   ``ansible_ssh_private_key_file`` and the ``-o``/``-J``/``-F``/``-i``/``-p``/``-l`` options of
   ``ansible_ssh_common_args`` and ``ansible_ssh_extra_args`` (what Ansible puts on ssh's command
   line);
2. the ssh_config files: ``<inventory>/ssh_config`` when the inventory ships one (the lab writes
   it), then ``~/.ssh/config`` and ``/etc/ssh/ssh_config`` (only the ``-F`` file when one is given,
   as ssh does). A node is looked up under its address (what Ansible's ``ssh`` is given) and then
   under its inventory name (what people type: ``ssh spark-2``);
3. ssh's own defaults.

``ansible_host`` stays the node's address: a ``HostName`` elsewhere never sends ``status`` to a
different machine than ``provision``. Host keys are always checked against known_hosts: no
``StrictHostKeyChecking`` value read here can turn that off (see ``fleet``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # paramiko is imported only by the commands that connect (see fleet.py)
    import paramiko

USER_SSH_CONFIG = Path("~/.ssh/config")
SYSTEM_SSH_CONFIG = Path("/etc/ssh/ssh_config")
DEFAULT_SSH_CONFIGS = (USER_SSH_CONFIG, SYSTEM_SSH_CONFIG)
INVENTORY_SSH_CONFIG = "ssh_config"
ANSIBLE_SSH_ARGS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")


@dataclass(frozen=True)
class Target:
    """How to reach one node over SSH; ``None`` fields are left to ssh_config (then ssh's defaults)."""

    name: str
    address: str                       # the ssh destination: an address or an ssh_config Host alias
    user: str | None = None
    port: int | None = None
    key_files: tuple[Path, ...] = ()
    known_hosts: Path | None = None    # the pinned file: host keys are checked against it alone
    sudo: bool = False                 # wrap scripts in `sudo -n` (the SSH user is not root)
    rank: int | None = None
    proxy_jump: str | None = None      # `[user@]host[:port][,...]`, as ssh's -J / ProxyJump
    ssh_config: tuple[Path, ...] = DEFAULT_SSH_CONFIGS


# --- ssh command-line options, as Ansible passes them -------------------------------------------

_FLAG_OPTION = {"-J": "proxyjump", "-i": "identityfile", "-p": "port", "-l": "user", "-F": "-F"}


def ssh_options_from_args(args: str | None) -> dict[str, list[str]]:
    """The options in an ``ansible_ssh_common_args``-style string: {lowercase key: [values]}.

    ``-o Key=Value``, ``-oKey=Value``, ``-o "Key Value"`` and the flags ``-J -i -p -l -F``; anything
    else is ignored. ``-F`` is returned under the key ``-F``.
    """
    out: dict[str, list[str]] = {}
    if not args:
        return out
    try:
        words = shlex.split(args)
    except ValueError:
        words = args.split()
    i = 0
    while i < len(words):
        word, value, key = words[i], None, None
        flag = word[:2]
        if flag == "-o" or flag in _FLAG_OPTION:
            if len(word) > 2:
                value = word[2:]
            elif i + 1 < len(words):
                i += 1
                value = words[i]
        if value is not None and flag == "-o":
            parts = value.split("=", 1) if "=" in value else value.split(None, 1)
            if len(parts) == 2:
                key, value = parts[0].strip().lower(), parts[1].strip()
        elif value is not None:
            key = _FLAG_OPTION[flag]
        if key:
            out.setdefault(key, []).append(value)  # type: ignore[arg-type]
        i += 1
    return out


def known_hosts_from_args(common_args: str | None, base: Path) -> Path | None:
    """The UserKnownHostsFile named in ``ansible_ssh_common_args`` (relative paths from ``base``)."""
    values = ssh_options_from_args(common_args).get("userknownhostsfile")
    if not values:
        return None
    path = Path(values[0].split()[0])
    return path if path.is_absolute() else base / path


# --- ssh_config files ---------------------------------------------------------------------------


def read_ssh_config(paths: Sequence[Path]) -> paramiko.SSHConfig:
    """One SSHConfig from ``paths`` in order (the first value found for a host wins); missing files
    are skipped, as ssh skips them."""
    import paramiko

    config = paramiko.SSHConfig()
    for path in paths:
        path = path.expanduser()
        if path.is_file():
            with path.open() as fh:
                config.parse(fh)
    return config


def _first(*sources: Mapping[str, Any], key: str) -> str | None:
    for source in sources:
        value = source.get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        if value not in (None, ""):
            return str(value)
    return None


def _abs(path: Path, base: Path) -> Path:
    path = path.expanduser()
    if path.is_absolute() or path.exists():
        return path
    candidate = base / path
    return candidate if candidate.exists() else path


def targets_for(cluster: Any) -> list[Target]:
    """One fully resolved Target per node of a ``Cluster`` (rank order); see the module docstring."""
    inv = Path(cluster.inventory_dir)
    parsed: dict[tuple[Path, ...], paramiko.SSHConfig] = {}
    out: list[Target] = []
    for node in cluster.nodes:
        hv: dict[str, Any] = dict(getattr(node, "hostvars", None) or {})
        args = " ".join(str(hv[k]) for k in ANSIBLE_SSH_ARGS if hv.get(k))
        opts = ssh_options_from_args(args)
        if opts.get("-F"):
            files: tuple[Path, ...] = (_abs(Path(opts["-F"][0]), inv),)
        else:
            own = inv / INVENTORY_SSH_CONFIG
            files = ((own,) if own.is_file() else ()) + DEFAULT_SSH_CONFIGS
        if files not in parsed:
            parsed[files] = read_ssh_config(files)
        address = str(node.mgmt_ip)
        by_addr: dict[str, Any] = dict(parsed[files].lookup(address))
        by_name: dict[str, Any] = dict(parsed[files].lookup(node.name))
        layers = (opts, by_addr, by_name)

        user = str(hv.get("ansible_user") or getattr(cluster, "ssh_user", None) or _first(*layers, key="user")
                   or "root")
        port = hv.get("ansible_port") or _first(*layers, key="port")
        keys: list[Path] = []
        for key in (hv.get("ansible_ssh_private_key_file"), hv.get("ansible_private_key_file")):
            if key:
                keys.append(Path(str(key)))
        for layer in layers:
            keys += [Path(k) for k in layer.get("identityfile", []) if k]
        known = getattr(cluster, "known_hosts", None)
        if known is None:
            kh = _first(*layers, key="userknownhostsfile")
            known = Path(kh.split()[0]) if kh else None
        jump = _first(*layers, key="proxyjump")
        out.append(
            Target(
                name=node.name,
                address=address,
                user=user,
                port=int(port) if port else None,
                key_files=tuple(dict.fromkeys(_abs(k, inv) for k in keys)),
                known_hosts=_abs(Path(known), inv) if known else None,
                sudo=user != "root",
                rank=node.rank,
                proxy_jump=None if jump is None or jump.lower() == "none" else jump,
                ssh_config=files,
            )
        )
    return out
