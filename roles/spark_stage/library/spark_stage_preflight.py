#!/usr/bin/python
"""Refuse before any byte moves when this node's NVMe cannot hold what staging will write."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_stage_preflight
short_description: Space preflight for staging on one node
description:
  - Adds up the bytes this node still needs (checkpoint files it lacks, minus resumable
    C(.partial) prefixes, plus its packed Engram files), adds the margin, and fails naming the
    node, the filesystem, the bytes needed and the bytes free when they do not fit.
  - Read-only; identical in check mode.
options:
  node: {type: str, required: true, description: Inventory name of this node (for messages).}
  model_dir: {type: path, required: true, description: Checkpoint directory.}
  engram_dir: {type: path, required: true, description: Packed Engram directory.}
  expected: {type: dict, description: The head's checkpoint manifest (omit to skip the checkpoint).}
  engram: {type: list, elements: dict, default: [], description: "[{layer, rows}] of the Engram tables (omit to skip packing)."}
  rank: {type: int, required: true, description: This node's rank.}
  tp: {type: int, required: true, description: Tensor-parallel size.}
  margin_gib: {type: float, default: 8, description: Free space that must remain afterwards (GiB).}
author: sparkctl
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.stage import dsv41en1, manifest
# What the modules above import relatively, named here too: Mitogen ships with a module only the
# module_utils it names (tests/unit/test_strategy_mitogen.py keeps this list whole).
import ansible.module_utils.sparkctl.nodeside.manifests  # noqa: F401
import ansible.module_utils.sparkctl.nodeside.progress  # noqa: F401
import ansible.module_utils.sparkctl.stage.safetensors  # noqa: F401
import ansible.module_utils.sparkctl.stage.writeback  # noqa: F401


def _gib(n):
    return f"{n / (1 << 30):.2f} GiB"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", required=True),
            model_dir=dict(type="path", required=True),
            engram_dir=dict(type="path", required=True),
            expected=dict(type="dict"),
            engram=dict(type="list", elements="dict", default=[]),
            rank=dict(type="int", required=True),
            tp=dict(type="int", required=True),
            margin_gib=dict(type="float", default=8.0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    need = {}          # filesystem device -> bytes

    def charge(path, nbytes):
        probe = os.path.abspath(path)
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
        dev = os.stat(probe).st_dev
        mount, total = need.get(dev, (probe, 0))
        need[dev] = (mount, total + nbytes)

    ckpt_bytes = 0
    if p["expected"]:
        try:
            local = manifest.load(p["model_dir"]) if os.path.isdir(p["model_dir"]) else None
        except manifest.ManifestError:
            local = None
        quick = manifest.quick_ok(p["model_dir"], p["expected"], local)
        for e in p["expected"].get("files", []):
            if quick.get(e["path"]):
                continue
            final = os.path.join(p["model_dir"], manifest.safe_relpath(e["path"]))
            have = 0
            for cand in (final, final + manifest.PARTIAL):
                if os.path.isfile(cand):
                    have = max(have, min(os.path.getsize(cand), e["size"]))
            # a final file of the right size is re-used in place; a partial resumes
            ckpt_bytes += e["size"] - have
        charge(p["model_dir"], ckpt_bytes)
    engram_bytes = 0
    for t in p["engram"]:
        lo, hi = dsv41en1.row_range(int(t["rows"]), p["rank"], p["tp"])
        size = dsv41en1.packed_size(lo, hi)
        path = os.path.join(p["engram_dir"], dsv41en1.shard_name(int(t["layer"]), p["rank"], p["tp"]))
        if os.path.isfile(path) and os.path.getsize(path) == size:
            continue
        engram_bytes += size
    if p["engram"]:
        charge(p["engram_dir"], engram_bytes)
    margin = int(p["margin_gib"] * (1 << 30))
    report = []
    for _dev, (probe, nbytes) in need.items():
        st = os.statvfs(probe)
        free = st.f_bavail * st.f_frsize
        report.append({"path": probe, "needed_bytes": nbytes, "free_bytes": free, "margin_bytes": margin})
        if nbytes and nbytes + margin > free:
            module.fail_json(
                msg=(f"{p['node']}: not enough space on the filesystem of {probe}: needs {_gib(nbytes + margin)} "
                     f"({_gib(nbytes)} to stage + {_gib(margin)} margin), {_gib(free)} free; "
                     "nothing was copied — free space or point sparkctl_paths at a larger NVMe"),
                filesystems=report,
            )
    module.exit_json(changed=False, filesystems=report, checkpoint_bytes=ckpt_bytes, engram_bytes=engram_bytes)


if __name__ == "__main__":
    main()
