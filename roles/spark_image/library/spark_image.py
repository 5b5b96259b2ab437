#!/usr/bin/python
"""The engine image on this node: one step of `sparkctl stage image` per call (see sparkctl/stage/image.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_image
short_description: Probe, build, save, fan out, load and clean the engine image on one node
description:
  - C(probe) reads the Docker engine (data root, runtimes), whether zstd is installed and the image
    ID under C(ref); it changes nothing and also runs in check mode.
  - C(pull) pulls C(ref) unless this node already has it (with the pinned C(expected_id)).
  - C(build) runs C(docker build --pull=false) of the staged kit; a base image missing on the node
    is refused (a build never pulls).
  - C(save) first refuses when the run directory's filesystem lacks the image's size (x 1.1) plus
    C(margin_gib), then writes C(docker save ref | zstd) under C(<run_dir>/images/<id16>/), hashed
    as it is written and renamed when complete, with its manifest; a failed write or stage stops the
    whole pipe at once, naming the cause. An existing archive of the same ID is kept.
  - C(preflight) refuses a node whose run directory or docker data root lacks the room for the
    archive and the loaded layers (plus the margin), before any byte moves.
  - C(fanout) is this node's link of the staging chain (sparkctl/stage/transfer.py run_node) for
    the archive directory.
  - C(load) reads the archive through once and refuses one that is not exactly the expected image
    under exactly C(ref) (docker load would move any other tag it names off the image that has it
    on this node), checks the data root's free space against the uncompressed archive plus the
    layers plus the margin, runs C(zstd -dc | docker load) and checks the ID; a failure leaves the
    previous image in place.
  - C(verify) fails, naming this node, unless its image under C(ref) is C(expected_id); it changes
    nothing and also runs in check mode.
  - C(clean) removes archive directories of other images under C(<run_dir>/images).
options:
  action: {type: str, required: true, choices: [probe, pull, build, save, preflight, fanout, load, verify, clean]}
  node: {type: str, required: true, description: Inventory name of this node (named in every message).}
  ref: {type: str, default: "", description: The image reference the ranks run.}
  expected_id: {type: str, default: "", description: "The image ID this node must end up with (sha256:<64 hex>)."}
  run_dir: {type: path, default: "", description: sparkctl's run directory on the node.}
  context: {type: path, default: "", description: Build context (the kit's current version).}
  dockerfile: {type: str, default: "", description: Dockerfile path inside the context.}
  base: {type: str, default: "", description: "The image the Dockerfile must start FROM (empty: any)."}
  compress: {type: bool, default: true, description: zstd the saved archive.}
  archive: {type: path, default: "", description: Archive to load.}
  marker: {type: dict, default: {}, description: "Written beside the loaded archive as <archive>.loaded.json."}
  data_root: {type: path, default: "", description: Docker's data root on this node.}
  archive_bytes: {type: int, default: 0, description: Size of the archive to receive.}
  image_bytes: {type: int, default: 0, description: Size of the image once loaded.}
  margin_gib: {type: float, default: 8, description: Free space that must remain.}
  expected: {type: dict, default: {}, description: The head's archive manifest (fanout).}
  peers: {type: list, elements: dict, default: [], description: "[{name, rank, address}] of the chain."}
  port: {type: int, default: 29701, description: TCP port of the transfer agents.}
  progress_path: {type: path, default: "", description: "Progress JSON for the controller's bars: the build's steps, the save's and the fan-out's bytes."}
  bwlimit_mib_s: {type: float, default: 0, description: Receive rate cap in MiB/s (0 = none).}
  stall_timeout_s: {type: float, default: 120, description: Give up when a peer sends nothing this long.}
  retries: {type: int, default: 3, description: Attempts per file.}
  pinned: {type: bool, default: false, description: C(expected_id) is the inventory's pin (verify's wording).}
  keep: {type: list, elements: str, default: [], description: Image IDs whose archives clean keeps.}
author: sparkctl
"""

import json
import os
import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.nodeside import images
from ansible.module_utils.sparkctl.stage import fanout, image, transfer
# What the modules above import relatively, named here too: Mitogen ships with a module only the
# module_utils it names (tests/unit/test_strategy_mitogen.py keeps this list whole).
import ansible.module_utils.sparkctl.nodeside.manifests  # noqa: F401
import ansible.module_utils.sparkctl.nodeside.progress  # noqa: F401
import ansible.module_utils.sparkctl.stage.manifest  # noqa: F401
import ansible.module_utils.sparkctl.stage.writeback  # noqa: F401


