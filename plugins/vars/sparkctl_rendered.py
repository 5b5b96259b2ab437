"""Ansible vars plugin: hand every host the values sparkctl renders for it.

For a sparkctl inventory directory (one with group_vars/all/sparkctl.yml), the inventory is
loaded with sparkctl's own model (`sparkctl.model.load_inventory`) and rendered with
`sparkctl.render`, so roles never re-derive argv, env, unit, netplan, QoS, firewall or switch text:

  spark hosts:  sparkctl_rendered = that node's entry of `sparkctl plan --json` (files, file_modes,
                rank_launch, nccl_check, fabric, ssh_port, ...), sparkctl_cluster = the cluster's
                facts (`sparkctl.render.cluster_facts`, the same dict `validate --json` prints),
                sparkctl_group = the node's serving group (`sparkctl.render.groups.node_group`:
                name, serving, rank in the group, the group's tp_size, engram, profile, head)
  switch host:  sparkctl_rendered = {type, name, file, switch_config, ssh_port}, sparkctl_cluster
  every host:   ansible_port = the SSH port the model resolved (Node.ssh_port / Switch.ssh_port), so
                Ansible connects on the port the firewall opens and the roles' own ssh/rsync use;
                ansible_ssh_common_args / _extra_args / ansible_ssh_private_key_file with every
                relative file (UserKnownHostsFile, IdentityFile, -i, -F, the key file) made absolute
                from the inventory directory (`sparkctl.model.sshconfig.controller_path`), as
                sparkctl's own SSH reads them, whatever directory ansible-playbook runs in;
                sparkctl_state_dir = the controller's state directory
                (`sparkctl.ansible.content.state_dir`: $SPARKCTL_STATE_DIR, else the per-user one),
                under which the roles keep their controller-side caches and backups

Secrets appear only as "<secret:NAME>" markers; their values are read at task time by the
spark_rank role's sparkctl_rank_secrets lookup, never put into hostvars. A bad inventory stops
Ansible with sparkctl's own message listing every problem. Enabled in ansible.cfg (vars_plugins_enabled).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ansible.errors import AnsibleError
from ansible.inventory.host import Host
from ansible.plugins.vars import BaseVarsPlugin

DOCUMENTATION = r"""
name: sparkctl_rendered
short_description: Rendered sparkctl values (files, units, switch config) per host
description:
  - Loads the sparkctl inventory with the sparkctl model and exposes each host's rendered values
    as C(sparkctl_rendered), and cluster facts as C(sparkctl_cluster).
requirements:
  - the sparkctl package (installed in the controller's environment, or this repository checkout)
options:
  stage:
    ini:
      - key: stage
        section: vars_sparkctl_rendered
    env:
      - name: ANSIBLE_VARS_PLUGIN_STAGE
extends_documentation_fragment:
  - vars_plugin_staging
"""

# The directory that holds the `sparkctl` package, for an ansible-playbook whose Python lacks it:
# the clone (<repo>/plugins/vars/) or the installed package (<site>/sparkctl/_content/plugins/vars/).
_REPO = next((p for p in Path(__file__).resolve().parents if (p / "sparkctl" / "__init__.py").is_file()),
             Path(__file__).resolve().parents[2])
_CACHE = {}
_FILES_CACHE = {}


def _sparkctl():
    try:
        from sparkctl import render
        from sparkctl.model import load_inventory
    except ImportError:
        sys.path.insert(0, str(_REPO))
        from sparkctl import render
        from sparkctl.model import load_inventory
    return load_inventory, render


def _state_dir() -> str:
    """sparkctl's controller state directory, from the one function that computes it
    (``$SPARKCTL_STATE_DIR``, else the per-user state directory); read on every call, since it
    depends on this process's environment and not on the inventory."""
    _sparkctl()  # puts the checkout on sys.path where the package is not installed
    from sparkctl.ansible.content import state_dir

    return str(state_dir())


def _stamp(inv: Path):
    files = [inv / "hosts.yml", inv / "hosts.yaml"]
    for sub in ("group_vars", "host_vars"):
        d = inv / sub
        if d.is_dir():
            files += sorted(p for p in d.rglob("*") if p.is_file())
    return tuple((str(p), p.stat().st_mtime_ns) for p in files if p.is_file())


def _rendered(inv: Path):
    key = str(inv)
    stamp = _stamp(inv)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] == stamp:
        return hit
    load_inventory, render = _sparkctl()
    try:
        cluster = load_inventory(inv)
    except Exception as exc:  # sparkctl's InputError lists every problem
        details = getattr(exc, "details", None) or []
        hint = getattr(exc, "hint", None)
        text = str(exc) + "".join(f"\n  - {d}" for d in details) + (f"\n  {hint}" if hint else "")
        raise AnsibleError(f"sparkctl inventory {inv}: {text}") from exc
    doc = render.plan_document(cluster)
    facts = render.cluster_facts(cluster)
    per_host = {}
    for entry in doc["nodes"]:
        per_host[entry["name"]] = {
            "sparkctl_rendered": entry,
            "sparkctl_cluster": facts,
            # The group this node serves in: its rank there and the group's TP (Engram shards,
            # start waves); a spare node's says serving false.
            "sparkctl_group": render.groups.node_group(cluster, cluster.node(entry["name"])),
            # The port the model resolved (ansible_ssh_port, ansible_port, ssh arguments, the
            # inventory's ssh_config...) and the firewall opens: Ansible connects on exactly it.
            "ansible_port": entry["ssh_port"],
        }
    sw = doc.get("switch") or {}
    if cluster.switch is not None:
        per_host[cluster.switch.name] = {
            "sparkctl_rendered": {
                "type": sw.get("type"),
                "name": sw.get("name"),
                "file": sw.get("file"),
                "switch_config": sw.get("config", ""),
                "ssh_port": cluster.switch.ssh_port,
            },
            "sparkctl_cluster": facts,
            "ansible_port": cluster.switch.ssh_port,
        }
    _CACHE[key] = (stamp, per_host)
    return stamp, per_host


