#!/usr/bin/python
"""Pack this rank's Engram rows into DSV41EN1 files from the node's local checkpoint."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_stage_pack
short_description: Pack and verify this rank's DSV41EN1 Engram shards
description:
  - Reads the safetensors headers of the local checkpoint, takes rows
    [rows*rank//tp, rows*(rank+1)//tp) of each Engram layer and writes
    C(engram-l{layer}-r{rank}of{tp}.bin) plus C(manifest-r{rank}of{tp}.json) (format and
    verification in sparkctl/stage/dsv41en1.py). Each file is written as C(.partial), hashed
    while written, checked (length, header, 1,037 rows byte-equal to the source), fsynced and
    renamed.
  - Files that match their manifest and the checkpoint identity are kept (changed=false).
    Unmanifested files of this rank/TP and C(.partial) leftovers are refused unless C(force).
  - Check mode reports what would be packed.
options:
  node: {type: str, default: "", description: Inventory name (for messages).}
  model_dir: {type: path, required: true, description: Local checkpoint directory.}
  engram_dir: {type: path, required: true, description: Output directory.}
  rank: {type: int, required: true, description: This node's rank.}
  tp: {type: int, required: true, description: Tensor-parallel size.}
  force: {type: bool, default: false, description: Delete leftovers instead of refusing.}
  margin_gib: {type: float, default: 8, description: Free space that must remain afterwards.}
  block_rows: {type: int, default: 8192, description: Rows per I/O block (8192 rows = 2.06 MiB).}
  progress_path: {type: path, default: "", description: Where to write progress JSON for the controller's bars (empty = none).}
author: sparkctl
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.nodeside import progress as stage_progress
from ansible.module_utils.sparkctl.stage import dsv41en1
# What the modules above import relatively, named here too: Mitogen ships with a module only the
# module_utils it names (tests/unit/test_strategy_mitogen.py keeps this list whole).
import ansible.module_utils.sparkctl.nodeside.manifests  # noqa: F401
import ansible.module_utils.sparkctl.stage.manifest  # noqa: F401
import ansible.module_utils.sparkctl.stage.safetensors  # noqa: F401
import ansible.module_utils.sparkctl.stage.writeback  # noqa: F401


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", default=""),
            model_dir=dict(type="path", required=True),
            engram_dir=dict(type="path", required=True),
            rank=dict(type="int", required=True),
            tp=dict(type="int", required=True),
            force=dict(type="bool", default=False),
            margin_gib=dict(type="float", default=8.0),
            block_rows=dict(type="int", default=dsv41en1.DEFAULT_BLOCK_ROWS),
            progress_path=dict(type="path", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    progress = ticker = None
    if p["progress_path"] and not module.check_mode:
        rows = 0
        try:
            for src in dsv41en1.locate(p["model_dir"], dsv41en1.LAYERS):
                lo, hi = dsv41en1.row_range(src.rows, p["rank"], p["tp"])
                rows += hi - lo
        except (dsv41en1.FormatError, OSError, ValueError):
            rows = 0
        progress = stage_progress.Progress(
            p["node"], step="pack", bytes_total=rows * dsv41en1.ROW_BYTES, state="packing",
            path=p["progress_path"], count_unit="rows", count_total=rows,
        )
        progress.current = f"rank {p['rank']} of {p['tp']}"
        progress.write()
        ticker = stage_progress.Ticker(progress)
        ticker.start()

    def packed(n):
        # every block the packer writes is whole rows of ROW_BYTES (the file header is not counted)
        progress.add(done=n, count=n // dsv41en1.ROW_BYTES)

    try:
        res = dsv41en1.pack_rank(
            p["model_dir"], p["engram_dir"], p["rank"], p["tp"], dsv41en1.LAYERS, force=p["force"],
            check_mode=module.check_mode, margin_bytes=int(p["margin_gib"] * (1 << 30)), block_rows=p["block_rows"],
            on_progress=packed if progress is not None else None,
        )
    except (dsv41en1.FormatError, OSError, ValueError) as exc:
        if ticker is not None:
            ticker.finish()
        if progress is not None:
            progress.set(state="failed", error=str(exc))
        module.fail_json(msg=f"{p['node']}: {exc}")
    if ticker is not None:
        ticker.finish()
    if progress is not None:
        # kept files count as done: the rank holds every row
        progress.set(state="done", bytes_done=progress.bytes_total, count_done=progress.count_total)
    out = res.as_dict()
    if res.seconds and res.bytes_written:
        out["rate_mib_s"] = round(res.bytes_written / (1 << 20) / res.seconds, 1)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
