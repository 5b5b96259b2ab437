"""The rendered m1-1m rank container against Mia AI Lab's published `docker run` line, item by item.

The published line is the head's (rank 0) from start.sh at e0985205 (MiaAI-Lab/DeepSeek-v4.1-Flash-
DGX-Sparks): ``docker_common_args`` and ``cmd_serve``'s ``docker run``, with files/nccl.sh's
``nccl_mount_args`` when a host NCCL build is configured; placeholders in <>. Its ``-e`` variables are
the environment (the profile's ``env`` and the launcher's own variables, see m1-1m.yml), not docker
options. Every option and mount must appear in sparkctl's rendered command with the same container
path; each deliberate difference is listed (and asserted) below, so a new one cannot slip in.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.model import load_inventory
from sparkctl.render import common, rank

REPO = Path(__file__).resolve().parents[2]

PUBLISHED = r"""
docker run -d --name dsv41-head --restart=no \
  --network host --ipc host --privileged --cap-add IPC_LOCK --gpus all \
  --shm-size 32g \
  --ulimit memlock=-1:-1 --ulimit stack=67108864 \
  --device /dev/infiniband:/dev/infiniband \
  -v <model_src>:/models/DeepSeek-V4.1-Flash \
  -v <STATE_DIR>:/state \
  -v <HOME>/.cache:/root/.cache \
  -e OFFLOAD_MODE=nvme \
  -v <ENGRAM_DIR>:/engram \
  -e NODE_RANK=0 \
  <IMAGE> run
