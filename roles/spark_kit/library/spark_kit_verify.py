#!/usr/bin/python
"""Full check of this node's staged kit, and the atomic switch of its ``current`` link."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_kit_verify
short_description: Verify a staged kit version on this node, or switch its current link
description:
  - C(action=verify) re-hashes every file of C(<store>/<version>) against the kit's file manifest
    (C(expected)) and refuses any missing, changed or extra file; with C(require_current) the
    C(<store>/current) link must point at the version too. The failure names the node, the path
    and the expected and actual SHA-256. Changes nothing.
  - C(action=switch) points C(<store>/current) at the version atomically (a temporary link
    renamed over the old one); the previous target stays on disk. Check mode reports the switch
    without making it.
options:
  node: {type: str, required: true, description: Inventory name of this node (for messages).}
  store: {type: path, required: true, description: Directory of the kit versions on the node.}
  version: {type: str, required: true, description: The kit version that must be staged.}
  expected: {type: dict, default: {}, description: The kit's file manifest (verify).}
  action: {type: str, default: verify, choices: [verify, switch], description: What to do.}
  require_current: {type: bool, default: false, description: The current link must point at the version.}
author: sparkctl
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.nodeside import kit as nk


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", required=True),
            store=dict(type="path", required=True),
            version=dict(type="str", required=True),
            expected=dict(type="dict", default={}),
            action=dict(type="str", default="verify", choices=["verify", "switch"]),
            require_current=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    store, version, node = p["store"], p["version"], p["node"]
    current = nk.current_version(store)
    kit = {"version": version, "current": current, "store": store}
    if p["action"] == "switch":
        if current == version:
            module.exit_json(changed=False, kit=dict(kit, switched=False))
        if module.check_mode:
            module.exit_json(changed=True, kit=dict(kit, switched=True, previous=current))
        try:
            nk.switch_current(store, version)
        except (nk.KitError, OSError) as exc:
            module.fail_json(msg="{}: cannot switch {}/current to {}: {}".format(node, store, version, exc),
                             kit=kit)
        module.exit_json(changed=True, kit=dict(kit, current=version, switched=True, previous=current))
    problems = nk.verify_tree(os.path.join(store, version), p["expected"])
    if p["require_current"] and current != version:
        problems.append(nk.problem(os.path.join(store, nk.CURRENT),
                                   "points at {}, not the configured kit {}".format(current or "nothing", version)))
    files = len(p["expected"].get("files", []))
    kit.update(files=files, verified=not problems, problems=problems[:50])
    if problems:
        shown = "; ".join(nk.describe(x) for x in problems[:5])
        more = " (and {} more)".format(len(problems) - 5) if len(problems) > 5 else ""
        module.fail_json(msg="{}: kit {} fails verification: {}{}".format(node, version, shown, more), kit=kit)
    module.exit_json(changed=False, kit=kit)


if __name__ == "__main__":
    main()
