"""The simulated rank checks the serving kit as the real launcher does, and prints the kit's markers.

The packed Engram files here come from sparkctl's own packer (``pack_rank`` over a synthetic
checkpoint), so these tests also prove that the simulator, which imports nothing of sparkctl, reads
the shards the product writes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import synth_checkpoint

from sparkctl.profiles import load_profile
from sparkctl.stage import dsv41en1
from sparkctl_sim import SIM_TAG
from sparkctl_sim.config import ArgError, ServerConfig, parse_argv
from sparkctl_sim.kit import (
    KitCheckFailed,
    KitReport,
    check_build_products,
    check_kit,
    engram_markers,
    moe_layout_marker,
    post_result_markers,
    roce_markers,
)
from sparkctl_sim.knobs import load_knobs
from sparkctl_sim.rank import main as sim_main

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = {
    "python/sglang/srt/models/deepseek_v4.py": b"# patched model\n",
    "python/sglang/srt/distributed/device_communicators/pynccl.py": b"# patched pynccl\n",
    "python/sglang/kernels/ops/attention/dsv4/indexer_postprocess.py": b"# new file\n",
}
MARKERS = ("NVME_ENGRAM_READY", "ROCE_TP4_READY", "ROCE_TP4_ROUTE", "DSPARK_MOE_LAYOUT")
# The kit's stage-time build products (R4 scripts/cluster.py stage()): a library, its record, and
# the extracted b12x sources with their manifest.
LIBRARY = b"\x7fELF stand-in for the compiled row store\n"
B12X = {"README.md": b"b12x\n", "b12x/moe.py": b"BLOCK_M = 128\n"}
ANOTHER_BUILD, CHANGED = b"another build\n", b"changed\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ckpt")
    return synth_checkpoint.write_checkpoint(out, engram_rows=(503, 499), filler_shards=1, filler_mib=0.05)


@dataclass
class Kit:
    """A mounted kit, its overlay targets and packed shards, as one rank's container would see them."""

    root: Path
    kit_dir: Path
    target: Path
    packed: Path
    model: str
    env: dict[str, str]

    def argv(self, rank: int = 1, tp: int = 4, model: str | None = None) -> list[str]:
        argv = ["serve", "--model-path", model or self.model, "--tp-size", str(tp), "--ep-size", str(tp)]
        argv += ["--nnodes", str(tp), "--node-rank", str(rank), "--speculative-algorithm", "DSPARK"]
        if tp > 1:
            argv += ["--dist-init-addr", "127.0.0.1:1"]
        return argv

    def cfg(self, **kw: Any) -> ServerConfig:
        return parse_argv(self.argv(**kw))

    def check(self, **kw: Any) -> KitReport:
        return check_kit(load_knobs(self.env), self.cfg(**kw), self.env)

    def problems(self, **kw: Any) -> list[str]:
        with pytest.raises(KitCheckFailed) as err:
            self.check(**kw)
        return err.value.problems


def make_kit(tmp: Path, ckpt: dict[str, Any], ranks: tuple[int, ...] = (1,), tp: int = 4) -> Kit:
    kit_dir, target, packed = tmp / "opt-sglang4", tmp / "sgl-workspace", tmp / "engram"
    manifest = {}
    for rel, body in OVERLAYS.items():
        src = kit_dir / "patches" / "source" / rel
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_bytes(body)
        dst = target / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(body)  # what the read-only bind shows at the target
        manifest[rel] = {"before_sha256": None, "after_sha256": sha(body)}
    (kit_dir / "patches" / "manifest.json").write_text(json.dumps(manifest, indent=2))
    (kit_dir / "adapter").mkdir()
    (kit_dir / "adapter" / "sitecustomize.py").write_text("# the kit's import hooks\n")
    (kit_dir / "adapter" / "librow_store.so").write_bytes(LIBRARY)
    (kit_dir / "row-store-build.json").write_text(
        json.dumps({"row_store_library_sha256": sha(LIBRARY), "image": "sha256:" + "0" * 64})
    )
    (kit_dir / "vendor").mkdir()
    b12x_manifest = {name: sha(body) for name, body in B12X.items()}
    (kit_dir / "vendor" / "b12x-source-manifest.json").write_text(json.dumps(b12x_manifest))
    for name, body in B12X.items():
        (kit_dir / "b12x" / name).parent.mkdir(parents=True, exist_ok=True)
        (kit_dir / "b12x" / name).write_bytes(body)
    for rank in ranks:
        res = dsv41en1.pack_rank(ckpt["dir"], str(packed), rank, tp, margin_bytes=0)
        assert res.verified, res.problems
    env = {
        "SPARKCTL_SIM_KIT_DIR": str(kit_dir),
        "SPARKCTL_SIM_KIT_MANIFEST": "patches/manifest.json",
        "SPARKCTL_SIM_KIT_TARGET": str(target),
        "SPARKCTL_SIM_KIT_ADAPTERS": "adapter",
        "PYTHONPATH": f"{kit_dir}/adapter:{kit_dir}/runtime",
        "DSV41_PACKED_DIR": str(packed),
        "SGLANG4_ROCE_ALLREDUCE": "1",
    }
    return Kit(tmp, kit_dir, target, packed, ckpt["dir"], env)