"""
# nccl_mount_args when $NCCL_HOST_DIR holds libnccl.so.2 (and the pip overlay is off).
PUBLISHED_NCCL = "-v <NCCL_HOST_DIR>:/nccl:ro -e LD_LIBRARY_PATH=/nccl"

# Options of the published line sparkctl does not render, and why.
NOT_RENDERED = {
    "-d": "the systemd unit runs the container in the foreground and supervises it",
    "--restart=no": "the unit decides restarts (docker's default is no restart, as published)",
    "--name dsv41-head": "named per cluster and rank (sparkctl-<cluster>-r<rank>)",
    "--device /dev/infiniband:/dev/infiniband": "rendered --device /dev/infiniband: docker maps a device "
                                                "to the same path when none is given",
}
# What sparkctl adds to every rank container, and why.
ADDED = {
    "--pull never": "stage image put the same image ID on every node; a start never pulls",
    f"--env-file {common.RANK_ENV_FILE}": "the environment from a 0600 file, never -e on the command line",
    "--device /dev/infiniband": "the published device, written without the container path",
}
# Mounts whose source or mode differ, and why.
MOUNTS = {
    # dst: (rendered src, rendered readonly, why)
    "/models/DeepSeek-V4.1-Flash": ("<model_dir>", True, "the engine only reads the checkpoint"),
    "/engram": ("<engram_dir>", True, "the engine only reads the packed Engram shards"),
    "/state": ("<run_dir>/state", False, "sparkctl keeps rank state in its run directory"),
    "/root/.cache": ("<run_dir>/cache", False, "FlashInfer's autotune cache, kept across restarts in the run "
                                               "directory instead of the operator's $HOME"),
}
MOUNTS_ADDED = {
    common.CONTAINER_CACHE_DIR: "sparkctl's cache directory (the profiles' ${cache_dir})",
    common.RANK_SECRETS_FILE: "the 0600 secrets file SGLang reads through --config (the API key)",
}


def _parse(words: list[str]) -> tuple[list[str], dict[str, tuple[str, bool]], dict[str, str]]:
    """(plain options as 'flag value' items, mounts as dst -> (src, readonly), -e variables)."""
    opts: list[str] = []
    mounts: dict[str, tuple[str, bool]] = {}
    env: dict[str, str] = {}
    i = words.index("run") + 1
    while i < len(words):
        w = words[i]
        if w == "--entrypoint" or w.startswith("<IMAGE>"):
            break
        if w == "--mount":
            fields = dict(f.partition("=")[::2] for f in words[i + 1].split(","))
            mounts[fields["dst"]] = (fields["src"], "readonly" in fields)
            i += 2
        elif w == "-v":
            src, dst, *mode = words[i + 1].split(":")
            mounts[dst] = (src, mode == ["ro"])
            i += 2
        elif w == "-e":
            key, _, value = words[i + 1].partition("=")
            env[key] = value
            i += 2
        elif w in ("-d", "--privileged") or "=" in w:
            opts.append(w)
            i += 1
        else:
            opts.append(f"{w} {words[i + 1]}")
            i += 2
    return opts, mounts, env


def _published(extra: str = "") -> tuple[list[str], dict[str, tuple[str, bool]], dict[str, str]]:
    text = PUBLISHED.replace("<IMAGE> run", f"{extra} <IMAGE> run")
    return _parse(shlex.split(text.replace("\\\n", " ")))


def _m1(tmp_path: Path, container: dict[str, Any] | None = None) -> Any:
    site = tmp_path / "site"
    shutil.copytree(REPO / "inventory" / "example", site)
    path = site / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(path.read_text())
    doc.update(
        sparkctl_profile="m1-1m",
        sparkctl_kit={"source": "git", "url": "https://github.com/MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks.git",
                      "commit": "e0985205caea5a3afd43e88bebb076eeefdec8b5"},
        sparkctl_runtime={"kind": "container", "image_source": "build", "image": "dsv41-4x-spark:local"},
    )
    if container is not None:
        doc["sparkctl_profile_overrides"] = {"container": container}
    path.write_text(yaml.safe_dump(doc))
    return load_inventory(site)


@pytest.fixture
def m1(tmp_path: Path) -> Any:
    return _m1(tmp_path)


def test_every_published_option_is_rendered_and_every_difference_listed(m1: Any) -> None:
    node = m1.node("spark-0")
    ours, _, _ = _parse(rank.container_command(m1, node))
    published, _, _ = _published()
    missing = [o for o in published if o not in ours]
    assert sorted(missing) == sorted(NOT_RENDERED), missing
    assert f"--name {rank.container_name(m1, node)}" in ours
    extra = set(ours) - set(published) - {f"--name {rank.container_name(m1, node)}"}
    assert extra == set(ADDED), extra


def test_every_published_mount_has_its_target_and_the_differences_are_listed(m1: Any) -> None:
    ours = _parse(rank.container_command(m1, m1.node("spark-0")))[1]
    published = _published()[1]
    run_dir = str(m1.paths.run_dir)
    fill = {"<model_dir>": str(m1.paths.model_dir), "<engram_dir>": str(m1.paths.engram_dir),
            "<run_dir>": run_dir}
    assert sorted(published) == sorted(MOUNTS)
    for dst, (src, readonly, _why) in MOUNTS.items():
        for k, v in fill.items():
            src = src.replace(k, v)
        assert ours.get(dst) == (src, readonly), dst
    assert set(ours) - set(published) == set(MOUNTS_ADDED)


def test_the_host_nccl_build_is_bound_as_published_when_configured(tmp_path: Path) -> None:
    m1 = _m1(tmp_path, {"host_nccl_dir": "/opt/nccl-2.30.7"})
    node = m1.node("spark-1")
    _, ours, _ = _parse(rank.container_command(m1, node))
    _, published, env = _published(PUBLISHED_NCCL)
    assert published["/nccl"] == ("<NCCL_HOST_DIR>", True)
    assert ours["/nccl"] == ("/opt/nccl-2.30.7", True)
    assert rank.rank_env(m1, node)["LD_LIBRARY_PATH"] == env["LD_LIBRARY_PATH"] == "/nccl"
    # `check fabric` runs NCCL the way the rank does: the same library.
    check = rank.nccl_check(m1, node)["command"]
    assert "type=bind,src=/opt/nccl-2.30.7,dst=/nccl,readonly" in check


def test_without_a_host_nccl_build_the_images_nccl_is_used(m1: Any) -> None:
    node = m1.node("spark-1")
    assert "/nccl" not in _parse(rank.container_command(m1, node))[1]
    assert "LD_LIBRARY_PATH" not in rank.rank_env(m1, node)


def test_the_image_runs_sglang_with_the_rendered_argv_not_its_launcher(m1: Any) -> None:
    """The image's entry point is boot.py run, which builds the same flags from the launcher's
    variables and runs the smoke and warm-up; sparkctl renders the argv (plan shows it) and runs the
    smoke and warm-up itself in `up` (gates.smoke)."""
    node = m1.node("spark-2")
    cmd = rank.container_command(m1, node)
    i = cmd.index("--entrypoint")
    assert cmd[i + 2] == m1.runtime.image
    assert [cmd[i + 1], *cmd[i + 3:]] == rank.rank_argv(m1, node)
    assert m1.profile.gates.smoke is not None
