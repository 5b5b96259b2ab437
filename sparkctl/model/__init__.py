"""The typed cluster model: one inventory directory in, one checked `Cluster` out.

``load_inventory(dir)`` reads the Ansible inventory (hosts.yml or an INI hosts file, group_vars/,
host_vars/) with ansible-core itself (``ansible_read``, vault secrets from ``vault``), validates
every field, runs the cross-field checks and raises a single InputError (exit 2) listing every
problem as ``<field path>: <what is wrong> (<file>:<line>) — <what to do>``. Nothing is contacted.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    )
    from sparkctl.model.problems import Problem

# Imported when first used (PEP 562): `from sparkctl.model import cache` (completion) must not pay
# for pydantic and the profiles, nor `status` on a cached inventory for ansible-core.
_WHERE = {
    **dict.fromkeys(
        ("Checkpoint", "Cluster", "Fabric", "FabricPort", "Mgmt", "Node", "Paths", "Ports", "Runtime",
         "SecretRef", "Switch"),
        "sparkctl.model.cluster",
    ),
    "Problem": "sparkctl.model.problems",
}


def load_inventory(path: Path | str, *, vault_password_file: Path | str | None = None) -> Cluster:
    """``sparkctl.model.loader.load_inventory``: load and check one inventory directory (InputError
    listing every problem). The loader (pydantic, the profiles) is imported by the first call, so
    that a command module importing this name costs its start-up nothing."""
    from sparkctl.model import loader

    return loader.load_inventory(path, vault_password_file=vault_password_file)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sparkctl.model' has no attribute {name!r}")

__all__ = [
    "Checkpoint",
    "Cluster",
    "Fabric",
    "FabricPort",
    "Mgmt",
    "Node",
    "Paths",
    "Ports",
    "Problem",
    "Runtime",
    "SecretRef",
    "Switch",
    "load_inventory",
]
