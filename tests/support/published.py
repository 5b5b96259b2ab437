"""The publishers' serving launches, flag by flag in their order, without the flags sparkctl derives
from the inventory; and argv words split into (flag, values) pairs to compare against them."""

from __future__ import annotations

# The published launch of rhys101's TP4 NVMe profile, flag by flag, in the publisher's order
# (seed-profiles.md A.1), without the flags sparkctl derives from the inventory.
R4_PUBLISHED = [
    ("--min-free-slots-delay", ["1"]),
    ("--served-model-name", ["deepseek-v41-flash"]),
    ("--load-format", ["safetensors"]),
    ("--dtype", ["bfloat16"]),
    ("--trust-remote-code", []),
    ("--tp-size", ["4"]),
    ("--ep-size", ["4"]),
    ("--attention-backend", ["dsv4"]),
    ("--moe-runner-backend", ["flashinfer_mxfp4"]),
    ("--speculative-moe-runner-backend", ["flashinfer_mxfp4"]),
    ("--fp8-gemm-backend", ["flashinfer_cutlass"]),
    ("--kv-cache-dtype", ["auto"]),
    ("--context-length", ["1000000"]),
    ("--max-running-requests", ["8"]),
    ("--chunked-prefill-size", ["2048"]),
    ("--max-prefill-tokens", ["2048"]),
    ("--max-total-tokens", ["4000000"]),
    ("--mem-fraction-static", ["0.8"]),
    ("--cuda-graph-max-bs-decode", ["8"]),
    ("--cuda-graph-bs-decode", ["1", "2", "3", "4", "5", "6", "7", "8"]),
    ("--enable-decoder-swa-bounded-replay", []),
    ("--disable-custom-all-reduce", []),
    ("--speculative-algorithm", ["DSPARK"]),
    ("--speculative-dspark-block-size", ["5"]),
    ("--speculative-accept-threshold-single", ["1.0"]),
    ("--speculative-accept-threshold-acc", ["1.0"]),
    ("--random-seed", ["0"]),
    ("--enable-multimodal", []),
    ("--limit-mm-data-per-request", ['{"image":4,"video":0,"audio":0}']),
    ("--default-chat-template-kwargs", ['{"thinking":false}']),
    ("--tool-call-parser", ["deepseekv41"]),
    ("--reasoning-parser", ["deepseek-v41"]),
    ("--enable-cache-report", []),
    ("--watchdog-timeout", ["1800"]),
]

# The Mia four-rank profile (seed-profiles.md A.2, boot.py + EXTRA_SGLANG_ARGS at e0985205).
M1_PUBLISHED = [
    ("--served-model-name", ["deepseek-v4.1-flash"]),
    ("--trust-remote-code", []),
    ("--load-format", ["safetensors"]),
    ("--tp-size", ["4"]),
    ("--ep-size", ["4"]),
    ("--attention-backend", ["dsv4"]),
    ("--moe-runner-backend", ["flashinfer_mxfp4"]),
    ("--mem-fraction-static", ["0.80"]),
    ("--chunked-prefill-size", ["1024"]),
    ("--context-length", ["1048576"]),
    ("--max-running-requests", ["8"]),
    ("--cuda-graph-max-bs-decode", ["8"]),
    ("--random-seed", ["0"]),
    ("--enable-decoder-swa-bounded-replay", []),
    ("--tool-call-parser", ["deepseekv41"]),
    ("--reasoning-parser", ["deepseek-v41"]),
    ("--speculative-algorithm", ["DSPARK"]),
    ("--speculative-dspark-block-size", ["3"]),
    ("--max-total-tokens", ["8000000"]),
    ("--fp8-gemm-backend", ["flashinfer_cutlass"]),
    ("--watchdog-timeout", ["1800"]),
    ("--min-free-slots-delay", ["1"]),
]


def split_flags(words: list[str]) -> list[tuple[str, list[str]]]:
    """argv words -> [(flag, values)] in order."""
    out: list[tuple[str, list[str]]] = []
    for word in words:
        if word.startswith("--"):
            out.append((word, []))
        else:
            out[-1][1].append(word)
    return out
