"""Serving profiles: the rendered argv against the published flags, overrides, memory arithmetic."""

from __future__ import annotations

import pytest
from support.published import M1_PUBLISHED, R4_PUBLISHED, split_flags

from sparkctl.errors import InputError
from sparkctl.profiles import CLUSTER_FLAGS, list_profiles, load_profile

R4_ENV = {
    "SGLANG4_NVME_PROFILE": "1", "SGLANG8_RESIDENT_PROFILE": "0",
    "PYTHONPATH": "/opt/sglang4/adapter:/opt/sglang4/runtime:/opt/sglang4/b12x",
    "SGLANG4_ROCE_ALLREDUCE": "1", "DSV41_SOURCE": "${model_dir}", "DSV41_PACKED_DIR": "${engram_dir}",
    "OFFLOAD_MODE": "nvme", "DSV41_CACHE_GIB": "0", "DSV41_RESIDENT_SCALES": "0", "DSV41_IO_THREADS": "96",
    "DSV41_STATS_SECONDS": "60", "NNODES": "4", "SGLANG8_RETRY_FREE_ADMISSION": "0",
    "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE": "0", "SGLANG_ENABLE_DSV41_ENGRAM_KV_PREFETCH": "0",
    "DSV41_TP_PAD": "0", "DSV41_MXFP8_BACKEND": "b12x", "DSV41_PREFILL_EMPTY_CACHE_TOKENS": "8192",
    "SGLANG_FLASHINFER_MOE_FUSED_FINALIZE": "0", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
    "SGLANG_RAGGED_VERIFY_MODE": "static", "NCCL_IB_DISABLE": "0", "NCCL_IB_ADDR_FAMILY": "AF_INET",
    "NCCL_NET": "IB", "NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0", "NCCL_BUFFSIZE": "1048576",
    "NCCL_LL128_BUFFSIZE": "262144", "NCCL_PROTO": "^LL128", "NCCL_MAX_NCHANNELS": "8",
    "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "CUDA_VISIBLE_DEVICES": "0",
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": "${cache_dir}/huggingface",
    "XDG_CACHE_HOME": "${cache_dir}", "TRITON_CACHE_DIR": "${cache_dir}/triton",
    "B12X_ROCE_CACHE_DIR": "${cache_dir}/roce", "B12X_COMPILE_CACHE_DIR": "${cache_dir}/b12x",
    "CUTE_DSL_CACHE_DIR": "${cache_dir}/cute", "FLASHINFER_CUDA_ARCH_LIST": "12.1a",
    "TORCH_CUDA_ARCH_LIST": "12.1a", "MAX_JOBS": "2",
}


def profile_words(name: str) -> list[str]:
    from sparkctl.render.common import flag_values

    words: list[str] = []
    for flag, value in load_profile(name).args.items():
        words += flag_values(flag, value)
    return words


def test_shipped_profiles_load() -> None:
    assert list_profiles() == ["lab", "m1-1m", "mia-ring-tp4", "mia-tp3", "mia-tp8", "r4-nvme", "sg17-tp8"]
    for name in list_profiles():
        profile = load_profile(name)
        assert profile.name == name
        assert profile.memory_problems() == []


# What sparkctl adds after the published flags: SGLang's Prometheus metrics on rank 0's /metrics
# (both), and M1's vision made explicit.
SPARKCTL_ADDED = {
    "r4-nvme": [("--enable-metrics", [])],
    # M1's launcher names no multimodal flag (vision is SGLang's default there); sparkctl makes it explicit.
    "m1-1m": [("--enable-metrics", []), ("--enable-multimodal", [])],
}


@pytest.mark.parametrize(("name", "published"), [("r4-nvme", R4_PUBLISHED), ("m1-1m", M1_PUBLISHED)])
def test_profile_flags_match_the_published_launch(name: str, published: list[tuple[str, list[str]]]) -> None:
    rendered = split_flags(profile_words(name))
    wanted = published + SPARKCTL_ADDED[name]
    for (flag, values), (want_flag, want_values) in zip(rendered, wanted, strict=True):
        assert (flag, values) == (want_flag, want_values), f"{name}: {flag}"


def test_r4_environment_is_the_published_table() -> None:
    assert load_profile("r4-nvme").env == R4_ENV


def test_convenience_properties() -> None:
    r4 = load_profile("r4-nvme")
    assert (r4.tp_size, r4.ep_size, r4.context_length) == (4, 4, 1_000_000)
    assert (r4.max_total_tokens, r4.chunk) == (4_000_000, 2048)
    assert r4.mem_fraction_static == 0.8
    assert r4.max_running_requests == 8
    assert r4.served_model_name == "deepseek-v41-flash"
    m1 = load_profile("m1-1m")
    assert (m1.context_length, m1.max_total_tokens, m1.chunk) == (1_048_576, 8_000_000, 1024)
    assert m1.published is not None and m1.published.prose[1] == 45.4
    assert load_profile("lab").simulator is not None
    assert r4.simulator is None