def _fanout(module, p):
    try:
        route = fanout.route_for(p["peers"], p["port"], p["node"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    root = os.path.dirname(p["archive"]) if p["archive"] else image.archive_dir(p["run_dir"], p["expected_id"])
    if module.check_mode:
        todo = transfer.plan_local(root, p["expected"])
        module.exit_json(changed=any(a != "keep" for a in todo.values()), files=todo, route=route.as_dict())
    log = []
    try:
        res = transfer.run_node(
            p["node"], root, p["expected"], route.listen, route.upstream,
            progress_path=p["progress_path"] or "", bwlimit=p["bwlimit_mib_s"] * (1 << 20),
            stall_s=p["stall_timeout_s"], connect_wait_s=p["stall_timeout_s"], retries=p["retries"],
            log=log.append,
        )
    except transfer.TransferError as exc:
        module.fail_json(msg=f"{p['node']}: {exc}", log=log, route=route.as_dict())
    module.exit_json(route=route.as_dict(), log=log, dir=root, **res.as_dict())


def _pull(module, p):
    have = image.inspect(p["ref"])
    if have is not None and (not p["expected_id"] or have["id"] == p["expected_id"]):
        if image.inspect(images.run_reference(p["ref"])) is None and not module.check_mode:
            _tag_for_run(module, p, have)
            module.exit_json(changed=True, image=have)
        module.exit_json(changed=False, image=have)
    if module.check_mode:
        module.exit_json(changed=True, image=have)
    proc = module.run_command(["docker", "pull", p["ref"]])
    if proc[0] != 0:
        module.fail_json(msg=f"{p['node']}: docker pull {p['ref']} failed: {proc[2].strip()[-400:]}")
    pulled = image.inspect(p["ref"])
    _tag_for_run(module, p, pulled)
    module.exit_json(changed=True, image=pulled, previous=have)


def _tag_for_run(module, p, found):
    """Give a pulled image the local tag the rank's docker run names (see nodeside.images)."""
    run_ref = images.run_reference(p["ref"])
    if found is None or run_ref == p["ref"]:
        return
    proc = module.run_command(["docker", "tag", found["id"], run_ref])
    if proc[0] != 0:
        module.fail_json(msg=f"{p['node']}: docker tag {found['id']} {run_ref} failed: {proc[2].strip()[-400:]}")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            action=dict(type="str", required=True,
                        choices=["probe", "pull", "build", "save", "preflight", "fanout", "load", "verify", "clean"]),
            node=dict(type="str", required=True),
            ref=dict(type="str", default=""),
            expected_id=dict(type="str", default=""),
            run_dir=dict(type="path", default=""),
            context=dict(type="path", default=""),
            dockerfile=dict(type="str", default=""),
            base=dict(type="str", default=""),
            compress=dict(type="bool", default=True),
            archive=dict(type="path", default=""),
            marker=dict(type="dict", default={}),
            data_root=dict(type="path", default=""),
            archive_bytes=dict(type="int", default=0),
            image_bytes=dict(type="int", default=0),
            margin_gib=dict(type="float", default=8.0),
            expected=dict(type="dict", default={}),
            peers=dict(type="list", elements="dict", default=[]),
            port=dict(type="int", default=29701),
            progress_path=dict(type="path", default=""),
            bwlimit_mib_s=dict(type="float", default=0.0),
            stall_timeout_s=dict(type="float", default=120.0),
            retries=dict(type="int", default=3),
            keep=dict(type="list", elements="str", default=[]),
            pinned=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    action, node = p["action"], p["node"]
    margin = int(p["margin_gib"] * (1 << 30))
    try:
        if action == "probe":
            module.exit_json(changed=False, **image.probe(p["ref"], p["run_dir"], p["expected_id"] or None))
        if action == "pull":
            _pull(module, p)
        if action == "build":
            if module.check_mode:
                module.exit_json(changed=True, image=image.inspect(p["ref"]))
            module.exit_json(**image.build(p["ref"], p["context"], p["dockerfile"], node,
                                           base=p["base"] or None, progress_path=p["progress_path"] or ""))
        if action == "save":
            if module.check_mode:
                module.exit_json(changed=True, dir=image.archive_dir(p["run_dir"], p["expected_id"]))
            module.exit_json(**image.save(p["ref"], p["expected_id"], p["run_dir"], node, p["compress"], margin,
                                          progress_path=p["progress_path"] or ""))
        if action == "preflight":
            report = image.space_check(
                node, p["run_dir"], p["data_root"], p["archive_bytes"], p["image_bytes"], margin
            )
            module.exit_json(changed=False, filesystems=report)
        if action == "fanout":
            _fanout(module, p)
        if action == "load":
            if module.check_mode:
                module.exit_json(changed=True)
            res = image.load(node, p["archive"], p["ref"], p["expected_id"] or None, p["data_root"],
                             p["image_bytes"], margin)
            if p["marker"]:
                with open(p["archive"] + ".loaded.json", "w", encoding="utf-8") as fh:
                    json.dump(dict(p["marker"], image_id=res["image"]["id"]), fh)
            module.exit_json(**res)
        if action == "verify":
            found = image.verify(node, p["ref"], p["expected_id"], pinned=p["pinned"])
            module.exit_json(changed=False, image=found)
        if action == "clean":
            removed = image.clean(p["run_dir"], p["keep"], dry_run=module.check_mode)
            module.exit_json(changed=bool(removed), removed=removed)
    except image.ImageError as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:
        module.fail_json(msg=f"{node}: {type(exc).__name__}: {exc}", exception=traceback.format_exc())


if __name__ == "__main__":
    main()
