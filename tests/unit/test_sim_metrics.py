"""The simulator's /metrics speaks SGLang 0.5.23's names, kinds and labels (shared/reference
sglang-metrics.md), parsed with prometheus_client's own text parser, and its values move with load."""

from __future__ import annotations

import os
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkctl_sim.config import parse_argv
from sparkctl_sim.knobs import load_knobs
from sparkctl_sim.metrics import TTFT_BUCKETS, Histogram
from sparkctl_sim.rank import RankProcess

# name as exposed -> kind, from SGLang's metrics_collector.py (the table a dashboard relies on)
SGLANG = {
    "sglang:num_running_reqs": "gauge",
    "sglang:num_queue_reqs": "gauge",
    "sglang:num_retracted_reqs": "gauge",
    "sglang:gen_throughput": "gauge",
    "sglang:token_usage": "gauge",
    "sglang:kv_used_tokens": "gauge",
    "sglang:kv_available_tokens": "gauge",
    "sglang:cache_hit_rate": "gauge",
    "sglang:spec_accept_length": "gauge",
    "sglang:time_to_first_token_seconds": "histogram",
    "sglang:inter_token_latency_seconds": "histogram",
    "sglang:e2e_request_latency_seconds": "histogram",
    "sglang:prompt_tokens_total": "counter",
    "sglang:generation_tokens_total": "counter",
    "sglang:num_requests_total": "counter",
}
LABELS = {"model_name": "deepseek-v41-flash", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}


@pytest.fixture
def rank(monkeypatch: pytest.MonkeyPatch) -> RankProcess:
    for key in [k for k in os.environ if k.startswith("SPARKCTL_SIM_")]:
        monkeypatch.delenv(key)
    cfg = parse_argv([
        "serve", "--model-path", "/models/m", "--served-model-name", "deepseek-v41-flash",
        "--tp-size", "4", "--nnodes", "4", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:1",
        "--max-total-tokens", "131072", "--max-running-requests", "8", "--enable-metrics",
        "--speculative-algorithm", "DSPARK", "--speculative-dspark-block-size", "5",
    ])  # fmt: skip
    return RankProcess(cfg, load_knobs())


def families(text: str) -> dict[str, Any]:
    out = {}
    for fam in text_string_to_metric_families(text):
        # The parser names a counter family without _total; SGLang's names carry it.
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        out[name] = fam
    return out


def test_names_kinds_and_labels_are_sglangs(rank: RankProcess) -> None:
    fams = families(rank.metrics_text())
    for name, kind in SGLANG.items():
        assert name in fams, f"{name} missing"
        assert fams[name].type == kind, f"{name} is a {fams[name].type}, SGLang's is a {kind}"
        for sample in fams[name].samples:
            assert {k: v for k, v in sample.labels.items() if k != "le"} == LABELS, sample
    text = rank.metrics_text()
    assert "# TYPE sglang:prompt_tokens_total counter" in text  # as prometheus_client writes it
    buckets = [s for s in fams["sglang:time_to_first_token_seconds"].samples if s.name.endswith("_bucket")]
    assert [s.labels["le"] for s in buckets][-1] == "+Inf" and len(buckets) == len(TTFT_BUCKETS) + 1


def test_values_move_with_requests(rank: RankProcess) -> None:
    before = families(rank.metrics_text())
    assert before["sglang:generation_tokens_total"].samples[0].value == 0
    rank.sched.record(prompt_tokens=100, completion_tokens=51, ttft=0.15, e2e=1.4, decode_s=1.25)
    rank.sched.record(prompt_tokens=20, completion_tokens=11, ttft=0.05, e2e=0.3, decode_s=0.25)
    rank.sched.running = 2  # two requests decoding now
    fams = families(rank.metrics_text())

    def value(name: str, suffix: str = "", le: str | None = None) -> float:
        return next(s.value for s in fams[name].samples
                    if s.name == name.removesuffix("_total") + suffix or s.name == name + suffix
                    if le is None or s.labels.get("le") == le)

    assert value("sglang:generation_tokens_total") == 62
    assert value("sglang:prompt_tokens_total") == 120
    assert value("sglang:num_requests_total") == 2
    assert value("sglang:gen_throughput") == 40.0  # the last request: 10 tokens after the first in 0.25 s
    ttft = "sglang:time_to_first_token_seconds"
    assert value(ttft, "_bucket", "0.1") == 1 and value(ttft, "_bucket", "0.2") == 2
    assert value(ttft, "_count") == 2 and value(ttft, "_sum") == pytest.approx(0.2)
    assert value("sglang:inter_token_latency_seconds", "_count") == 60  # one per token after the first
    assert value("sglang:kv_used_tokens") == 2 * (120 + 62) // 2
    assert value("sglang:token_usage") == pytest.approx(182 / 131072, rel=1e-3)
    assert value("sglang:kv_available_tokens") == 131072 - 182
    assert value("sglang:spec_accept_length") == pytest.approx(0.61 * 6, abs=0.01)


def test_histogram_is_cumulative() -> None:
    h = Histogram((1.0, 2.0))
    h.observe(0.5)
    h.observe(1.0)
    h.observe(1.5, times=3)
    h.observe(9.0)
    assert h.cumulative() == [("1.0", 2), ("2.0", 5), ("+Inf", 6)]
    assert (h.count, h.sum) == (6, 0.5 + 1.0 + 4.5 + 9.0)
