"""Where and how to reach each node over SSH, resolved the way ``ssh`` (and so Ansible) would.

A node's connection comes from three layers, the first value found winning, as in OpenSSH:

1. the inventory's Ansible variables: ``ansible_host``, ``ansible_user``,
   ``ansible_ssh_private_key_file`` and the ``-o``/``-J``/``-F``/``-i``/``-p``/``-l`` options of
   ``ansible_ssh_common_args`` and ``ansible_ssh_extra_args`` (what Ansible puts on ssh's command
   line);
2. the ssh_config files: ``<inventory>/ssh_config`` when the inventory ships one (the lab writes
   it), then ``~/.ssh/config`` and ``/etc/ssh/ssh_config`` (only the ``-F`` file when one is given,
   as ssh does). A node is looked up under its address (what Ansible's ``ssh`` is given) and then
   under its inventory name (what people type: ``ssh spark-2``);
3. ssh's own defaults.

The port is the model's ``Node.ssh_port`` (``sparkctl.model.sshconfig`` resolves it through the
same layers, in Ansible's order): the one Ansible connects on and the node's firewall opens.
``ansible_host`` stays the node's address: a ``HostName`` elsewhere never sends ``status`` to a
different machine than ``provision``. Host keys are always checked against known_hosts: no
``StrictHostKeyChecking`` value read here can turn that off (see ``fleet``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.model import sshconfig

if TYPE_CHECKING:  # paramiko is imported only by the commands that connect (see fleet.py)
    import paramiko

    from sparkctl.model import Cluster

USER_SSH_CONFIG = sshconfig.USER_SSH_CONFIG
SYSTEM_SSH_CONFIG = sshconfig.SYSTEM_SSH_CONFIG
DEFAULT_SSH_CONFIGS = sshconfig.DEFAULT_SSH_CONFIGS
INVENTORY_SSH_CONFIG = sshconfig.INVENTORY_SSH_CONFIG
ANSIBLE_SSH_ARGS = sshconfig.ANSIBLE_SSH_ARGS
# The option parsing and the ssh_config files are the model's (the port is resolved there, once).
ssh_options_from_args = sshconfig.ssh_options_from_args
read_ssh_config = sshconfig.read_ssh_config


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
    proxy_command: str | None = None   # ssh's ProxyCommand: something else opens the stream
    ssh_config: tuple[Path, ...] = DEFAULT_SSH_CONFIGS


def known_hosts_from_args(common_args: str | None, base: Path) -> Path | None:
    """The UserKnownHostsFile named in ``ansible_ssh_common_args`` (relative paths from ``base``)."""
    values = ssh_options_from_args(common_args).get("userknownhostsfile")
    if not values:
        return None
    path = Path(values[0].split()[0])
    return path if path.is_absolute() else base / path


def _first(*sources: Mapping[str, Any], key: str) -> str | None:
    for source in sources:
        value = source.get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        if value not in (None, ""):
            return str(value)
    return None


_abs = sshconfig.abs_path


def targets_for(cluster: Cluster) -> list[Target]:
    """One fully resolved Target per node of a ``Cluster`` (rank order); see the module docstring."""
    inv = Path(cluster.inventory_dir)
    parsed: dict[tuple[Path, ...], paramiko.SSHConfig] = {}
    out: list[Target] = []
    for node in cluster.nodes:
        hv: dict[str, Any] = dict(getattr(node, "hostvars", None) or {})
        args = " ".join(str(hv[k]) for k in ANSIBLE_SSH_ARGS if hv.get(k))
        opts = ssh_options_from_args(args)
        files = sshconfig.config_files(hv, inv)
        if files not in parsed:
            parsed[files] = read_ssh_config(files)
        address = str(node.mgmt_ip)
        by_addr: dict[str, Any] = dict(parsed[files].lookup(address))
        by_name: dict[str, Any] = dict(parsed[files].lookup(node.name))
        layers = (opts, by_addr, by_name)

        user = str(hv.get("ansible_user") or getattr(cluster, "ssh_user", None) or _first(*layers, key="user")
                   or "root")
        port = int(node.ssh_port)  # the model's: the port Ansible connects on and the firewall opens
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
        jump, command = sshconfig.proxies(hv, inv, address, node.name, parsed[files])
        out.append(
            Target(
                name=node.name,
                address=address,
                user=user,
                port=port,
                key_files=tuple(dict.fromkeys(_abs(k, inv) for k in keys)),
                known_hosts=_abs(Path(known), inv) if known else None,
                sudo=user != "root",
                rank=node.rank,
                proxy_jump=jump,
                proxy_command=command,
                ssh_config=files,
            )
        )
    return out
