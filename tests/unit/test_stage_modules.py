"""The node-side Ansible modules, run through Ansible itself (AnsiballZ packing, the module_utils
symlink to sparkctl/stage included), against temp dirs on this machine: check mode, refusals,
and the failure messages that name the node and the file."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import synth_checkpoint
from support.modrun import needs_ansible, run_module

pytestmark = needs_ansible


def module(name: str, args: dict[str, Any], check: bool = False) -> tuple[bool, dict[str, Any]]:
    """Run one spark_stage module on localhost; (failed, result)."""
    return run_module("spark_stage", name, args, check)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("m") / "model"
    synth_checkpoint.write_checkpoint(out, engram_rows=(3001, 2999), filler_mib=0.25)
    return out


def test_source_builds_the_manifest_and_lists_what_a_node_lacks(ckpt: Path, tmp_path: Path) -> None:
    failed, res = module("spark_stage_source", {"model_dir": str(ckpt)})
    assert not failed, res
    names = [e["path"] for e in res["manifest"]["files"]]
    assert "config.json" in names and "model.safetensors.index.json" in names
    assert [(e["layer"], e["rows"]) for e in res["engram"]] == [(1, 3001), (14, 2999)]
    assert (ckpt / ".sparkctl-manifest.json").exists()
    other = tmp_path / "node"
    other.mkdir()
    shutil.copy(ckpt / "config.json", other / "config.json")
    failed, diff = module("spark_stage_source", {"model_dir": str(other), "expected": res["manifest"]})
    assert not failed and set(diff["missing"]) == set(names)  # config.json unconfirmed: no manifest here
    # Another checkpoint's shard beside it is named, so the head's copy can be made exact.
    (other / "model-00001-of-00009.safetensors").write_bytes(b"x")
    failed, diff = module("spark_stage_source", {"model_dir": str(other), "expected": res["manifest"]})
    assert not failed and diff["extra"] == ["model-00001-of-00009.safetensors"]


def test_pack_check_mode_writes_nothing_then_packs_and_keeps(ckpt: Path, tmp_path: Path) -> None:
    out = tmp_path / "engram"
    args = {
        "node": "spark-2",
        "model_dir": str(ckpt),
        "engram_dir": str(out),
        "rank": 2,
        "tp": 4,
        "margin_gib": 0,
    }
    failed, res = module("spark_stage_pack", args, check=True)
    assert not failed and res["changed"] and not out.exists()
    failed, res = module("spark_stage_pack", args)
    assert not failed and res["changed"] and res["verified"]
    assert sorted(p.name for p in out.iterdir()) == [
        "engram-l1-r2of4.bin",
        "engram-l14-r2of4.bin",
        "manifest-r2of4.json",
    ]
    failed, res = module("spark_stage_pack", args)
    assert not failed and not res["changed"]


def test_pack_refuses_leftovers_naming_them(ckpt: Path, tmp_path: Path) -> None:
    (tmp_path / "engram-l1-r0of4.bin.partial").write_bytes(b"x")
    args = {
        "node": "spark-0",
        "model_dir": str(ckpt),
        "engram_dir": str(tmp_path),
        "rank": 0,
        "tp": 4,
        "margin_gib": 0,
    }
    failed, res = module("spark_stage_pack", args)
    assert failed and res["msg"].startswith("spark-0: ") and "engram-l1-r0of4.bin.partial" in res["msg"]
    failed, res = module("spark_stage_pack", {**args, "force": True})
    assert not failed and res["verified"]


def test_preflight_names_node_needed_and_free(ckpt: Path, tmp_path: Path) -> None:
    _, src = module("spark_stage_source", {"model_dir": str(ckpt)})
    args = {
        "node": "spark-3",
        "model_dir": str(tmp_path / "model"),
        "engram_dir": str(tmp_path / "engram"),
        "expected": src["manifest"],
        "engram": src["engram"],
        "rank": 3,
        "tp": 4,
    }
    failed, res = module("spark_stage_preflight", {**args, "margin_gib": 0})
    assert not failed and res["checkpoint_bytes"] == src["manifest"]["total_bytes"]
    failed, res = module("spark_stage_preflight", {**args, "margin_gib": 1 << 30})
    assert failed and res["msg"].startswith("spark-3: not enough space") and "GiB free" in res["msg"]
    assert not (tmp_path / "model").exists()


def test_verify_names_a_flipped_byte_and_reports_a_summary(ckpt: Path, tmp_path: Path) -> None:
    node = tmp_path / "model"
    shutil.copytree(ckpt, node)
    engram = tmp_path / "engram"
    failed, res = module(
        "spark_stage_pack",
        {"model_dir": str(node), "engram_dir": str(engram), "rank": 0, "tp": 4, "margin_gib": 0},
    )
    assert not failed, res
    base = {"node": "spark-1", "model_dir": str(node), "engram_dir": str(engram), "rank": 0, "tp": 4}
    (node / ".sparkctl-manifest.json").unlink(missing_ok=True)  # whatever an earlier test left
    failed, res = module("spark_stage_verify", {**base, "depth": "full"})
    assert failed and res["msg"] == f"spark-1: {node}: no manifest (not staged yet)", res["msg"]
    failed, res = module("spark_stage_source", {"model_dir": str(node)})  # staging writes the manifest
    assert not failed, res
    failed, res = module("spark_stage_verify", {**base, "depth": "full"})
    assert not failed and res["stage"]["ok"] and res["stage"]["engram"]["verified"], res
    shard = node / "model-00001-of-00004.safetensors"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0x40
    shard.write_bytes(bytes(data))
    failed, res = module("spark_stage_verify", {**base, "depth": "full", "what": "weights"}, check=True)
    assert (
        failed
        and res["msg"].startswith("spark-1: ")
        and "model-00001-of-00004.safetensors: SHA-256" in res["msg"]
    )
    failed, res = module("spark_stage_verify", {**base, "fail_on_problems": False})
    assert not failed and res["stage"]["weights"]["verified"] is False and not res["changed"]


STAGE_ROLE = Path(__file__).resolve().parents[2] / "roles" / "spark_stage"
LAYER_MODULES = ("spark_stage_source", "spark_stage_pack", "spark_stage_verify")


def test_the_engram_layers_are_the_formats_and_no_setting_changes_them(ckpt: Path, tmp_path: Path) -> None:
    """`stage`'s fast path checks dsv41en1.LAYERS; a role variable or module option that moved the
    playbook to other layers would let the two disagree ("nothing to stage" with a layer missing)."""
    defaults = yaml.safe_load((STAGE_ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((STAGE_ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert not [k for k in [*defaults, *options] if "layer" in k]
    for name in LAYER_MODULES:
        src = (STAGE_ROLE / "library" / f"{name}.py").read_text()
        assert not re.search(r"^\s*layers\s*[:=]", src, re.M), name  # neither documented nor in the spec
    failed, res = module("spark_stage_verify", {"node": "spark-1", "model_dir": str(ckpt),
                                                "engram_dir": str(tmp_path / "e"), "rank": 0, "tp": 4,
                                                "layers": [1, 14, 20]})
    assert failed and "layers" in res["msg"] and "Unsupported parameters" in res["msg"], res
