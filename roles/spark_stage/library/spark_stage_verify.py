#!/usr/bin/python
"""Verify the staged checkpoint and this rank's Engram shards on one node; return a summary."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_stage_verify
short_description: Verify staged files on one node (also the data source of status)
description:
  - C(depth=quick) checks presence, sizes, modification times against this node's manifests,
    packed headers and the checkpoint identity (seconds). C(depth=full) re-reads everything:
    the SHA-256 of every checkpoint file against C(expected) (or the node's own manifest) and
    of every packed file against its manifest, plus the 1,037 sampled rows.
  - Never changes anything (changed is always false; check mode behaves the same).
  - Fails, naming the node and each bad file, when C(fail_on_problems) and something is wrong.
options:
  node: {type: str, required: true, description: Inventory name (for messages).}
  model_dir: {type: path, required: true, description: Checkpoint directory.}
  engram_dir: {type: path, required: true, description: Packed Engram directory.}
  rank: {type: int, required: true, description: This node's rank.}
  tp: {type: int, required: true, description: Tensor-parallel size.}
  what: {type: str, choices: [weights, engram, all, none], default: all, description: "What to verify (none: nothing, e.g. engram on a resident-Engram group)."}
  depth: {type: str, choices: [quick, full], default: quick, description: Quick (stat) or full (re-hash).}
  expected: {type: dict, description: The head's manifest (default: this node's own).}
  fail_on_problems: {type: bool, default: true, description: Fail when anything is wrong.}
author: sparkctl
"""

RETURN = r"""
stage:
  description: >-
    {node, rank, tp, depth, ok, weights: {present, verified, files, bytes, problems},
    engram: {present, verified, files: [{name, layer, lo, hi, size, sha256}], problems}}
  returned: always
  type: dict
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


def weights_summary(model_dir, expected, depth):
    out = {"present": False, "verified": False, "files": 0, "bytes": 0, "problems": []}
    try:
        local = manifest.load(model_dir) if os.path.isdir(model_dir) else None
    except manifest.ManifestError as exc:
        out["problems"].append(str(exc))
        return out
    ref = expected or local
    if ref is None:
        out["problems"].append(f"{model_dir}: no manifest (not staged yet)")
        return out
    out["files"] = len(ref["files"])
    out["bytes"] = sum(e["size"] for e in ref["files"])
    problems = manifest.verify(model_dir, ref, full=depth == "full", local=local)
    out["problems"] = problems
    out["present"] = not any(p.endswith(": missing") for p in problems)
    out["verified"] = not problems
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", required=True),
            model_dir=dict(type="path", required=True),
            engram_dir=dict(type="path", required=True),
            rank=dict(type="int", required=True),
            tp=dict(type="int", required=True),
            what=dict(type="str", choices=["weights", "engram", "all", "none"], default="all"),
            depth=dict(type="str", choices=["quick", "full"], default="quick"),
            expected=dict(type="dict"),
            fail_on_problems=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    summary = {"node": p["node"], "rank": p["rank"], "tp": p["tp"], "depth": p["depth"]}
    problems = []
    if p["what"] in ("weights", "all"):
        summary["weights"] = weights_summary(p["model_dir"], p["expected"], p["depth"])
        # File problems are relative to the model directory; a missing or broken manifest names it.
        problems += [x if x.startswith(p["model_dir"]) else f"{p['model_dir']}/{x}"
                     for x in summary["weights"]["problems"]]
    if p["what"] in ("engram", "all"):
        res = dsv41en1.check_rank(p["model_dir"], p["engram_dir"], p["rank"], p["tp"], dsv41en1.LAYERS, p["depth"])
        summary["engram"] = {"present": res.present, "verified": res.verified, "files": res.files,
                             "problems": res.problems}
        problems += [f"{p['engram_dir']}/{x}" if not x.startswith("checkpoint:") else x for x in res.problems]
    summary["ok"] = not problems
    if problems and p["fail_on_problems"]:
        shown = "; ".join(problems[:8]) + (f" (+{len(problems) - 8} more)" if len(problems) > 8 else "")
        module.fail_json(msg=f"{p['node']}: {shown}", stage=summary)
    module.exit_json(changed=False, stage=summary)


if __name__ == "__main__":
    main()
