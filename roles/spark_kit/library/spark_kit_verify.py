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
  build:
    type: list
    elements: dict
    default: []
    description:
      - The kit's build steps (nodeside/kitbuild.py). What they produce is not reported as foreign;
        with C(products) it is checked against the node's build record instead, and its digests
        are returned (C(kit.products)) for the comparison across nodes.
  products: {type: bool, default: false, description: Check the build products against the build record.}
  image:
    type: str
    default: ""
    description: The image the products are built in; with C(products), the record must name its ID on this node.
author: sparkctl
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.nodeside import kit as nk
from ansible.module_utils.sparkctl.nodeside import kitbuild


def _image_id(module, image):
    docker = module.get_bin_path("docker")
    if not docker:
        return None
    rc, out, _ = module.run_command([docker, "image", "inspect", "--format", "{{.Id}}", image])
    return out.strip() if rc == 0 and out.strip() else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", required=True),
            store=dict(type="path", required=True),
            version=dict(type="str", required=True),
            expected=dict(type="dict", default={}),
            action=dict(type="str", default="verify", choices=["verify", "switch"]),
            require_current=dict(type="bool", default=False),
            build=dict(type="list", elements="dict", default=[]),
            products=dict(type="bool", default=False),
            image=dict(type="str", default=""),
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
    root = os.path.join(store, version)
    steps = p["build"]
    problems = nk.verify_tree(root, p["expected"], kitbuild.product_filter(steps) if steps else None)
    if steps and p["products"]:
        kit["products"] = {}
    if steps and p["products"] and os.path.isdir(root):
        image_id = None
        if p["image"]:
            image_id = _image_id(module, p["image"])
            if image_id is None:
                problems.append(nk.problem(kitbuild.RECORD, "the build image {} is not on this node "
                                           "(run sparkctl stage image)".format(p["image"])))
        problems += kitbuild.verify(root, version, steps, image_id)
        kit["products"] = kitbuild.product_hashes(root, steps)
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