@pytest.fixture
def kit(tmp_path: Path, ckpt: dict[str, Any]) -> Kit:
    return make_kit(tmp_path, ckpt)


def test_a_good_kit_passes_and_the_summary_lists_what_was_checked(kit: Kit) -> None:
    report = kit.check()
    assert report.overlays == sorted(OVERLAYS)
    assert [s.name for s in report.shards] == ["engram-l1-r1of4.bin", "engram-l14-r1of4.bin"]
    line = report.summary()
    for part in (
        str(kit.kit_dir),
        f"{kit.kit_dir}/patches/manifest.json (3 overlays at {kit.target}",
        f"{kit.kit_dir}/adapter",
        "manifest-r1of4.json + engram-l1-r1of4.bin, engram-l14-r1of4.bin",
        f"{kit.model}/config.json",
        "simulated",
    ):
        assert part in line
    # the gates count marker lines: the summary must not be one of them
    assert not any(m in line for m in MARKERS)


def _tamper(path: Path) -> bytes:
    data = path.read_bytes() + b"# one more byte\n"
    path.write_bytes(data)
    return data


MODEL_REL = "python/sglang/srt/models/deepseek_v4.py"


def _set_env(key: str, value: str | None) -> Callable[[Kit], None]:
    def change(k: Kit) -> None:
        if value is None:
            k.env.pop(key, None)
        else:
            k.env[key] = value

    return change


def _write(rel: str, text: str, base: str = "kit_dir") -> Callable[[Kit], None]:
    def change(k: Kit) -> None:
        path = getattr(k, base) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    return change


def _header_of_layer(layer: int) -> Callable[[Kit], None]:
    def change(k: Kit) -> None:
        path = k.packed / "engram-l14-r1of4.bin"
        with open(path, "r+b") as fh:
            fh.seek(8)
            fh.write(struct.pack("<Q", layer))

    return change


def _mangle_packed_manifest(k: Kit) -> None:
    path = k.packed / "manifest-r1of4.json"
    doc = json.loads(path.read_text())
    for entry in doc["files"]:
        if entry["layer"] == 1:
            entry["name"] = [entry["name"]]
        else:
            del entry["lo"]
    path.write_text(json.dumps(doc))