def _reading():
    """True while sparkctl itself reads the inventory through Ansible: the values rendered from the
    inventory are no input to it (and asking for them then would read the inventory again)."""
    reader = sys.modules.get("sparkctl.model.ansible_read")
    return reader is not None and reader.loading()


class VarsModule(BaseVarsPlugin):
    REQUIRES_ENABLED = True
    is_stateless = True

    def get_vars(self, loader, path, entities, cache=True):
        super().get_vars(loader, path, entities)
        # Ansible asks for every group as well as every host, for each task: groups get nothing.
        hosts = [e for e in (entities if isinstance(entities, list) else [entities]) if isinstance(e, Host)]
        if not hosts:
            return {}
        inv = Path(os.path.realpath(path))
        if not (inv / "group_vars" / "all" / "sparkctl.yml").is_file() or _reading():
            return {}
        stamp, per_host = _rendered(inv)
        data = {}
        for host in hosts:
            data.update(per_host.get(host.name, {}))
            # What the host's connection variables resolve to depends only on the inventory's files
            # (the stamp), the groups the host is in and the values set on it and on them in this
            # run (add_host, group_by): kept for the run under all of those.
            key = (str(inv), host.name, stamp, repr([
                (g.name, [g.vars.get(k) for k in _CONNECTION_VARS])
                for g in [*sorted(host.get_groups(), key=lambda g: g.name), host]
            ]))
            files = _FILES_CACHE.get(key)
            if files is None:
                files = _FILES_CACHE[key] = _absolute_files(loader, path, host, inv)
            data.update(files)
        data["sparkctl_state_dir"] = _state_dir()
        return data


_ARG_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")
_KEY_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
_CONNECTION_VARS = (*_ARG_VARS, *_KEY_VARS)


def _effective(loader, path, host, key):
    """``key`` as Ansible resolves it for ``host`` from the inventory: its groups' variables (hosts
    file, then group_vars/), shallow to deep, then the host's own (hosts file, then host_vars/)."""
    from ansible.inventory.helpers import sort_groups
    from ansible.plugins.vars.host_group_vars import VarsModule as Files

    files = Files()
    value = None
    levels = [(g.get_vars, g) for g in sort_groups(host.get_groups())] + [(lambda: host.vars, host)]
    for inline, entity in levels:
        for found in (inline(), files.get_vars(loader, path, [entity])):
            if found.get(key) is not None:
                value = found[key]
    return value


def _absolute_files(loader, path, host, inv: Path):
    """The connection variables of ``host`` whose files are relative, made absolute (see above)."""
    _sparkctl()
    from sparkctl.model import sshconfig

    out = {}
    for key in _ARG_VARS:
        value = _effective(loader, path, host, key)
        fixed = sshconfig.absolute_ssh_args(str(value), inv) if isinstance(value, str) else None
        if fixed is not None:
            out[key] = fixed
    for key in _KEY_VARS:
        value = _effective(loader, path, host, key)
        if isinstance(value, str) and value.strip() and "{{" not in value:
            resolved = str(sshconfig.controller_path(value.strip(), inv))
            if resolved != value:
                out[key] = resolved
    return out
