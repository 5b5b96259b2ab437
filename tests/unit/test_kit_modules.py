"""The spark_kit modules run through Ansible itself (AnsiballZ packing the module_utils symlinks to
sparkctl/nodeside and sparkctl/stage) against temp dirs: the source refusals, the head's copy, the
full verification naming the node, the path and both digests, the atomic switch and check mode."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.modrun import needs_ansible, run_module
from support.synth_kit import OVERLAYS, git, kit_repo, sha

from sparkctl.nodeside import kit as nk

pytestmark = needs_ansible


def module(name: str, args: dict[str, Any], check: bool = False) -> tuple[bool, dict[str, Any]]:
    """Run one spark_kit module on localhost; (failed, result)."""
    return run_module("spark_kit", name, args, check)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return kit_repo(tmp_path / "kit-repo")


def source_args(repo: Path, cache: Path, commit: str) -> dict[str, Any]:
    return {"source": "git", "url": str(repo), "commit": commit, "cache_dir": str(cache),
            "manifest": "patches/manifest.json", "overlay_source": "patches/source",
            "overlays": list(OVERLAYS)}


def test_source_module_refuses_a_branch_and_a_missing_commit(repo: Path, tmp_path: Path) -> None:
    failed, res = module("spark_kit_source", source_args(repo, tmp_path / "cache", "main"))
    assert failed and "sparkctl_kit.commit 'main' is a branch or tag name" in res["msg"]
    failed, res = module("spark_kit_source", source_args(repo, tmp_path / "cache", "f" * 40))
    assert failed and f"{'f' * 40} does not exist in {repo}" in res["msg"]


def test_stage_a_version_then_tamper_with_one_overlay(repo: Path, tmp_path: Path) -> None:
    commit = git(repo, "rev-parse", "HEAD")
    failed, src = module("spark_kit_source", source_args(repo, tmp_path / "cache", commit))
    assert not failed and src["version"] == commit
    store = tmp_path / "store"
    # The head lacks every file; a head-side source is copied in (here: the exported tree).
    failed, diff = module("spark_kit_store", {"store": str(store), "version": commit,
                                              "expected": src["manifest"], "src": src["dir"]}, check=True)
    assert not failed and diff["changed"] and len(diff["missing"]) == len(src["manifest"]["files"])
    assert not store.exists()  # check mode created nothing
    failed, put = module("spark_kit_store", {"store": str(store), "version": commit,
                                             "expected": src["manifest"], "src": src["dir"]})
    assert not failed and sorted(put["copied"]) == sorted(put["missing"])
    failed, again = module("spark_kit_store", {"store": str(store), "version": commit,
                                               "expected": src["manifest"], "src": src["dir"]})
    assert not failed and again["changed"] is False and again["missing"] == []

    verify = {"node": "spark-1", "store": str(store), "version": commit, "expected": src["manifest"]}
    failed, res = module("spark_kit_verify", verify)
    assert not failed and res["kit"]["verified"] and res["kit"]["current"] is None
    failed, res = module("spark_kit_verify", {**verify, "require_current": True})
    assert failed and f"{store}/current: points at nothing, not the configured kit {commit}" in res["msg"]
    failed, res = module("spark_kit_verify", {**verify, "action": "switch"}, check=True)
    assert not failed and res["changed"] and not (store / "current").exists()
    failed, res = module("spark_kit_verify", {**verify, "action": "switch"})
    assert not failed and res["changed"] and os.readlink(store / "current") == commit
    failed, res = module("spark_kit_verify", {**verify, "require_current": True})
    assert not failed and res["changed"] is False

    rel = "patches/source/python/sglang/srt/distributed/device_communicators/pynccl.py"
    target = store / commit / rel
    good = target.read_bytes()
    target.write_bytes(good[:-2] + b"!\n")  # one byte
    failed, res = module("spark_kit_verify", {**verify, "require_current": True})
    assert failed
    assert res["msg"] == (f"spark-1: kit {commit} fails verification: {rel}: content differs "
                          f"(expected {sha(good)}, actual {sha(good[:-2] + b'!' + bytes([10]))})")
    assert res["kit"]["problems"] == [{"path": rel, "problem": "content differs", "expected": sha(good),
                                       "actual": sha(target.read_bytes())}]
    # A new version that fails verification never becomes current.
    failed, res = module("spark_kit_verify",
                         {**verify, "version": "tree-0123456789abcdef", "action": "switch"})
    assert failed and "no such kit version" in res["msg"] and os.readlink(store / "current") == commit


def test_image_check_without_docker_or_image_says_why(tmp_path: Path) -> None:
    env_path = os.environ.get("PATH", "")
    overlays = {"a.py": {"before_sha256": None, "after_sha256": "a" * 64}}
    failed, res = module("spark_kit_base", {"node": "spark-0", "image": "sparkctl-lab/absent:none",
                                            "target": "/sgl-workspace/sglang", "overlays": overlays})
    assert not failed and res["checked"] is False and res["changed"] is False
    assert res["reason"] in ("docker is not installed on this node",
                             "image sparkctl-lab/absent:none is not present here"), env_path


def test_version_names_are_refused_when_unsafe(tmp_path: Path) -> None:
    failed, res = module("spark_kit_store",
                         {"store": str(tmp_path), "version": "../x", "expected": {"files": []}})
    assert failed and "unsafe or non-normal path '../x'" in res["msg"]
    assert nk.current_version(str(tmp_path)) is None


def test_prune_repairs_a_file_changed_in_place_keeping_size_and_time(repo: Path, tmp_path: Path) -> None:
    commit = git(repo, "rev-parse", "HEAD")
    _, src = module("spark_kit_source", source_args(repo, tmp_path / "cache", commit))
    store = tmp_path / "store"
    args = {"store": str(store), "version": commit, "expected": src["manifest"], "src": src["dir"]}
    assert not module("spark_kit_store", args)[0]
    rel = "adapter/sitecustomize.py"
    path = store / commit / rel
    st = path.stat()
    path.write_bytes(b"# adaptex\n")  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same time
    (store / commit / "stray.txt").write_text("not the kit's")
    failed, res = module("spark_kit_store", {**args, "src": "", "prune": True}, check=True)
    assert not failed and res["changed"] and res["pruned"] == [rel, "stray.txt"] and path.exists()
    failed, res = module("spark_kit_store", {**args, "src": "", "prune": True})
    assert not failed and res["changed"] and res["missing"] == [rel] and res["differing"] == [rel]
    assert not path.exists() and not (store / commit / "stray.txt").exists()
    failed, res = module("spark_kit_store", {**args, "prune": True})
    assert not failed and res["copied"] == [rel] and path.read_text() == "# adapter\n"