# (id, change, expected text in the problem line; {kit}, {target}, {packed}, {model} filled in)
FAILURES: list[tuple[str, Callable[[Kit], None], str]] = [
    (
        "kit-dir-missing",
        _set_env("SPARKCTL_SIM_KIT_DIR", "/nonexistent/opt/sglang4"),
        "kit directory /nonexistent/opt/sglang4 is missing (SPARKCTL_SIM_KIT_DIR)",
    ),
    (
        "manifest-missing",
        lambda k: (k.kit_dir / "patches" / "manifest.json").unlink(),
        "kit manifest {kit}/patches/manifest.json: unreadable (No such file or directory)",
    ),
    (
        "manifest-not-json",
        _write("patches/manifest.json", "{"),
        "kit manifest {kit}/patches/manifest.json: not JSON",
    ),
    (
        "manifest-entry-without-digest",
        _write("patches/manifest.json", json.dumps({MODEL_REL: {"before_sha256": None}})),
        f"overlay {MODEL_REL} has no after_sha256",
    ),
    (
        "manifest-escapes-target",
        _write("patches/manifest.json", json.dumps({"../etc/passwd": {"after_sha256": "0" * 64}})),
        "overlay '../etc/passwd' is not a path inside the target",
    ),
    (
        "overlay-missing",
        lambda k: (k.target / MODEL_REL).unlink(),
        f"overlay {MODEL_REL}: {{target}}/{MODEL_REL} is missing (expected after_sha256 "
        f"{sha(OVERLAYS[MODEL_REL])})",
    ),
    (
        "adapter-not-on-pythonpath",
        _set_env("PYTHONPATH", "/somewhere/else"),
        "adapter {kit}/adapter: not on PYTHONPATH (PYTHONPATH=/somewhere/else)",
    ),
    (
        "adapter-dir-missing",
        _set_env("SPARKCTL_SIM_KIT_ADAPTERS", "adapter,runtime"),
        "adapter {kit}/runtime: no such directory in the kit",
    ),
    ("packed-dir-unset", _set_env("DSV41_PACKED_DIR", None), "packed Engram: DSV41_PACKED_DIR is not set"),
    (
        "packed-manifest-missing",
        lambda k: (k.packed / "manifest-r1of4.json").unlink(),
        "packed Engram: manifest-r1of4.json missing in {packed} (DSV41_PACKED_DIR)",
    ),
    (
        "packed-manifest-entry-unnamed",
        _mangle_packed_manifest,
        "packed Engram: engram-l1-r1of4.bin not listed in {packed}/manifest-r1of4.json",
    ),
    (
        "packed-manifest-entry-incomplete",
        _mangle_packed_manifest,
        "packed Engram: {packed}/manifest-r1of4.json: entry engram-l14-r1of4.bin lacks lo/hi/rows/size",
    ),
    (
        "packed-file-missing",
        lambda k: (k.packed / "engram-l1-r1of4.bin").unlink(),
        "packed Engram: {packed}/engram-l1-r1of4.bin is missing (listed in manifest-r1of4.json)",
    ),
    (
        "packed-file-truncated",
        lambda k: os.truncate(k.packed / "engram-l14-r1of4.bin", 4096),
        "packed Engram: {packed}/engram-l14-r1of4.bin is 4096 B, manifest-r1of4.json records ",
    ),
    (
        "packed-header-of-another-layer",
        _header_of_layer(1),
        "packed Engram: {packed}/engram-l14-r1of4.bin header does not match manifest-r1of4.json (layer 14",
    ),
    (
        "model-config-missing",
        lambda k: None,  # see the test: the model path points at a directory without config.json
        "model config {model}/config.json: unreadable (No such file or directory)",
    ),
]


@pytest.mark.parametrize("change,expected", [(c, e) for _, c, e in FAILURES], ids=[i for i, _, _ in FAILURES])
def test_each_failure_is_named(kit: Kit, change: Callable[[Kit], None], expected: str) -> None:
    change(kit)
    model = str(kit.root / "no-model") if "model config" in expected else kit.model
    fill = {"kit": kit.kit_dir, "target": kit.target, "packed": kit.packed, "model": model}
    problems = kit.problems(model=model)
    assert any(expected.format(**fill) in p for p in problems), problems


def test_a_tampered_overlay_names_path_and_both_digests(kit: Kit) -> None:
    data = _tamper(kit.target / MODEL_REL)
    problems = kit.problems()
    assert problems == [
        f"overlay {MODEL_REL}: {kit.target}/{MODEL_REL} has sha256 {sha(data)}, "
        f"expected after_sha256 {sha(OVERLAYS[MODEL_REL])}"
    ]


def test_another_ranks_shards_do_not_count(kit: Kit) -> None:
    problems = kit.problems(rank=2)
    assert problems == [f"packed Engram: manifest-r2of4.json missing in {kit.packed} (DSV41_PACKED_DIR)"]
    (kit.packed / "manifest-r1of4.json").rename(kit.packed / "manifest-r2of4.json")
    assert "records rank 1 of 4, not rank 2 of 4" in kit.problems(rank=2)[0]


def test_several_problems_are_reported_together(kit: Kit) -> None:
    _tamper(kit.target / MODEL_REL)
    kit.env["PYTHONPATH"] = ""
    (kit.packed / "engram-l1-r1of4.bin").unlink()
    problems = kit.problems()
    assert len(problems) == 3
    assert [p.split(" ")[0] for p in problems] == ["overlay", "adapter", "packed"]


# -- the build products the Engram backend imports


