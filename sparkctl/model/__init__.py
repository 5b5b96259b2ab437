"""The typed cluster model: one inventory directory in, one checked `Cluster` out.

``load_inventory(dir)`` reads the Ansible inventory (hosts.yml or an INI hosts file, group_vars/,
host_vars/) with ansible-core itself (``ansible_read``, vault secrets from ``vault``), validates
every field, runs the cross-field checks and raises a single InputError (exit 2) listing every
problem as ``<field path>: <what is wrong> (<file>:<line>) — <what to do>``. Nothing is contacted.
"""

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
from sparkctl.model.loader import load_inventory
from sparkctl.model.problems import Problem

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
