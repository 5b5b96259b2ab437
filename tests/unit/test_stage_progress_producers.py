"""Each long step writes a well-formed progress document as it goes (sparkctl.nodeside.progress):
the document itself, the hub download's sampler, Engram packing through its module, the kit's git
fetch, and the parsers of docker build's and git's own progress output. Small inputs stand in
for the long steps."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import synth_checkpoint
from support.modrun import needs_ansible, run_module

from sparkctl.nodeside import progress as p
from sparkctl.stage import dsv41en1 as d
from sparkctl.stage import kit


def read(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    assert set(p.FIELDS) | {"updated"} == set(doc), "every field, nothing else"
    return doc


def test_the_document_is_replaced_whole_and_lists_at_most_max_items(tmp_path: Path) -> None:
    path = tmp_path / "run" / p.PROGRESS_FILE
    prog = p.Progress(
        "spark-1", step="download", bytes_total=100, files_total=12, state="downloading", path=str(path)
    )
    prog.items = [{"name": f"f{i}", "done": i, "total": 10} for i in range(12)]
    prog.add(done=40, moved=40)
    prog.write()
    doc = read(path)
    assert (doc["node"], doc["step"], doc["bytes_done"], doc["bytes_total"]) == (
        "spark-1",
        "download",
        40,
        100,
    )
    assert len(doc["items"]) == p.MAX_ITEMS and doc["pid"] == os.getpid()
    assert os.listdir(path.parent) == [p.PROGRESS_FILE]  # no .tmp left beside it


def test_the_ticker_samples_and_writes_until_finished(tmp_path: Path) -> None:
    path = tmp_path / p.PROGRESS_FILE
    prog = p.Progress("spark-0", step="download", bytes_total=3, path=str(path))
    seen = []

    def sample() -> None:
        seen.append(1)
        prog.bytes_done = len(seen)

    ticker = p.Ticker(prog, every=0.01, sample=sample)
    ticker.start()
    while len(seen) < 2:
        pass
    ticker.finish()
    assert not ticker.is_alive() and read(path)["bytes_done"] == len(seen)


def test_the_hub_sampler_counts_finished_files_and_the_growing_incomplete_ones(tmp_path: Path) -> None:
    model = tmp_path / "model"
    download = model / ".cache" / "huggingface" / "download"
    (download / "sub").mkdir(parents=True)
    (model / "config.json").write_bytes(b"x" * 10)  # finished
    (download / "model-00001.safetensors.0123abcd.incomplete").write_bytes(b"x" * 300)  # in flight
    (download / "sub" / "model-00002.safetensors.4567ef.incomplete").write_bytes(b"x" * 50)
    (model / "model-00003.safetensors").write_bytes(b"x" * 7)  # an older, shorter file: not done
    sizes = {
        "config.json": 10,
        "model-00001.safetensors": 1000,
        "sub/model-00002.safetensors": 500,
        "model-00003.safetensors": 400,
    }
    prog = p.Progress(
        "spark-0",
        step="download",
        bytes_total=sum(sizes.values()),
        files_total=4,
        path=str(tmp_path / p.PROGRESS_FILE),
    )
    p.hub_sampler(prog, str(model), sizes)()
    prog.write()
    doc = read(tmp_path / p.PROGRESS_FILE)
    assert (doc["bytes_done"], doc["files_done"]) == (10 + 300 + 50, 1)
    assert doc["items"] == [
        {"name": "sub/model-00002.safetensors", "done": 50, "total": 500},
        {"name": "model-00001.safetensors", "done": 300, "total": 1000},
    ]
    assert doc["current"] == "sub/model-00002.safetensors"


def test_docker_builds_steps_are_read_from_buildkit_and_the_classic_builder() -> None:
    assert p.build_step("#7 [2/5] RUN pip install -e python") == (2, 5, "RUN pip install -e python")
    assert p.build_step("#9 [builder 3/7] COPY patches /opt/patches") == (3, 7, "COPY patches /opt/patches")
    assert p.build_step("Step 4/9 : ENV TORCH_CUDA_ARCH_LIST=12.1") == (4, 9, "ENV TORCH_CUDA_ARCH_LIST=12.1")
    assert p.build_step("#7 DONE 0.4s") is None and p.build_step("#7 CACHED") is None


def test_gits_progress_lines_give_phase_objects_and_bytes() -> None:
    assert p.git_phase("Receiving objects:  45% (450/1000), 1.50 MiB | 2.00 MiB/s") == (
        "Receiving objects",
        450,
        1000,
        3 << 19,
    )
    assert p.git_phase("remote: Counting objects: 100% (88/88), done.") == ("Counting objects", 88, 88, None)
    assert p.git_phase("Resolving deltas:  10% (5/50)") == ("Resolving deltas", 5, 50, None)
    assert p.git_phase("From https://github.com/x/y") is None


def test_progress_lines_split_on_carriage_returns_and_keep_the_tail() -> None:
    got: list[str] = []
    kept: list[str] = []
    p.progress_lines(
        io.BytesIO(b"Receiving objects:  10% (1/10)\rReceiving objects: 100% (10/10)\nfatal: x"),
        got.append,
        kept,
    )
    assert got == ["Receiving objects:  10% (1/10)", "Receiving objects: 100% (10/10)", "fatal: x"]
    assert kept[-1] == "fatal: x"


def test_packing_reports_whole_rows(tmp_path: Path) -> None:
    ckpt = synth_checkpoint.write_checkpoint(
        tmp_path / "model", engram_rows=(1001, 999), filler_shards=1, filler_mib=0.01
    )
    calls: list[int] = []
    d.pack_rank(
        ckpt["dir"], str(tmp_path / "engram"), 1, 4, margin_bytes=0, block_rows=64, on_progress=calls.append
    )
    rows = sum(
        hi - lo for hi, lo in ((d.row_range(n, 1, 4)[1], d.row_range(n, 1, 4)[0]) for n in (1001, 999))
    )
    assert len(calls) > 2 and all(n % d.ROW_BYTES == 0 for n in calls)
    assert sum(calls) == rows * d.ROW_BYTES


@needs_ansible
def test_the_pack_module_writes_rank_rows_and_bytes_and_nothing_in_check_mode(tmp_path: Path) -> None:
    ckpt = synth_checkpoint.write_checkpoint(tmp_path / "model", engram_rows=(3001, 2999), filler_mib=0.01)
    doc_path = tmp_path / "run" / p.PROGRESS_FILE
    args = {
        "node": "spark-2",
        "model_dir": ckpt["dir"],
        "engram_dir": str(tmp_path / "engram"),
        "rank": 2,
        "tp": 4,
        "margin_gib": 0,
        "progress_path": str(doc_path),
    }
    failed, res = run_module("spark_stage", "spark_stage_pack", args, check=True)
    assert not failed and not doc_path.exists()
    failed, res = run_module("spark_stage", "spark_stage_pack", args)
    assert not failed, res.get("msg")
    doc = read(doc_path)
    rows = (2250 - 1500) + (2249 - 1499)
    assert (doc["node"], doc["step"], doc["state"], doc["current"]) == (
        "spark-2",
        "pack",
        "done",
        "rank 2 of 4",
    )
    assert (doc["count_unit"], doc["count_done"], doc["count_total"]) == ("rows", rows, rows)
    assert doc["bytes_done"] == doc["bytes_total"] == rows * d.ROW_BYTES


def _git(*args: str, cwd: Path) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="a",
        GIT_AUTHOR_EMAIL="a@b",
        GIT_COMMITTER_NAME="a",
        GIT_COMMITTER_EMAIL="a@b",
    )
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def test_the_kit_fetch_writes_gits_objects_on_the_controller(tmp_path: Path) -> None:
    src = tmp_path / "kit"
    src.mkdir()
    _git("init", "-q", cwd=src)
    for i in range(40):
        (src / f"f{i}.txt").write_text(f"{i}\n" * 100)
    _git("add", ".", cwd=src)
    _git("commit", "-qm", "kit", cwd=src)
    commit = _git("rev-parse", "HEAD", cwd=src).strip()
    doc_path = tmp_path / "state" / p.PROGRESS_FILE
    repo, fetched = kit.fetch(f"file://{src}", commit, str(tmp_path / "cache"), progress_path=str(doc_path))
    assert fetched
    doc = read(doc_path)
    assert (doc["node"], doc["step"], doc["state"], doc["count_unit"]) == (
        "controller",
        "fetch",
        "done",
        "objects",
    )
    assert doc["count_total"] >= 41 and doc["count_done"] == doc["count_total"]  # 40 blobs, a tree, a commit
    # Fetched already: nothing fetched, the document left as it was.
    before = doc_path.stat().st_mtime_ns
    assert kit.fetch(f"file://{src}", commit, str(tmp_path / "cache"), progress_path=str(doc_path)) == (
        repo,
        False,
    )
    assert doc_path.stat().st_mtime_ns == before


def test_a_failed_kit_fetch_says_so_in_the_document(tmp_path: Path) -> None:
    doc_path = tmp_path / p.PROGRESS_FILE
    with pytest.raises(kit.KitSourceError, match="cannot fetch the kit"):
        kit.fetch(
            f"file://{tmp_path / 'nowhere'}", "a" * 40, str(tmp_path / "cache"), progress_path=str(doc_path)
        )
    doc = read(doc_path)
    assert doc["state"] == "failed" and doc["error"]