def _json_at(rel: str, doc: object) -> Callable[[Kit], None]:
    def change(k: Kit) -> None:
        (k.kit_dir / rel).write_text(json.dumps(doc))

    return change


# (id, change, expected problem line; {kit} filled in)
BUILD_FAILURES: list[tuple[str, Callable[[Kit], None], str]] = [
    (
        "library-missing",
        lambda k: (k.kit_dir / "adapter" / "librow_store.so").unlink(),
        "row store library {kit}/adapter/librow_store.so is missing ({kit}/row-store-build.json records "
        f"sha256 {sha(LIBRARY)})",
    ),
    (
        "library-of-another-build",
        lambda k: (k.kit_dir / "adapter" / "librow_store.so").write_bytes(ANOTHER_BUILD),
        f"row store library {{kit}}/adapter/librow_store.so has sha256 {sha(ANOTHER_BUILD)}, "
        f"{{kit}}/row-store-build.json records {sha(LIBRARY)}",
    ),
    (
        "record-missing",
        lambda k: (k.kit_dir / "row-store-build.json").unlink(),
        "row store build record {kit}/row-store-build.json: unreadable (No such file or directory)",
    ),
    (
        "record-without-digest",
        _json_at("row-store-build.json", {"image": "x"}),
        "row store build record {kit}/row-store-build.json: no row_store_library_sha256",
    ),
    (
        "b12x-file-missing",
        lambda k: (k.kit_dir / "b12x" / "b12x" / "moe.py").unlink(),
        "b12x source {kit}/b12x/b12x/moe.py is missing ({kit}/vendor/b12x-source-manifest.json records "
        f"sha256 {sha(B12X['b12x/moe.py'])})",
    ),
    (
        "b12x-file-changed",
        lambda k: (k.kit_dir / "b12x" / "README.md").write_bytes(CHANGED),
        f"b12x source {{kit}}/b12x/README.md has sha256 {sha(CHANGED)}, "
        f"{{kit}}/vendor/b12x-source-manifest.json records {sha(B12X['README.md'])}",
    ),
    (
        "b12x-never-extracted",
        lambda k: shutil.rmtree(k.kit_dir / "b12x"),
        "b12x source {kit}/b12x/README.md is missing",
    ),
    (
        "b12x-manifest-missing",
        lambda k: (k.kit_dir / "vendor" / "b12x-source-manifest.json").unlink(),
        "b12x source manifest {kit}/vendor/b12x-source-manifest.json: unreadable (No such file or directory)",
    ),
    (
        "b12x-manifest-escapes",
        _json_at("vendor/b12x-source-manifest.json", {"../row-store-build.json": "0" * 64}),
        "b12x source manifest {kit}/vendor/b12x-source-manifest.json: '../row-store-build.json' is not "
        "a path inside b12x/",
    ),
]


def test_good_build_products_pass_and_the_summary_names_them(kit: Kit) -> None:
    summary, problems = check_build_products(str(kit.kit_dir))
    assert problems == []
    assert f"{kit.kit_dir}/adapter/librow_store.so matches row-store-build.json" in summary
    assert f"2 b12x sources in {kit.kit_dir}/b12x match" in summary
    assert not any(m in summary for m in MARKERS)


@pytest.mark.parametrize("change,expected", [(c, e) for _, c, e in BUILD_FAILURES],
                         ids=[i for i, _, _ in BUILD_FAILURES])
def test_each_missing_or_wrong_build_product_is_named(kit: Kit, change: Callable[[Kit], None],
                                                      expected: str) -> None:
    change(kit)
    _summary, problems = check_build_products(str(kit.kit_dir))
    assert any(p.startswith(expected.format(kit=kit.kit_dir)) for p in problems), problems
    # the launcher's own checks are not what failed
    kit.check()


# -- markers, judged as the publisher's own launcher judges them (R4 scripts/cluster.py layout())


def _records(lines: list[str], marker: str) -> list[dict[str, Any]]:
    return [json.loads(line.split(marker + " ", 1)[1]) for line in lines if marker + " " in line]