def test_published_figures() -> None:
    pub = load_profile("r4-nvme").published
    assert pub is not None
    assert pub.coding == {1: 82.73, 4: 211.81, 8: 340.41}
    assert pub.prose == {1: 52.62, 4: 116.91, 8: 162.18}
    assert [n.tokens for n in pub.needle] == [32870, 131174, 299102]


def test_memory_arithmetic_uses_kv_bytes_per_token() -> None:
    r4 = load_profile("r4-nvme")
    assert r4.kv_pool_gib == pytest.approx(4_000_000 * 1670.75 / 2**30)
    assert r4.prefill_transient_gib == pytest.approx(14 * 2048 * 1_000_000 / 2**30)
    # room outside the pool = unified - floor - weights - KV pin
    assert r4.transient_limit_gib == pytest.approx(121.7 - 2 - 71.9 - r4.kv_pool_gib)


def test_a_4096_chunk_at_1m_context_is_refused_with_the_arithmetic() -> None:
    profile = load_profile("m1-1m", {"args": {"--chunked-prefill-size": 4096}})
    problems = profile.memory_problems()
    assert len(problems) == 1
    assert "4,096 x context 1,048,576 = 56.00 GiB" in problems[0]
    assert "--chunked-prefill-size 1024 or less" in problems[0]


def test_an_oversized_kv_pin_is_refused() -> None:
    profile = load_profile("m1-1m", {"args": {"--max-total-tokens": 16_000_000}})
    (problem,) = [p for p in profile.memory_problems() if p.startswith("KV pin")]
    assert "16,000,000 tokens x 1670.75 B" in problem
    assert f"at most {profile.max_kv_tokens():,}" in problem


def test_overrides_merge_per_key_and_keep_order() -> None:
    base = load_profile("r4-nvme")
    over = load_profile(
        "r4-nvme",
        {
            "args": {"--watchdog-timeout": 2400, "--enable-cache-report": False, "--enable-metrics": True},
            "env": {"NCCL_DEBUG": "WARN", "MAX_JOBS": None, "EXTRA_KNOB": 7},
            "gates": {"boot_timeout_s": 3000},
        },
    )
    assert over.args["--watchdog-timeout"] == 2400
    assert "--enable-cache-report" not in over.args
    assert list(over.args)[-1] == "--enable-metrics"
    assert list(over.args)[:5] == list(base.args)[:5]
    assert over.env["NCCL_DEBUG"] == "WARN" and "MAX_JOBS" not in over.env and over.env["EXTRA_KNOB"] == "7"
    assert over.gates.boot_timeout_s == 3000
    assert over.gates.log_markers == base.gates.log_markers
    assert over.memory == base.memory


@pytest.mark.parametrize("flag", sorted(CLUSTER_FLAGS))
def test_cluster_flags_are_refused_in_a_profile(flag: str) -> None:
    with pytest.raises(InputError) as err:
        load_profile("r4-nvme", {"args": {flag: "x"}})
    assert any(f"sparkctl_profile_overrides.args.{flag}: sparkctl renders it" in d for d in err.value.details)


def test_every_problem_is_reported_with_its_field() -> None:
    with pytest.raises(InputError) as err:
        load_profile(
            "m1-1m",
            {
                "args": {"--host": "1.2.3.4", "--Bad_Flag": 1, "--x": "${nowhere}"},
                "env": {"NCCL_IB_HCA": "mlx5_0", "FLAG": True},
                "memory": {"floor_gib": "lots"},
                "gates": {"log_markers": [{"pattern": "("}]},
                "typo": 1,
            },
        )
    details = err.value.details
    assert err.value.exit_code == 2
    expected = [
        "sparkctl_profile_overrides.args.--host:",
        "sparkctl_profile_overrides.args.--Bad_Flag: not a long flag",
        "sparkctl_profile_overrides.args.--x: unknown placeholder ${nowhere}",
        "sparkctl_profile_overrides.args.--x: SGLang 0.5.23 has no such flag",
        "sparkctl_profile_overrides.env.NCCL_IB_HCA: sparkctl renders it",
        "sparkctl_profile_overrides.env.FLAG: value must be a string",
        "sparkctl_profile_overrides.memory.floor_gib:",
        "sparkctl_profile_overrides.gates.log_markers.0.pattern: not a regular expression",
        "sparkctl_profile_overrides.typo: Extra inputs are not permitted",
    ]
    for want in expected:
        assert any(d.startswith(want) for d in details), (want, details)
    assert len(details) == len(expected)


def test_unknown_profile_names_the_choices() -> None:
    with pytest.raises(InputError) as err:
        load_profile("r5-nvme")
    assert "r4-nvme" in (err.value.hint or "")


def test_the_name_cannot_be_overridden() -> None:
    with pytest.raises(InputError, match="sparkctl_profile"):
        load_profile("lab", {"name": "other"})


def test_expected_server_info_comes_from_the_flags() -> None:
    info = load_profile("r4-nvme").expected_server_info()
    assert info["max_total_tokens"] == 4_000_000
    assert info["speculative_dspark_block_size"] == 5
    assert info["moe_runner_backend"] == "flashinfer_mxfp4"
