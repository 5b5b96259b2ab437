#!/usr/bin/python
"""This node's link of the staging chain: receive the checkpoint from upstream, serve downstream."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_stage_fanout
short_description: Fan the checkpoint out over the fabric, one chain link per node
description:
  - Runs on every node at once. Rank r pulls each file of C(expected) from rank r-1 over TCP on
    the fabric and serves rank r+1 while it receives (see sparkctl/stage/transfer.py for the
    protocol). Files arrive as C(.partial), are hashed in-stream and renamed only when the
    SHA-256 matches; an interrupted run resumes from the partial after the upstream confirms
    its prefix. Identical files listed in a sibling directory's manifest are hard-linked.
  - Writes live progress to C(progress_path) (bytes, files, state, pid) for the controller.
  - Check mode reports per file keep/adopt/link/fetch and moves nothing.
options:
  node: {type: str, required: true, description: Inventory name of this node.}
  model_dir: {type: path, required: true, description: Checkpoint directory on this node.}
  expected: {type: dict, required: true, description: The head's manifest.}
  peers: {type: list, elements: dict, required: true, description: "[{name, rank, address}] of every node."}
  port: {type: int, required: true, description: TCP port of the transfer agents.}
  progress_path: {type: path, default: "", description: Where to write progress JSON (empty = none).}
  bwlimit_mib_s: {type: float, default: 0, description: Receive rate cap in MiB/s (0 = none).}
  stall_timeout_s: {type: float, default: 120, description: Give up when a peer sends nothing for this long.}
  retries: {type: int, default: 3, description: Attempts per file.}
author: sparkctl
"""

import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.stage import fanout, transfer
# What the modules above import relatively, named here too: Mitogen ships with a module only the
# module_utils it names (tests/unit/test_strategy_mitogen.py keeps this list whole).
import ansible.module_utils.sparkctl.nodeside.manifests  # noqa: F401
import ansible.module_utils.sparkctl.nodeside.progress  # noqa: F401
import ansible.module_utils.sparkctl.stage.manifest  # noqa: F401
import ansible.module_utils.sparkctl.stage.writeback  # noqa: F401


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", required=True),
            model_dir=dict(type="path", required=True),
            expected=dict(type="dict", required=True),
            peers=dict(type="list", elements="dict", required=True),
            port=dict(type="int", required=True),
            progress_path=dict(type="path", default=""),
            bwlimit_mib_s=dict(type="float", default=0.0),
            stall_timeout_s=dict(type="float", default=120.0),
            retries=dict(type="int", default=3),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        route = fanout.route_for(p["peers"], p["port"], p["node"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if module.check_mode:
        todo = transfer.plan_local(p["model_dir"], p["expected"])
        module.exit_json(changed=any(a != "keep" for a in todo.values()), files=todo, route=route.as_dict())
    log = []
    try:
        res = transfer.run_node(
            p["node"], p["model_dir"], p["expected"], route.listen, route.upstream,
            progress_path=p["progress_path"] or "", bwlimit=p["bwlimit_mib_s"] * (1 << 20),
            stall_s=p["stall_timeout_s"], connect_wait_s=p["stall_timeout_s"], retries=p["retries"],
            log=log.append,
        )
    except transfer.TransferError as exc:
        module.fail_json(msg=f"{p['node']}: {exc}", log=log, route=route.as_dict())
    except Exception as exc:
        module.fail_json(msg=f"{p['node']}: {type(exc).__name__}: {exc}", log=log,
                         exception=traceback.format_exc(), route=route.as_dict())
    module.exit_json(route=route.as_dict(), log=log, **res.as_dict())


if __name__ == "__main__":
    main()
