#!/usr/bin/python
"""The head's copy of one kit version: which files it lacks, and (head-side source) filling them in."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_kit_store
short_description: Compare (and fill) the head's copy of a kit version with the kit's file manifest
description:
  - Hashes every file of C(<store>/<version>) against C(expected) and returns the relative paths
    that are missing or differ (C(missing)); their directories are created so a copy can follow.
  - With C(src) (a kit kept on the head), copies each of those files from C(src) through a
    C(.partial) file that is renamed only when its SHA-256 matches.
  - With C(prune), removes every file of the version that differs from the manifest and every
    file that is not part of the kit, so the next copy or fan-out brings the kit's own bytes
    (a node whose file was changed in place, even keeping its size and time, is repaired).
  - Check mode reports the files without creating or copying anything.
options:
  store: {type: path, required: true, description: Directory of the kit versions on the node.}
  version: {type: str, required: true, description: The kit version (directory name).}
  expected: {type: dict, required: true, description: The kit's file manifest.}
  src: {type: path, default: "", description: Local directory holding the kit tree (head-side source).}
  prune: {type: bool, default: false, description: Remove differing and foreign files of the version.}
  build:
    type: list
    elements: dict
    default: []
    description: The kit's build steps; what they produce is not foreign (it is checked against the build record).
author: sparkctl
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.nodeside import kit as nk
from ansible.module_utils.sparkctl.nodeside import kitbuild


def _copy(src, dst, sha256):
    part = dst + nk.PARTIAL
    shutil.copyfile(src, part)
    shutil.copystat(src, part)
    if nk.file_sha256(part) != sha256:
        os.unlink(part)
        raise nk.KitError("{}: changed while it was copied (SHA-256 differs from the manifest)".format(src))
    os.replace(part, dst)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            store=dict(type="path", required=True),
            version=dict(type="str", required=True),
            expected=dict(type="dict", required=True),
            src=dict(type="path", default=""),
            prune=dict(type="bool", default=False),
            build=dict(type="list", elements="dict", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        nk.safe_rel(p["version"], "version")
        root = os.path.join(p["store"], p["version"])
        missing, differing = [], []
        want = {}
        for e in p["expected"].get("files", []):
            rel = nk.safe_rel(e["path"], "kit file manifest")
            want[rel] = e["sha256"]
            path = os.path.join(root, rel)
            if not (os.path.isfile(path) and not os.path.islink(path)):
                missing.append(rel)
            elif nk.file_sha256(path) != e["sha256"]:
                missing.append(rel)
                differing.append(rel)
        is_product = kitbuild.product_filter(p["build"])
        foreign = ([rel for rel in nk.list_files(root) if rel not in want and not is_product(rel)]
                   if os.path.isdir(root) else [])
        pruned = (differing + foreign) if p["prune"] else []
        if pruned and not module.check_mode:
            for rel in pruned:
                os.unlink(os.path.join(root, rel))
        copied = []
        if missing and not module.check_mode:
            for rel in missing:
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            if p["src"]:
                for rel in missing:
                    _copy(os.path.join(p["src"], rel), os.path.join(root, rel), want[rel])
                    copied.append(rel)
    except (nk.KitError, kitbuild.BuildError, OSError) as exc:
        module.fail_json(msg="{}/{}: {}".format(p["store"], p["version"], exc))
    changed = bool(pruned) or bool(copied) or (module.check_mode and bool(missing) and bool(p["src"]))
    module.exit_json(changed=changed, missing=missing, differing=differing, foreign=foreign, pruned=pruned,
                     copied=copied, root=root)


if __name__ == "__main__":
    main()