def test_markers_have_the_published_shapes(kit: Kit) -> None:
    cfg = kit.cfg(rank=1)
    report = kit.check(rank=1)
    lines = roce_markers(cfg, kit.env) + engram_markers(report, cfg, kit.env) + [moe_layout_marker(cfg)]
    engram = _records(lines, "NVME_ENGRAM_READY")
    assert len(engram) == 2 and {x["layer"] for x in engram} == {1, 14}
    for record in engram:
        assert (record["rank"], record["tp_size"]) == (1, 4)
        assert record["packed"] and record["empty_weight_parameters"]
        assert record["cache_bytes"] == 0 and record["scale_bytes"] == 0
    roce = _records(lines, "ROCE_TP4_READY")
    assert roce == [{"rank": 1, "world_size": 4}]
    assert sum(line.startswith("ROCE_TP4_ROUTE rank=1 dtype=") for line in lines) == 1
    layout = _records(lines, "DSPARK_MOE_LAYOUT")[-1]
    for role, count, experts in [("target", 40, 96), ("draft", 3, 32)]:
        expected = {
            "method": "Mxfp4FlashinferCutlassMoEMethod",
            "local_experts": experts,
            "intermediate": 2304,
            "ep_size": 4,
            "ep_rank": 1,
            "tp_size": 1,
            "tp_rank": 0,
            "w13_shape": [experts, 4608, 2560],
            "w2_shape": [experts, 5120, 1152],
        }
        assert len(layout[role]) == count and all(v == expected for v in layout[role].values())


def test_roce_markers_follow_the_overlay_switch(kit: Kit) -> None:
    cfg = kit.cfg()
    assert roce_markers(cfg, {**kit.env, "SGLANG4_ROCE_ALLREDUCE": "0"}) == []
    assert len(roce_markers(cfg, {k: v for k, v in kit.env.items() if k != "SGLANG4_ROCE_ALLREDUCE"})) == 2


# -- SG17: resident Engram and the eight-rank RoCE route (R8 sglang/experiments/sg17-rocenante)


def _resident(kit: Kit, **env: str | None) -> Kit:
    """The kit as an sg17-tp8 rank sees it: the profile's switches, no packed directory."""
    out = {k: v for k, v in kit.env.items() if k not in ("DSV41_PACKED_DIR", "SGLANG4_ROCE_ALLREDUCE")}
    prof = load_profile("sg17-tp8").env
    out |= {k: prof[k] for k in ("SGLANG8_RESIDENT_PROFILE", "SGLANG8_ROCE_ALLREDUCE",
                                 "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE")}
    for key, value in env.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return Kit(kit.root, kit.kit_dir, kit.target, kit.packed, kit.model, out)


def test_a_resident_engram_rank_needs_no_packed_directory(kit: Kit) -> None:
    # SG17's launcher (sglang/runtime/launch.py) reads no packed directory: sg17-tp8 sets none.
    assert "DSV41_PACKED_DIR" not in load_profile("sg17-tp8").env
    sg17 = _resident(kit)
    report = sg17.check(rank=7, tp=8)
    assert (report.engram, report.packed_dir, report.shards) == ("resident", "", [])
    line = report.summary()
    assert "resident Engram (SGLANG8_RESIDENT_PROFILE=1): tp_size 8" in line and "packed" not in line.replace(
        "no packed directory", "")
    assert report.as_dict()["engram"] == "resident"
    # A packed rank without its directory is still refused.
    packed = _resident(kit, SGLANG8_RESIDENT_PROFILE="0", SGLANG8_ROCE_ALLREDUCE="0")
    assert packed.problems(rank=7, tp=8) == ["packed Engram: DSV41_PACKED_DIR is not set"]


def test_resident_engram_refuses_what_the_hook_set_refuses(kit: Kit) -> None:
    # resident_engram.py: "SGLang8 requires TP8 and native device-resident Engram shards".
    problems = _resident(kit, SGLANG8_ROCE_ALLREDUCE="0").problems(rank=1, tp=4)
    assert problems == ["resident Engram: SGLANG8_RESIDENT_PROFILE=1 needs --tp-size 8 (owned-row shards "
                        "of the eight-rank group), this rank has 4"]
    problems = _resident(kit, SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE="1").problems(rank=1, tp=8)
    assert problems == ["resident Engram: SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1 puts the tables in a host "
                        "table; SGLANG8_RESIDENT_PROFILE=1 needs them device-resident (set it to 0)"]


