"""Controller side of ``sparkctl_applied``: each role's inputs digest, then one module call on the node.

A role's inputs digest covers everything on the controller that decides what the role does:

  trees   the role's own directory (tasks, defaults, templates, files, modules; symlinks followed,
          so the node-side code a role ships counts) and any other source it deploys (the
          simulator's sources for spark_runtime); names relative to the roles directory; digested
          by ``sparkctl.ansible.treedigest``, as the provision fast path digests the controller
  values  the inventory values the role reads, already templated (rendered files, fabric ports,
          management network, runtime, other nodes' addresses, facts the role branches on)
  vars    every variable named after the role (``spark_base_*`` for spark_base), as written: a site
          override in the inventory or extra vars changes it, a role default is in the tree
  ansible the ansible-core version (a module's behaviour may change with it)

In ``probe`` mode the digests are computed and sent with each role's state spec; the result carries
them (``inputs``) so that ``record`` mode stores exactly the digests the decision was made with,
whatever the roles set as facts in between.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.ansible_release import __version__ as ansible_version
from ansible.plugins.action import ActionBase

ROLES_DIR = Path(__file__).resolve().parents[2]
# The directory that holds the `sparkctl` package when this Ansible's Python lacks it (a clone).
_REPO = next((p for p in Path(__file__).resolve().parents if (p / "sparkctl" / "__init__.py").is_file()),
             ROLES_DIR.parent)

try:
    from sparkctl.ansible.treedigest import tree_digest
except ImportError:
    sys.path.insert(0, str(_REPO))
    from sparkctl.ansible.treedigest import tree_digest


def source_digest(path: Path) -> str:
    """A source tree's digest; for a tree absent here (an installed sparkctl has no source tree) the
    installed package of the same name, as the simulator's wheel is then built from it."""
    if path.exists() or not path.name.isidentifier():
        return tree_digest(path)
    try:
        spec = importlib.util.find_spec(path.name)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return "absent"
    return "installed " + tree_digest(Path(next(iter(spec.submodule_search_locations))))


def _plain(value: Any) -> Any:
    """A JSON-able copy (tagged strings and the like become plain values; anything else its repr)."""
    return json.loads(json.dumps(value, sort_keys=True, default=repr))


def inputs_digest(role: str, spec: dict[str, Any], task_vars: dict[str, Any]) -> str:
    prefix = spec.get("prefix") or f"{role}_"
    trees = {}
    for name in spec.get("trees") or [role]:
        path = Path(name) if os.path.isabs(name) else ROLES_DIR / name
        trees[str(name)] = source_digest(path)
    own = {k: task_vars[k] for k in sorted(task_vars) if k.startswith(prefix)}
    doc = {"trees": trees, "values": spec.get("values"), "vars": own, "ansible": ansible_version}
    return hashlib.sha256(json.dumps(_plain(doc), sort_keys=True).encode()).hexdigest()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("roles", "mode", "record", "full", "inputs", "path"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        roles = args.get("roles") or {}
        if not isinstance(roles, dict) or not roles:
            raise AnsibleActionFail("sparkctl_applied: roles must be a non-empty mapping")
        mode = args.get("mode", "probe")
        if mode == "probe":
            inputs = {name: inputs_digest(spec.get("role", name), spec.get("inputs") or {}, task_vars)
                      for name, spec in roles.items()}
        else:
            inputs = dict(args.get("inputs") or {})
            missing = sorted(set(args.get("record") or []) - set(inputs))
            if missing:
                names = ", ".join(missing)
                raise AnsibleActionFail(f"sparkctl_applied: no inputs digest for role(s) {names}")
        module_args = {
            "roles": {name: {"inputs": inputs.get(name), "state": spec.get("state") or {}}
                      for name, spec in roles.items()},
            "mode": mode,
            "record": list(args.get("record") or []),
            "full": bool(args.get("full", False)),
        }
        if args.get("path"):
            module_args["path"] = args["path"]
        result.update(self._execute_module(module_name="sparkctl_applied", module_args=module_args,
                                           task_vars=task_vars))
        result["inputs"] = inputs
        if mode == "probe":
            # What the decision was made from, exactly as the node got it, with each role's input
            # trees: `sparkctl provision` repeats this read without Ansible while none of it changed
            # (sparkctl/serve/provfast.py).
            result["specs"] = {}
            for name, spec in roles.items():
                trees = (spec.get("inputs") or {}).get("trees") or [spec.get("role", name)]
                result["specs"][name] = {**module_args["roles"][name], "trees": [str(t) for t in trees]}
        return result
