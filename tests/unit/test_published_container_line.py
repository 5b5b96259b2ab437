"""The rendered r4-nvme rank container against the publisher's per-rank `docker run` line, item by item.

The published line (rhys101's scripts/cluster.py ``command()`` + ``serve()``, as recorded in
../shared/reference/seed-profiles.md §A.1) is kept here verbatim with its placeholders; the
overlay list is the publisher's patches/manifest.json. Every option and mount of it must appear in
sparkctl's rendered command with the same container path and the same read-only flag. The few
deliberate differences are listed (and asserted) below, so a new one cannot slip in unnoticed.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from sparkctl.model import load_inventory
from sparkctl.render import common, kit, rank

REPO = Path(__file__).resolve().parents[2]

PUBLISHED = r"""
docker run --pull never --network host --ipc host \
  --cap-add IPC_LOCK --ulimit memlock=-1 --ulimit nofile=1048576:1048576 \
  --mount type=bind,src=<model_store>,dst=/models,readonly \
  --mount type=bind,src=<engram_dir>,dst=/engram,readonly \
  --mount type=bind,src=<run_dir>/kit,dst=/opt/sglang4,readonly \
  --mount type=bind,src=<run_dir>/kit/configs/cluster.json,dst=/config/profile.json,readonly \
  --mount type=bind,src=<run_dir>/cache,dst=/cache \
  --mount type=bind,src=<run_dir>/state,dst=/state \
  --gpus all --device /dev/infiniband \
  -d --name sglang4-<name>-r<rank> --entrypoint python3 <image> \
  /opt/sglang4/runtime/launch.py --rank <rank>
