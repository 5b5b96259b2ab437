"""Packing on synthetic checkpoints: bytes equal to an independent reference, verification, re-runs."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import pytest
from support import synth_checkpoint

from sparkctl.stage import dsv41en1 as d
from sparkctl.stage import safetensors as st


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("ckpt")
    return synth_checkpoint.write_checkpoint(out, engram_rows=(5003, 4999), filler_shards=2, filler_mib=0.25)


def reference_packed(ckpt: dict, layer: int, rank: int, tp: int) -> bytes:
    """The expected file, computed here from the generator's own offsets (not with sparkctl's packer)."""
    info = ckpt["engram"][str(layer)]
    rows = info["rows"]
    lo, hi = rows * rank // tp, rows * (rank + 1) // tp
    data = (Path(ckpt["dir"]) / info["file"]).read_bytes()
    header = struct.pack("<6Q", 0x31344E4531565344, layer, lo, hi, rows, 264).ljust(4096, b"\0")
    body = b"".join(
        data[info["weight_offset"] + r * 256 : info["weight_offset"] + (r + 1) * 256]
        + data[info["scale_offset"] + r * 8 : info["scale_offset"] + (r + 1) * 8]
        for r in range(lo, hi)
    )
    return header + body


def test_safetensors_header_gives_absolute_offsets(ckpt: dict) -> None:
    info = ckpt["engram"]["1"]
    tensors = st.read_header(Path(ckpt["dir"]) / info["file"])
    w = tensors["layers.1.engram.embed.weight"]
    assert (w.dtype, w.shape, w.start) == ("F8_E4M3", (5003, 256), info["weight_offset"])
    assert tensors["layers.1.engram.embed.scale"].start == info["scale_offset"]


def test_safetensors_rejects_truncated_and_garbage_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 1 << 40))
    with pytest.raises(st.SafetensorsError, match="header length"):
        st.read_header(bad)
    bad.write_bytes(struct.pack("<Q", 4) + b"nope")
    with pytest.raises(st.SafetensorsError, match="not JSON"):
        st.read_header(bad)
    hdr = json.dumps({"t": {"dtype": "F8_E4M3", "shape": [4, 256], "data_offsets": [0, 1024]}}).encode()
    bad.write_bytes(struct.pack("<Q", len(hdr)) + hdr + b"\0" * 10)
    with pytest.raises(st.SafetensorsError, match="outside the file"):
        st.read_header(bad)


def test_locate_finds_both_layers(ckpt: dict) -> None:
    srcs = {s.layer: s for s in d.locate(ckpt["dir"])}
    assert srcs[1].rows == 5003 and srcs[14].rows == 4999
    assert srcs[14].weight_offset == ckpt["engram"]["14"]["weight_offset"]


@pytest.mark.parametrize("rank,tp", [(0, 4), (1, 4), (3, 4), (0, 1), (2, 3)])
def test_packed_files_equal_the_reference(ckpt: dict, tmp_path: Path, rank: int, tp: int) -> None:
    res = d.pack_rank(ckpt["dir"], str(tmp_path), rank, tp, margin_bytes=0, block_rows=1000)
    assert res.changed and res.verified
    for layer in (1, 14):
        got = (tmp_path / d.shard_name(layer, rank, tp)).read_bytes()
        want = reference_packed(ckpt, layer, rank, tp)
        assert got == want
    manifest = json.loads((tmp_path / d.manifest_name(rank, tp)).read_text())
    assert manifest["format"] == "DSV41EN1" and (manifest["rank"], manifest["tp"]) == (rank, tp)
    for f in manifest["files"]:
        assert f["sha256"] == hashlib.sha256((tmp_path / f["name"]).read_bytes()).hexdigest()
    assert (
        manifest["source"]["config_sha256"]
        == hashlib.sha256((Path(ckpt["dir"]) / "config.json").read_bytes()).hexdigest()
    )
    assert not list(tmp_path.glob("*.partial"))


def test_rerun_keeps_files_and_check_mode_writes_nothing(ckpt: dict, tmp_path: Path) -> None:
    out = str(tmp_path / "engram")
    planned = d.pack_rank(ckpt["dir"], out, 1, 4, margin_bytes=0, check_mode=True)
    assert planned.changed and not os.path.exists(out)
    d.pack_rank(ckpt["dir"], out, 1, 4, margin_bytes=0)
    before = {p.name: p.stat().st_mtime_ns for p in Path(out).iterdir()}
    again = d.pack_rank(ckpt["dir"], out, 1, 4, margin_bytes=0)
    assert not again.changed and again.verified
    assert {p.name: p.stat().st_mtime_ns for p in Path(out).iterdir()} == before


def test_leftovers_are_refused_unless_forced(ckpt: dict, tmp_path: Path) -> None:
    (tmp_path / "engram-l1-r0of4.bin.partial").write_bytes(b"half")
    (tmp_path / "engram-l14-r0of4.bin").write_bytes(b"who wrote this")
    with pytest.raises(
        d.FormatError, match=r"no manifest covers: engram-l1-r0of4.bin.partial, engram-l14-r0of4.bin"
    ):
        d.pack_rank(ckpt["dir"], str(tmp_path), 0, 4, margin_bytes=0)
    res = d.pack_rank(ckpt["dir"], str(tmp_path), 0, 4, margin_bytes=0, force=True)
    assert res.verified and any("deleted" in a for a in res.actions)
    assert (tmp_path / "engram-l14-r0of4.bin").read_bytes() == reference_packed(ckpt, 14, 0, 4)
    # other ranks' and TP sizes' files share the directory untouched
    (tmp_path / "engram-l1-r0of8.bin").write_bytes(b"x")
    assert d.pack_rank(ckpt["dir"], str(tmp_path), 0, 4, margin_bytes=0).verified


def test_full_check_names_a_flipped_byte(ckpt: dict, tmp_path: Path) -> None:
    d.pack_rank(ckpt["dir"], str(tmp_path), 2, 4, margin_bytes=0)
    path = tmp_path / d.shard_name(14, 2, 4)
    lo, _ = d.row_range(4999, 2, 4)
    with path.open("r+b") as f:  # row lo (always sampled): flip one weight byte
        f.seek(4096 + 10)
        b = f.read(1)
        f.seek(4096 + 10)
        f.write(bytes([b[0] ^ 0xFF]))
    quick = d.check_rank(ckpt["dir"], str(tmp_path), 2, 4, depth="quick")
    assert not quick.verified and any("modified after packing" in p for p in quick.problems)
    full = d.check_rank(ckpt["dir"], str(tmp_path), 2, 4, depth="full")
    assert any("engram-l14-r2of4.bin: SHA-256" in p for p in full.problems)
    assert any(f"engram-l14-r2of4.bin: row {lo} weight bytes differ" in p for p in full.problems)
    # the next pack repairs it (the file is manifested, so no --force is needed)
    assert d.pack_rank(ckpt["dir"], str(tmp_path), 2, 4, margin_bytes=0).changed
    assert path.read_bytes() == reference_packed(ckpt, 14, 2, 4)


def test_verify_rows_catches_a_wrong_scale(ckpt: dict, tmp_path: Path) -> None:
    src = {s.layer: s for s in d.locate(ckpt["dir"])}[1]
    part = tmp_path / "x.bin"
    d.pack_layer(src, str(part), 0, 4)
    lo, hi = d.row_range(src.rows, 0, 4)
    with part.open("r+b") as f:  # the scale of row hi-1 (always sampled)
        f.seek(4096 + (hi - 1 - lo) * 264 + 256 + 3)
        f.write(b"\x7f" if f.read(1) != b"\x7f" else b"\x00")
    assert any(f"row {hi - 1} scale bytes differ" in p for p in d.verify_rows(src, str(part), 0, 4))
    with part.open("r+b") as f:
        f.truncate(4096 + 264)
    assert "want" in d.verify_rows(src, str(part), 0, 4)[0]


def test_checkpoint_change_is_detected_by_identity(ckpt: dict, tmp_path: Path) -> None:
    d.pack_rank(ckpt["dir"], str(tmp_path), 0, 4, margin_bytes=0)
    doc = json.loads((tmp_path / d.manifest_name(0, 4)).read_text())
    doc["source"]["index_sha256"] = "0" * 64
    (tmp_path / d.manifest_name(0, 4)).write_text(json.dumps(doc))
    res = d.check_rank(ckpt["dir"], str(tmp_path), 0, 4)
    assert any("index_sha256 differs" in p for p in res.problems)


def test_a_restaged_engram_shard_invalidates_the_packs(tmp_path: Path) -> None:
    """Same config and index, other bytes in an Engram shard (a re-staged checkpoint): the packs
    cut from the old bytes must not be kept."""
    src = synth_checkpoint.write_checkpoint(tmp_path / "ckpt", engram_rows=(1001, 999), filler_shards=1,
                                            filler_mib=0.05)
    engram = tmp_path / "engram"
    d.pack_rank(src["dir"], str(engram), 1, 4, margin_bytes=0)
    assert d.check_rank(src["dir"], str(engram), 1, 4).verified
    shard = next(s.weight_path for s in d.locate(src["dir"]))
    data = bytearray(Path(shard).read_bytes())
    data[-1] ^= 0xFF  # the last byte: past the header, inside the tensor data
    Path(shard).write_bytes(bytes(data))
    res = d.check_rank(src["dir"], str(engram), 1, 4)
    assert not res.verified
    assert any("engram_shards_sha256 differs" in p for p in res.problems), res.problems
    again = d.pack_rank(src["dir"], str(engram), 1, 4, margin_bytes=0, force=True)
    assert again.verified and d.check_rank(src["dir"], str(engram), 1, 4).verified


def test_space_is_checked_before_writing(ckpt: dict, tmp_path: Path) -> None:
    with pytest.raises(d.FormatError, match="not enough space"):
        d.pack_rank(ckpt["dir"], str(tmp_path), 0, 4, margin_bytes=1 << 60)
    assert not list(tmp_path.iterdir())


def test_missing_engram_tensor_is_named(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "x.safetensors"}}))
    with pytest.raises(d.FormatError, match=r"no tensor layers\.1\.engram\.embed\.weight"):
        d.locate(str(tmp_path))


def test_short_reads_still_give_the_reference_bytes(
    ckpt: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """preadv may stop early — at a row boundary or inside a row: the block is completed correctly."""
    real = os.preadv
    calls = {"n": 0}

    def short(fd: int, bufs: list, offset: int) -> int:
        calls["n"] += 1
        if calls["n"] % 2:  # odd calls: three whole rows and 100 bytes of the fourth
            return real(fd, [*bufs[:3], bufs[3][:100]] if len(bufs) > 3 else bufs[:1], offset)
        return real(fd, bufs[:7], offset)  # even calls: seven whole rows

    monkeypatch.setattr(d.os, "preadv", short)
    src = {s.layer: s for s in d.locate(ckpt["dir"])}[14]
    part = tmp_path / "x.bin"
    pf = d.pack_layer(src, str(part), 1, 4, block_rows=300)
    want = reference_packed(ckpt, 14, 1, 4)
    assert calls["n"] > 4
    assert part.read_bytes() == want
    assert pf.sha256 == hashlib.sha256(want).hexdigest()


def test_a_source_cut_short_is_a_format_error(ckpt: dict, tmp_path: Path) -> None:
    src = {s.layer: s for s in d.locate(ckpt["dir"])}[1]
    cut = tmp_path / "cut.safetensors"
    data = Path(src.weight_path).read_bytes()
    cut.write_bytes(data[: src.weight_offset + 100 * 256 + 17])  # rows of rank 0 end far beyond
    short = d.EngramSource(src.layer, src.rows, str(cut), src.weight_offset, str(cut), src.scale_offset)
    with pytest.raises(d.FormatError, match="short read"):
        d.pack_layer(short, str(tmp_path / "x.bin"), 0, 4)
