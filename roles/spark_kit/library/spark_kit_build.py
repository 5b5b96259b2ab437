#!/usr/bin/python
"""The kit's build steps on this node (extract, compile in the engine image), and the comparison of
their products across the nodes."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_kit_build
short_description: Run the serving kit's build steps on this node, or compare their products across nodes
description:
  - C(action=build) runs the profile's build steps (nodeside/kitbuild.py) on C(<store>/<version>):
    C(extract) unpacks an archive of the kit checked member by member against its manifest;
    C(compile) runs a command in the engine image (C(docker run --rm --network none), the version
    bound read-write at C(mount)). It then writes sparkctl's build record
    (C(.sparkctl-build.json)) holding the kit version, the image ID, the digest of the steps and
    each product's SHA-256. A version whose record matches the version, the image ID and the steps,
    with every product still as recorded, is left alone (changed=false). Check mode reports
    whether a build would run.
  - C(action=compare) (run once) takes each node's product digests (C(reports)) and fails naming
    every node whose product differs from the one most nodes hold, with the file and both digests.
options:
  action: {type: str, default: build, choices: [build, compare], description: What to do.}
  node: {type: str, default: "", description: Inventory name of this node (for messages).}
  store: {type: path, default: "", description: Directory of the kit versions on the node.}
  version: {type: str, default: "", description: The kit version (directory name).}
  steps: {type: list, elements: dict, default: [], description: The profile's kit build steps.}
  mount: {type: str, default: "", description: Where the container sees the kit (compile).}
  image: {type: str, default: "", description: The engine image the compile steps run in.}
  expected: {type: dict, default: {}, description: The kit's file manifest (a product may not be a kit file).}
  reports: {type: dict, default: {}, description: "compare: {node: {product: sha256}} in rank order."}
  pending_ok:
    type: bool
    default: false
    description: >-
      With the engine image not on this node yet, report the build as pending (C(stage kit) alone:
      C(stage image) builds it once the image is there) instead of failing.
author: sparkctl
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.nodeside import kit as nk
from ansible.module_utils.sparkctl.nodeside import kitbuild


def _compare(module, reports):
    odd = kitbuild.odd_nodes(reports)
    if odd:
        nodes = sorted({n for n, _ in odd})
        shown = "; ".join(nk.describe(p, node=n) for n, p in odd[:8])
        more = " (and {} more)".format(len(odd) - 8) if len(odd) > 8 else ""
        module.fail_json(msg="the kit's build products differ across nodes (odd: {}): {}{}".format(
            ", ".join(nodes), shown, more), odd=[dict(p, node=n) for n, p in odd])
    module.exit_json(changed=False, nodes=len(reports))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            action=dict(type="str", default="build", choices=["build", "compare"]),
            node=dict(type="str", default=""),
            store=dict(type="path", default=""),
            version=dict(type="str", default=""),
            steps=dict(type="list", elements="dict", default=[]),
            mount=dict(type="str", default=""),
            image=dict(type="str", default=""),
            expected=dict(type="dict", default={}),
            reports=dict(type="dict", default={}),
            pending_ok=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["action"] == "compare":
        _compare(module, p["reports"])
    node, steps = p["node"], p["steps"]
    try:
        nk.safe_rel(p["version"], "version")
    except nk.KitError as exc:
        module.fail_json(msg="{}: {}".format(node, exc))
    root = os.path.join(p["store"], p["version"])
    docker = module.get_bin_path("docker")
    if not docker:
        module.fail_json(msg="{}: docker is not installed: the kit's build steps run in the engine image".format(node))
    rc, out, _ = module.run_command([docker, "image", "inspect", "--format", "{{.Id}}", p["image"]])
    image_id = out.strip()
    if (rc != 0 or not image_id) and module.check_mode:  # the image the run would stage first
        module.exit_json(changed=True, built=False, would_build=True, image_id=None, products={},
                         msg="the engine image {} is not on this node yet".format(p["image"]))
    if (rc != 0 or not image_id) and p["pending_ok"]:
        module.exit_json(changed=False, built=False, pending=True, image_id=None, products={},
                         msg="{}: the engine image {} is not on this node yet: the kit's build steps run "
                             "in it when `sparkctl stage image` has staged it".format(node, p["image"]))
    if rc != 0 or not image_id:
        module.fail_json(msg="{}: the engine image {} is not on this node; the kit's build steps run in it "
                             "(run sparkctl stage image, then stage kit)".format(node, p["image"]))
    def run(argv):
        rc, out, err = module.run_command(argv)
        return rc, (err or "") + (out or "")

    try:
        changed, record = kitbuild.ensure(root, p["version"], steps, p["mount"], p["image"], image_id,
                                          expected=p["expected"], run=run, docker=docker,
                                          check_mode=module.check_mode)
    except (kitbuild.BuildError, nk.KitError, OSError) as exc:
        module.fail_json(msg="{}: building the kit {} failed: {}".format(node, p["version"], exc))
    if record is None:  # check mode: a build would run
        module.exit_json(changed=True, built=False, would_build=True, image_id=image_id, products={})
    module.exit_json(changed=changed, built=changed, record=record, products=record["products"])


if __name__ == "__main__":
    main()
