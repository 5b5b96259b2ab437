#!/usr/bin/python
"""Each overlay's before_sha256 against the file it replaces in the engine image (when present)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_kit_base
short_description: Check the kit's overlays against the engine image on this node
description:
  - When C(image) is present in this node's Docker, hashes every C(<target>/<rel>) inside it
    (C(docker run --rm --network none --pull never --entrypoint sha256sum)) and compares each with
    the overlay manifest. Accepted per overlay: the file's C(before_sha256) or its C(after_sha256)
    (an image that already carries the patch); for a new file (before null): absent or after.
    Otherwise it fails naming the path and both digests.
  - Without Docker or without the image it reports C(checked=false) and why. Never changes anything.
options:
  image: {type: str, required: true, description: The image reference the ranks run.}
  target: {type: str, required: true, description: Root of the overlay targets inside the image.}
  overlays: {type: dict, required: true, description: The kit's overlay manifest.}
  node: {type: str, required: true, description: Inventory name of this node (for messages).}
author: sparkctl
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.nodeside import kit as nk


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            target=dict(type="str", required=True),
            overlays=dict(type="dict", required=True),
            node=dict(type="str", required=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    docker = module.get_bin_path("docker")
    if not docker:
        module.exit_json(changed=False, checked=False, reason="docker is not installed on this node")
    rc, out, err = module.run_command([docker, "image", "inspect", "--format", "{{.Id}}", p["image"]])
    if rc != 0:
        module.exit_json(changed=False, checked=False, reason="image {} is not present here".format(p["image"]))
    image_id = out.strip()
    target = p["target"].rstrip("/")
    paths = [target + "/" + rel for rel in sorted(p["overlays"])]
    rc, out, err = module.run_command([docker, "run", "--rm", "--network", "none", "--pull", "never",
                                       "--entrypoint", "sha256sum", p["image"]] + paths)
    digests = nk.parse_sha256sum(out, target)
    if rc != 0 and not digests and "No such file" not in err:
        module.fail_json(msg="{}: cannot read the overlay targets in {}: {}".format(
            p["node"], p["image"], (err or out).strip()[-300:]))
    problems = nk.check_base(p["overlays"], digests)
    if problems:
        module.fail_json(msg="{}: the kit does not fit image {} ({}): {}".format(
            p["node"], p["image"], image_id, "; ".join(nk.describe(x) for x in problems)),
            problems=problems, image_id=image_id)
    module.exit_json(changed=False, checked=True, image_id=image_id, overlays=len(paths))


if __name__ == "__main__":
    main()
