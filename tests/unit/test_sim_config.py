"""The simulator parses a real SGLang argv (and --config YAML) the way SGLang does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkctl_sim.config import ArgError, parse_argv, parse_simple_yaml
from sparkctl_sim.knobs import knob_env, load_knobs

R4_LIKE = [
    "serve",
    "--min-free-slots-delay", "1",
    "--model-path", "/models/DeepSeek-V4.1-Flash",
    "--served-model-name", "deepseek-v41-flash",
    "--trust-remote-code",
    "--tp-size", "4", "--ep-size", "4",
    "--nnodes", "4", "--node-rank", "2",
    "--dist-init-addr", "10.251.0.10:29649",
    "--moe-runner-backend", "flashinfer_mxfp4",
    "--speculative-moe-runner-backend", "flashinfer_mxfp4",
    "--context-length", "1000000",
    "--max-running-requests", "8",
    "--chunked-prefill-size", "2048",
    "--max-total-tokens", "4000000",
    "--mem-fraction-static", "0.8",
    "--cuda-graph-bs-decode", "1", "2", "3", "4",
    "--speculative-algorithm", "DSPARK",
    "--speculative-dspark-block-size", "5",
    "--limit-mm-data-per-request", '{"image":4,"video":0,"audio":0}',
    "--random-seed", "-1",
    "--host", "0.0.0.0", "--port", "8004",
]  # fmt: skip


def test_known_flags_are_typed_and_unknown_flags_kept() -> None:
    cfg = parse_argv(R4_LIKE)
    v = cfg.values
    assert (v["tp_size"], v["ep_size"], v["nnodes"], v["node_rank"]) == (4, 4, 4, 2)
    assert v["mem_fraction_static"] == 0.8
    assert v["context_length"] == 1_000_000 and v["max_running_requests"] == 8
    assert v["speculative_num_draft_tokens"] == 6  # block size + 1, as SGLang resolves it
    assert v["trust_remote_code"] is True
    assert v["min_free_slots_delay"] == 1
    assert v["cuda_graph_bs_decode"] == [1, 2, 3, 4]
    assert v["limit_mm_data_per_request"] == '{"image":4,"video":0,"audio":0}'
    assert v["random_seed"] == -1
    assert cfg.dist_init() == ("10.251.0.10", 29649)
    assert not cfg.is_head and cfg.served_model_name == "deepseek-v41-flash"


def test_without_serve_word_and_aliases_and_equals_form() -> None:
    cfg = parse_argv(
        ["--tp", "2", "--expert-parallel-size=2", "--nccl-init-addr", "[::1]:5000", "--nnodes", "2"]
    )
    assert cfg["tp_size"] == 2 and cfg["ep_size"] == 2
    assert cfg.dist_init() == ("::1", 5000)
    assert cfg["host"] == "127.0.0.1" and cfg["port"] == 30000  # SGLang's defaults
    assert cfg.served_model_name == "default"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tp-size", "four"], "invalid int value"),
        (["--tp-size", "3", "--nnodes", "4", "--node-rank", "0", "--dist-init-addr", "h:1"], "divisible"),
        (["--nnodes", "4", "--node-rank", "4", "--tp-size", "4", "--dist-init-addr", "h:1"], "outside 0..3"),
        (["--nnodes", "2", "--tp-size", "2"], "--dist-init-addr is required"),
        (["--trust-remote-code", "yes"], "ignored explicit argument"),
        (["positional"], "unrecognized arguments"),
        (["--speculative-dspark-block-size", "0"], "to be positive, got 0"),
    ],
)
def test_bad_argv_is_refused_with_the_reason(argv: list[str], message: str) -> None:
    with pytest.raises(ArgError, match=message):
        parse_argv(argv)


def test_config_yaml_is_merged_and_the_command_line_wins(tmp_path: Path) -> None:
    conf = tmp_path / "sglang.yaml"
    conf.write_text(
        "# written by sparkctl, mode 0600\n"
        "api-key: 'sk-lab secret'\n"
        "context_length: 4096\n"
        "enable-metrics: true\n"
        "skip-server-warmup: false\n"
        "cuda-graph-bs-decode: [1, 2]\n"
        "extra-list:\n"
        "  - a\n"
        "  - b # trailing comment\n"
    )
    os.chmod(conf, 0o600)
    cfg = parse_argv(["serve", "--config", str(conf), "--context-length", "8192"])
    assert cfg.api_key == "sk-lab secret"
    assert cfg.context_length == 8192
    assert cfg["enable_metrics"] is True and cfg["skip_server_warmup"] is False
    assert cfg["cuda_graph_bs_decode"] == [1, 2]
    assert cfg["extra_list"] == ["a", "b"]
    assert cfg.public()["api_key"] == "sk-lab secret"  # as SGLang's /server_info shows it


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ArgError, match="cannot read"):
        parse_argv(["--config", str(tmp_path / "missing.yaml")])
    with pytest.raises(ArgError, match=r"bad.yaml:2: nested mappings"):
        (tmp_path / "bad.yaml").write_text("a: 1\n  b: 2\n")
        parse_argv(["--config", str(tmp_path / "bad.yaml")])
    assert parse_simple_yaml("k: \"x\\ty\" # c\nn: null\nq: 'it''s'\n") == {
        "k": "x\ty",
        "n": None,
        "q": "it's",
    }


def test_knobs_from_environment() -> None:
    knobs = load_knobs({"SPARKCTL_SIM_TOKEN_RATE": "82.5", "SPARKCTL_SIM_FAULT": "wrong-arithmetic, blind"})
    assert knobs.token_rate == 82.5 and knobs.has("blind") and knobs.has("wrong-arithmetic")
    assert load_knobs({}).boot_delay_s == 2.0
    with pytest.raises(ArgError, match="unknown fault"):
        load_knobs({"SPARKCTL_SIM_FAULT": "explode"})
    with pytest.raises(ArgError, match="SPARKCTL_SIM_HOLD_MIB"):
        load_knobs({"SPARKCTL_SIM_HOLD_MIB": "-5"})
    with pytest.raises(ArgError, match="TOKEN_RATE"):
        load_knobs({"SPARKCTL_SIM_TOKEN_RATE": "0"})


def test_profile_simulator_section_maps_onto_knobs() -> None:
    env = knob_env(
        {"boot_delay_s": 3, "token_rate": 40, "hold_mem_mib": 256, "faults": ["blind"], "ttft_s": 0.2}
    )
    assert env == {
        "SPARKCTL_SIM_BOOT_DELAY_S": "3",
        "SPARKCTL_SIM_TOKEN_RATE": "40",
        "SPARKCTL_SIM_HOLD_MIB": "256",
        "SPARKCTL_SIM_FAULT": "blind",
        "SPARKCTL_SIM_TTFT_S": "0.2",
    }
    assert load_knobs(env).hold_mib == 256
    with pytest.raises(ValueError, match=r"simulator.speed: unknown simulator setting"):
        knob_env({"speed": 3})
    with pytest.raises(ValueError, match="TOKEN_RATE"):
        knob_env({"token_rate": -1})