def test_sg17_roce_markers_are_the_ones_its_gates_count(kit: Kit) -> None:
    sg17 = _resident(kit)
    cfg = sg17.cfg(rank=5, tp=8)
    report = sg17.check(rank=5, tp=8)
    lines = (roce_markers(cfg, sg17.env) + engram_markers(report, cfg, sg17.env) + [moe_layout_marker(cfg)]
             + post_result_markers(cfg, sg17.env))
    assert _records(lines, "ROCE_TP8_READY") == [{"rank": 5, "world_size": 8}]
    assert sum(line.startswith("ROCE_TP8_ROUTE rank=5 dtype=") for line in lines) == 1
    assert _records(lines, "ROCE_POST_RESULT_HEALTH") == [{"rank": 5, "world_size": 8, "healthy": True}]
    assert not any(m in line for line in lines for m in ("ROCE_TP4", "NVME_ENGRAM_READY"))
    # Every with-kit marker of sg17-tp8's gates once per rank.
    with_kit = [m.pattern for m in load_profile("sg17-tp8").gates.log_markers if m.required == "with-kit"]
    assert with_kit and all(sum(bool(re.search(p, line)) for line in lines) == 1 for p in with_kit)
    # R4's switch alone keeps R4's markers; SG17's overlay outside an eight-rank group is refused.
    r4 = {k: v for k, v in kit.env.items()}
    assert post_result_markers(kit.cfg(), r4) == []
    assert _records(roce_markers(kit.cfg(), r4), "ROCE_TP4_READY") == [{"rank": 1, "world_size": 4}]
    problems = _resident(kit, SGLANG8_RESIDENT_PROFILE=None, DSV41_PACKED_DIR=str(kit.packed)).problems(tp=4)
    assert problems == ["RoCEnante: SGLANG8_ROCE_ALLREDUCE=1 needs the eight-rank TP group, this rank's "
                        "tp_size is 4 (SG17's overlay raises at group creation)"]


def test_kit_knobs_are_checked_and_listed_in_sim_help(capsys: pytest.CaptureFixture[str]) -> None:
    knobs = load_knobs(
        {"SPARKCTL_SIM_KIT_DIR": "/opt/sglang4", "SPARKCTL_SIM_KIT_ADAPTERS": "adapter, runtime"}
    )
    assert (knobs.kit_dir, knobs.kit_manifest, knobs.kit_target) == (
        "/opt/sglang4",
        "patches/manifest.json",
        "/sgl-workspace/sglang",
    )
    assert knobs.kit_adapters == ("adapter", "runtime")
    assert load_knobs({}).kit_dir is None
    for env, message in [
        (
            {"SPARKCTL_SIM_KIT_DIR": "opt/sglang4"},
            "SPARKCTL_SIM_KIT_DIR='opt/sglang4' must be an absolute path",
        ),
        (
            {"SPARKCTL_SIM_KIT_MANIFEST": "/etc/manifest.json"},
            "SPARKCTL_SIM_KIT_MANIFEST='/etc/manifest.json'",
        ),
        (
            {"SPARKCTL_SIM_KIT_ADAPTERS": "adapter,../x"},
            "SPARKCTL_SIM_KIT_ADAPTERS='../x' must be a path inside",
        ),
        ({"SPARKCTL_SIM_KIT_TARGET": "sgl"}, "SPARKCTL_SIM_KIT_TARGET='sgl' must be an absolute path"),
    ]:
        with pytest.raises(ArgError, match=re.escape(message)):
            load_knobs(env)
    assert sim_main(["--sim-help"]) == 0
    text = capsys.readouterr().out
    for name in ("SPARKCTL_SIM_KIT_DIR", "SPARKCTL_SIM_KIT_MANIFEST", "SPARKCTL_SIM_KIT_TARGET"):
        assert name in text
    assert "SPARKCTL_SIM_KIT_ADAPTERS" in text and "simulated" in text


# -- the rank process


def _run_rank(kit: Kit, env: dict[str, str], tmp: Path, timeout: float = 20) -> tuple[int | None, str]:
    """One single-node rank (tp 1) until it is ready or exits; returns (exit status or None, log)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKCTL_SIM_", "SGL", "DSV41_"))}
    full.update(env, SPARKCTL_SIM_BOOT_DELAY_S="0.1")
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    log_path = tmp / "rank.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-S", "-m", "sparkctl_sim", *kit.argv(rank=0, tp=1), "--port", "0"],
            stdout=log, stderr=subprocess.STDOUT, env=full, cwd=tmp,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None or "ready to roll" in log_path.read_text():
                break
            time.sleep(0.05)
        return proc.poll(), log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)


def _gate_counts(log: str) -> dict[str, int]:
    """Lines per marker pattern of the kit profiles' gates, counted as the node-side probe counts."""
    patterns = {m.pattern for name in ("lab", "r4-nvme") for m in load_profile(name).gates.log_markers}
    return {p: sum(1 for line in log.splitlines() if re.search(p, line)) for p in patterns}


