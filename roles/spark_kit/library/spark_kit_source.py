#!/usr/bin/python
"""Obtain the serving kit (git commit, directory or tarball) and check it before anything moves."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_kit_source
short_description: Fetch or read the serving kit and check its tree and overlays
description:
  - Runs where the kit's source lives (the controller for git and a controller dir/tar; the head
    for a head dir/tar). A git kit is fetched at the exact commit into a bare cache repository
    under C(cache_dir) (only when the cache lacks the commit) and exported without C(.git); a
    tarball is unpacked into the cache; a directory is read in place.
  - Refuses a branch, tag or abbreviated commit, a commit the repository lacks, a tree whose
    digest differs from C(sha256), an overlay manifest whose keys differ from C(overlays) and an
    overlay file whose SHA-256 is not the manifest's C(after_sha256), naming the file and both digests.
  - Returns the version (commit, or tree-<16 hex>), the tree digest, the local directory of the
    tree, its file manifest (the reference every node is verified against) and the overlay manifest.
  - Check mode runs too: only the controller-side cache is written, never a node.
options:
  source: {type: str, required: true, choices: [git, dir, tar], description: Kind of source.}
  url: {type: str, description: Repository URL or path (git).}
  commit: {type: str, description: Full 40-hex commit (git).}
  path: {type: path, description: Directory or tarball (dir / tar).}
  sha256: {type: str, description: Expected tree digest (optional).}
  cache_dir: {type: path, required: true, description: Cache of fetched repositories and unpacked trees.}
  manifest: {type: str, required: true, description: Overlay manifest inside the kit.}
  overlay_source: {type: str, required: true, description: Directory of the overlay files inside the kit.}
  overlays: {type: list, elements: str, description: The profile's overlays (the manifest's keys must equal them).}
  progress_path: {type: path, default: "", description: "Where git's fetch progress (objects, bytes) is written for the controller's bars (empty = none)."}
author: sparkctl
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.stage import kit
# What the modules above import relatively, named here too: Mitogen ships with a module only the
# module_utils it names (tests/unit/test_strategy_mitogen.py keeps this list whole).
import ansible.module_utils.sparkctl.nodeside.kit  # noqa: F401
import ansible.module_utils.sparkctl.nodeside.progress  # noqa: F401


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source=dict(type="str", required=True, choices=["git", "dir", "tar"]),
            url=dict(type="str"),
            commit=dict(type="str"),
            path=dict(type="path"),
            sha256=dict(type="str"),
            cache_dir=dict(type="path", required=True),
            manifest=dict(type="str", required=True),
            overlay_source=dict(type="str", required=True),
            overlays=dict(type="list", elements="str"),
            progress_path=dict(type="path", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        res = kit.prepare(p["source"], p["cache_dir"], url=p["url"], commit=p["commit"], path=p["path"],
                          sha256=p["sha256"] or None, manifest=p["manifest"],
                          overlay_source=p["overlay_source"], overlays=p["overlays"],
                          progress_path=p["progress_path"] or "")
    except (kit.KitSourceError, kit.nk.KitError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**res)


if __name__ == "__main__":
    main()