"""

# patches/manifest.json of the publisher's kit: one read-only bind per entry,
# src=<run_dir>/kit/patches/source/<rel>, dst=/sgl-workspace/sglang/<rel>.
PUBLISHED_OVERLAYS = [
    "python/sglang/srt/models/deepseek_v4.py",
    "python/sglang/kernels/ops/attention/flash_mla_sm120.py",
    "python/sglang/kernels/jit/csrc/deepseek_v4/c2.cuh",
    "python/sglang/kernels/ops/attention/dsv4/c2.py",
    "python/sglang/kernels/ops/attention/dsv4/candidate_blocks.py",
    "python/sglang/kernels/ops/attention/dsv4/indexer_postprocess.py",
    "python/sglang/srt/layers/attention/deepseek_v4_backend.py",
    "python/sglang/srt/speculative/dspark_components/dspark_worker_v2.py",
    "python/sglang/srt/distributed/device_communicators/pynccl.py",
    "python/sglang/srt/distributed/parallel_state.py",
    "python/sglang/srt/managers/scheduler_components/batch_result_processor.py",
]


def _options(words: list[str]) -> tuple[list[str], dict[str, tuple[str, bool]]]:
    """(plain options as 'flag value' items, mounts as dst -> (src, readonly)) of a docker run."""
    opts: list[str] = []
    mounts: dict[str, tuple[str, bool]] = {}
    i = words.index("run") + 1
    while i < len(words):
        w = words[i]
        if w == "--entrypoint":
            break
        if w == "--mount":
            fields = dict(f.split("=", 1) if "=" in f else (f, "") for f in words[i + 1].split(","))
            assert fields.pop("type") == "bind"
            mounts[fields["dst"]] = (fields["src"], "readonly" in fields)
            i += 2
        elif w in ("-d", "--rm"):
            opts.append(w)
            i += 1
        else:
            opts.append(f"{w} {words[i + 1]}")
            i += 2
    return opts, mounts


@pytest.fixture(scope="module")
def example() -> Any:
    return load_inventory(REPO / "inventory" / "example")


def test_every_published_option_is_rendered(example: Any) -> None:
    node = example.node("spark-2")
    ours, _ = _options(rank.container_command(example, node))
    published, _ = _options(shlex.split(PUBLISHED.replace("\\\n", " ")))
    for item in published:
        if item.startswith("--name ") or item == "-d":
            continue  # named per cluster below; the unit supervises it in the foreground
        assert item in ours, item
    assert f"--name {rank.container_name(example, node)}" in ours
    # sparkctl's additions: the environment from a 0600 file (the API key never in argv).
    assert sorted(set(ours) - set(published)) == [
        f"--env-file {common.RANK_ENV_FILE}", f"--name {rank.container_name(example, node)}"
    ]


def test_every_published_mount_is_rendered_with_the_same_target_and_mode(example: Any) -> None:
    node = example.node("spark-2")
    _, ours = _options(rank.container_command(example, node))
    _, published = _options(shlex.split(PUBLISHED.replace("\\\n", " ")))
    run_dir = str(example.paths.run_dir)
    current = kit.current(example)
    for rel in PUBLISHED_OVERLAYS:
        published[f"/sgl-workspace/sglang/{rel}"] = (f"<run_dir>/kit/patches/source/{rel}", True)
    # Same bytes, sparkctl's layout on the host: the checkpoint directory itself (the engine reads
    # the same /models/<sub> path), the verified kit version behind `current`, the cluster file
    # rendered from the inventory next to it.
    expected_src = {
        "/models": None,
        "/engram": str(example.paths.engram_dir),
        "/opt/sglang4": current,
        "/config/profile.json": kit.file_host_path(example, "/config/profile.json"),
        "/cache": f"{run_dir}/cache",
        "/state": f"{run_dir}/state",
    }
    for dst, (src, readonly) in published.items():
        if dst == "/models":
            model = rank.container_model_dir(example)
            assert ours[model] == (str(example.paths.model_dir), True)
            argv = rank.rank_argv(example, node)
            assert argv[argv.index("--model-path") + 1] == model
            continue
        assert dst in ours, f"missing mount {dst}"
        got_src, got_ro = ours[dst]
        assert got_ro == readonly, dst
        want = expected_src.get(dst) or src.replace("<run_dir>/kit", current)
        assert got_src == want, dst
    overlays = [dst for dst in ours if dst.startswith("/sgl-workspace/sglang/")]
    assert len(overlays) == 11
    # sparkctl's additions: the 0600 secrets file SGLang reads through --config, and the kit's
    # pre-start checks (one read-only file) the container runs before the engine.
    extra = set(ours) - set(published) - {rank.container_model_dir(example)}
    assert extra == {common.RANK_SECRETS_FILE, rank.CONTAINER_PRESTART}
    assert ours[rank.CONTAINER_PRESTART] == (rank.PRESTART_SCRIPT, True)


def test_the_engine_argv_is_the_one_plan_shows_after_the_prestart(example: Any) -> None:
    """The one deliberate difference in what the container runs: the kit launcher's checks first
    (``python3 /sparkctl-prestart.py <checks> --``), then SGLang with exactly the argv plan shows."""
    node = example.node("spark-2")
    cmd = rank.container_command(example, node)
    i = cmd.index("--entrypoint")
    assert cmd[i + 2] == example.runtime.image
    ran = [cmd[i + 1], *cmd[i + 3:]]
    assert ran[:2] == ["python3", rank.CONTAINER_PRESTART]
    cut = ran.index("--")
    assert ran[:cut + 1] == rank.prestart_command(example, rank.rank_argv(example, node))
    assert ran[cut + 1:] == rank.rank_argv(example, node)


def test_the_prestart_reads_the_launchers_inputs(example: Any) -> None:
    """The publisher's runtime/launch.py reads versions.lock.json, row-store-build.json (key
    row_store_library_sha256, product adapter/librow_store.so), vendor/b12x-source-manifest.json
    (files under b12x/), patches/manifest.json over /sgl-workspace/sglang, and
    /models/<model_subpath>/config.json; the pre-start is given the same."""
    words = rank.prestart_command(example, rank.rank_argv(example, example.node("spark-2")))
    text = " ".join(words)
    assert "--kit /opt/sglang4" in text
    assert "--manifest patches/manifest.json --overlay-target /sgl-workspace/sglang" in text
    assert "--lock versions.lock.json" in text
    assert f"--model-config {rank.container_model_dir(example)}/config.json" in text
    assert "--build-record row-store-build.json row_store_library_sha256 adapter/librow_store.so" in text
    assert "--source-manifest vendor/b12x-source-manifest.json b12x" in text


# The variables the publisher's launcher puts in each rank's environment: environment() of
# rhys101's runtime/configuration.py (at 4195625a4ed65d261612c4e19030d28068dfdad0), in its order.
# No traffic class among them: neither publisher sets NCCL_IB_TC or B12X_ROCE_TRAFFIC_CLASS.
PUBLISHED_ENV = [
    "SGLANG4_NVME_PROFILE", "SGLANG8_RESIDENT_PROFILE", "PYTHONPATH", "SGLANG4_ROCE_ALLREDUCE",
    "DSV41_SOURCE", "DSV41_PACKED_DIR", "OFFLOAD_MODE", "DSV41_CACHE_GIB", "DSV41_RESIDENT_SCALES",
    "DSV41_IO_THREADS", "DSV41_STATS_SECONDS", "NNODES", "SGLANG8_RETRY_FREE_ADMISSION",
    "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE", "SGLANG_ENABLE_DSV41_ENGRAM_KV_PREFETCH", "DSV41_TP_PAD",
    "DSV41_MXFP8_BACKEND", "DSV41_PREFILL_EMPTY_CACHE_TOKENS", "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE",
    "PYTORCH_CUDA_ALLOC_CONF", "SGLANG_RAGGED_VERIFY_MODE", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
    "NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_IB_ADDR_FAMILY", "NCCL_NET", "NCCL_CUMEM_ENABLE",
    "NCCL_NVLS_ENABLE", "NCCL_BUFFSIZE", "NCCL_LL128_BUFFSIZE", "NCCL_PROTO", "NCCL_MAX_NCHANNELS",
    "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "CUDA_VISIBLE_DEVICES", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
    "HF_HOME", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "B12X_ROCE_CACHE_DIR", "B12X_COMPILE_CACHE_DIR",
    "CUTE_DSL_CACHE_DIR", "FLASHINFER_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS",
]


@pytest.mark.parametrize(("switch_type", "lossless"),
                         [("routeros", True), ("nvue", True), ("linux", False), (None, False)])
def test_the_rank_environment_adds_only_the_listed_variables(
    example: Any, switch_type: str | None, lossless: bool
) -> None:
    sw = None if switch_type is None else example.switch.model_copy(update={"type": switch_type})
    cluster = example.model_copy(update={"switch": sw})
    ours = rank.rank_env(cluster, cluster.node("spark-2"))
    assert set(PUBLISHED_ENV) <= set(ours)
    # sparkctl's deliberate differences: the address SGLang advertises to the other ranks, and the
    # traffic class 106 (DSCP 26 + ECN) only where sparkctl configures the switch's lossless class
    # for it (PFC on priority 3: RouterOS, NVUE; not the lab's Linux bridge, not a switchless site).
    extra = {"SGLANG_HOST_IP"} | ({"NCCL_IB_TC", "B12X_ROCE_TRAFFIC_CLASS"} if lossless else set())
    assert set(ours) - set(PUBLISHED_ENV) == extra