@pytest.fixture
def kit1(tmp_path: Path, ckpt: dict[str, Any]) -> Kit:
    return make_kit(tmp_path, ckpt, ranks=(0,), tp=1)


def test_a_rank_with_a_good_kit_logs_the_markers_the_gates_count(kit1: Kit, tmp_path: Path) -> None:
    code, log = _run_rank(kit1, kit1.env, tmp_path)
    assert code is None, log  # still serving
    counts = _gate_counts(log)
    assert counts["NVME_ENGRAM_READY"] == 2 and counts["ROCE_TP4_READY"] == 1, counts
    assert counts["DSPARK_MOE_LAYOUT"] == 1 and counts["The server is fired up and ready to roll!"] == 1
    assert "ROCE_TP4_ROUTE rank=0 dtype=" in log
    assert "simulated kit launcher checks passed" in log
    assert f"{kit1.kit_dir}/adapter/librow_store.so matches row-store-build.json" in log
    # the log lines themselves parse as R4's layout() parses them (JSON to the end of the line)
    layout = _records(log.splitlines(), "DSPARK_MOE_LAYOUT")[-1]
    assert len(layout["target"]) == 40 and len(layout["draft"]) == 3
    engram = _records(log.splitlines(), "NVME_ENGRAM_READY")
    assert {x["layer"] for x in engram} == {1, 14}
    assert all(x["rank"] == 0 and x["tp_size"] == 1 for x in engram)
    assert _records(log.splitlines(), "ROCE_TP4_READY") == [{"rank": 0, "world_size": 1}]
    for line in log.splitlines():
        assert SIM_TAG in line  # every line still says it comes from the simulator
    # the markers come while the rank "loads", before it says it is ready
    assert log.index("NVME_ENGRAM_READY") < log.index("Load weight end") < log.index("ready to roll")


def test_a_rank_with_a_tampered_overlay_exits_1_without_serving(kit1: Kit, tmp_path: Path) -> None:
    data = _tamper(kit1.target / MODEL_REL)
    code, log = _run_rank(kit1, kit1.env, tmp_path)
    assert code == 1, log
    errors = [line for line in log.splitlines() if "ERROR" in line]
    assert len(errors) == 1
    assert f"{kit1.target}/{MODEL_REL} has sha256 {sha(data)}" in errors[0]
    assert f"expected after_sha256 {sha(OVERLAYS[MODEL_REL])}" in errors[0]
    assert "HTTP on" not in log and not any(m in log for m in MARKERS)


def test_a_rank_without_its_build_products_exits_1_naming_each_file(kit1: Kit, tmp_path: Path) -> None:
    (kit1.kit_dir / "adapter" / "librow_store.so").unlink()
    (kit1.kit_dir / "b12x" / "README.md").write_bytes(CHANGED)
    code, log = _run_rank(kit1, kit1.env, tmp_path)
    assert code == 1, log
    errors = [line for line in log.splitlines() if "ERROR" in line]
    assert len(errors) == 2, log
    assert f"{kit1.kit_dir}/adapter/librow_store.so is missing" in errors[0]
    assert f"{kit1.kit_dir}/b12x/README.md has sha256 {sha(CHANGED)}" in errors[1]
    for line in errors:
        assert SIM_TAG in line and "import failed" in line
    assert "simulated kit launcher checks passed" in log  # the launcher's checks came first and passed
    assert "HTTP on" not in log and not any(m in log for m in MARKERS)


def test_without_a_kit_nothing_is_checked_and_no_marker_is_logged(kit1: Kit, tmp_path: Path) -> None:
    env = {k: v for k, v in kit1.env.items() if not k.startswith("SPARKCTL_SIM_KIT_")}
    env["DSV41_PACKED_DIR"] = str(tmp_path / "nowhere")
    code, log = _run_rank(kit1, env, tmp_path)
    assert code is None and "ready to roll" in log, log
    assert not any(m in log for m in MARKERS) and "kit launcher" not in log
