#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read every provision role's state on the node in one call; record it after a role ran.

Standard library only; the readers are sparkctl's node-side ``applied`` module (shipped as
module_utils). The controller side (action plugin of the same name) computes each role's inputs
digest and calls this module with it.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkctl_applied
short_description: Decide which provision roles are up to date on a node, and record what they applied
description:
  - C(probe) reads what each role owns on the node (files, managed blocks, units, packages, sysctl
    values, links, nftables tables, command outputs) and compares it, and the role's inputs digest,
    with what was recorded right after the role last ran. A role runs unless both are unchanged.
  - C(record) reads the same state after the roles ran and records it with their inputs digests.
  - The record lives in C(path), root only. Check mode never writes it.
options:
  roles:
    description: role name -> C(inputs) (digest, computed on the controller) and C(state) (what it owns).
    type: dict
    required: true
  mode:
    description: C(probe) or C(record).
    type: str
    choices: [probe, record]
    default: probe
  record:
    description: In C(record) mode, the roles that ran to completion in this run.
    type: list
    elements: str
    default: []
  full:
    description: Report every role as due (C(--full)).
    type: bool
    default: false
  path:
    description: Where the record is kept on the node.
    type: str
    default: /var/lib/sparkctl/applied.json
author: sparkctl
"""

RETURN = r"""
roles:
  description: probe - role -> {run, reasons}; record - role -> {recorded}
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.nodeside import applied
# What the modules above import relatively, named here too: Mitogen ships with a module only the
# module_utils it names (tests/unit/test_strategy_mitogen.py keeps this list whole).
import ansible.module_utils.sparkctl.nodeside.links  # noqa: F401
import ansible.module_utils.sparkctl.nodeside.system  # noqa: F401


def main():
    module = AnsibleModule(
        argument_spec={
            "roles": {"type": "dict", "required": True},
            "mode": {"type": "str", "choices": ["probe", "record"], "default": "probe"},
            "record": {"type": "list", "elements": "str", "default": []},
            "full": {"type": "bool", "default": False},
            "path": {"type": "str", "default": applied.RECORD},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["mode"] == "probe":
            module.exit_json(changed=False, roles=applied.probe(p["roles"], p["path"], p["full"]))
        unknown = sorted(set(p["record"]) - set(p["roles"]))
        if unknown:
            module.fail_json(msg="record: no state spec for role(s) {}".format(", ".join(unknown)))
        changed = applied.record_roles(p["roles"], p["record"], p["path"], write=not module.check_mode)
        module.exit_json(changed=changed, roles={name: {"recorded": True} for name in p["record"]})
    except ValueError as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
