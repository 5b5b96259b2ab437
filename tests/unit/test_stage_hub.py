"""A Hugging Face source is checked against the hub's own record: space before the download, every
file's LFS SHA-256 (or git blob id) after it, before any byte is fanned out. The hub is a local
stand-in (tests/fixtures/fake_hub), the module runs through Ansible."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from support import synth_checkpoint
from support.modrun import run_module

FAKE_HUB = Path(__file__).resolve().parents[1] / "fixtures" / "fake_hub"


def _blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("hub")
    ckpt = synth_checkpoint.write_checkpoint(base / "repo", engram_rows=(601, 599), filler_shards=1,
                                             filler_mib=0.05)
    root = Path(ckpt["dir"])
    record = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")):
        rel = str(path.relative_to(root))
        big = path.suffix == ".safetensors"
        record[rel] = {"size": path.stat().st_size,
                       "sha256": hashlib.sha256(path.read_bytes()).hexdigest() if big else None,
                       "blob_id": None if big else _blob_id(path)}
    return {"root": root, "record": record}


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hub: dict[str, Any], record: dict[str, Any],
         **extra: Any) -> tuple[bool, dict[str, Any]]:
    (tmp_path / "record.json").write_text(json.dumps(record))
    monkeypatch.setenv("SPARKCTL_FAKE_HUB", str(hub["root"]))
    monkeypatch.setenv("SPARKCTL_FAKE_HUB_RECORD", str(tmp_path / "record.json"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE_HUB), os.environ.get("PYTHONPATH", "")]))
    args = {"source": "hf", "model_dir": str(tmp_path / "model"), "repo": "org/model", "revision": "a" * 40,
            "margin_gib": 0, "_node": "spark-0", **extra}
    return run_module("spark_stage", "spark_stage_source", args)


def test_a_download_that_matches_the_hub_is_staged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   hub: dict[str, Any]) -> None:
    failed, res = _run(tmp_path, monkeypatch, hub, hub["record"])
    assert not failed, res.get("msg")
    assert {e["path"] for e in res["manifest"]["files"]} == set(hub["record"])


def test_a_shard_that_differs_from_the_hubs_record_stops_before_the_fanout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hub: dict[str, Any]
) -> None:
    record = json.loads(json.dumps(hub["record"]))
    shard = next(rel for rel, e in record.items() if e["sha256"])
    record[shard]["sha256"] = "0" * 64
    failed, res = _run(tmp_path, monkeypatch, hub, record)
    assert failed and "differs from what the hub records" in res["msg"] and "spark-0" in res["msg"]
    assert any(m.startswith(f"{shard}: sha256 ") for m in res["mismatched"])


def test_a_small_file_is_checked_by_its_git_blob_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    hub: dict[str, Any]) -> None:
    record = json.loads(json.dumps(hub["record"]))
    record["config.json"]["blob_id"] = "f" * 40
    failed, res = _run(tmp_path, monkeypatch, hub, record)
    assert failed and any(m.startswith("config.json: git blob") for m in res["mismatched"])


def test_space_is_checked_before_any_byte_is_downloaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        hub: dict[str, Any]) -> None:
    failed, res = _run(tmp_path, monkeypatch, hub, hub["record"], margin_gib=1 << 20)
    assert failed and "not enough space" in res["msg"] and "nothing was downloaded" in res["msg"]
    model = tmp_path / "model"
    assert not model.exists() or not any(model.rglob("*.safetensors"))


def test_the_download_writes_bytes_and_files_into_the_progress_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hub: dict[str, Any]
) -> None:
    doc_path = tmp_path / "run" / "stage-progress.json"
    failed, res = _run(tmp_path, monkeypatch, hub, hub["record"], progress_path=str(doc_path))
    assert not failed, res.get("msg")
    doc = json.loads(doc_path.read_text())
    total = sum(e["size"] for e in hub["record"].values())
    assert (doc["node"], doc["step"], doc["state"]) == ("spark-0", "download", "done")
    assert doc["bytes_done"] == doc["bytes_total"] == total
    assert doc["files_done"] == doc["files_total"] == len(hub["record"]) and doc["items"] == []


def test_check_mode_downloads_nothing_and_writes_no_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hub: dict[str, Any]
) -> None:
    doc_path = tmp_path / "run" / "stage-progress.json"
    (tmp_path / "record.json").write_text(json.dumps(hub["record"]))
    monkeypatch.setenv("SPARKCTL_FAKE_HUB", str(hub["root"]))
    monkeypatch.setenv("SPARKCTL_FAKE_HUB_RECORD", str(tmp_path / "record.json"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE_HUB), os.environ.get("PYTHONPATH", "")]))
    args = {"source": "hf", "model_dir": str(tmp_path / "model"), "repo": "org/model", "revision": "a" * 40,
            "margin_gib": 0, "_node": "spark-0", "progress_path": str(doc_path)}
    failed, res = run_module("spark_stage", "spark_stage_source", args, check=True)
    assert not failed and res["changed"] and not doc_path.exists()
