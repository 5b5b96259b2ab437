"""``/metrics`` of a simulated rank: SGLang 0.5.23's metric names, kinds and labels.

SGLang (``--enable-metrics``) exposes ``prometheus_client`` metrics labelled ``model_name``,
``engine_type``, ``tp_rank`` and ``pp_rank``; the names below are the ones its
``srt/observability/metrics_collector.py`` declares that a serving dashboard and the supervisor
use, with the same kinds (gauges, counters with ``_total``, histograms with SGLang's buckets), so
one dashboard and one set of alerts work on the lab and on real Sparks. Values come from the
simulator's scheduler and move with the load; ``sparkctl_sim_*`` series say what is simulated.

Standard library only: the text format is written here, not by ``prometheus_client``.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkctl_sim.rank import RankProcess

# SGLang's bucket bounds (seconds) for its latency histograms.
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
                200.0, 400.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
               0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
               200.0, 400.0, 800.0)
ENGINE_TYPE = "unified"  # SGLang's value outside prefill/decode disaggregation


class Histogram:
    """A cumulative histogram as Prometheus keeps it: per-bucket counts, count and sum."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.count = 0
        self.sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float, times: int = 1) -> None:
        if times <= 0:
            return
        with self._lock:
            self.counts[bisect.bisect_left(self.bounds, value)] += times
            self.count += times
            self.sum += value * times

    def cumulative(self) -> list[tuple[str, int]]:
        with self._lock:
            out, running = [], 0
            for bound, n in zip((*map(_le, self.bounds), "+Inf"), self.counts, strict=True):
                running += n
                out.append((bound, running))
            return out


def _le(bound: float) -> str:
    return repr(float(bound))


def _labels(labels: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(str(v))}"' for k, v in labels.items()) + "}"


class Exposition:
    """Prometheus text format 0.0.4, one family at a time."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.lines: list[str] = []

    def _head(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def gauge(self, name: str, help_text: str, value: float) -> None:
        self._head(name, "gauge", help_text)
        self.lines.append(f"{name}{_labels(self.labels)} {_num(value)}")

    def counter(self, name: str, help_text: str, value: float) -> None:
        self._head(name, "counter", help_text)
        self.lines.append(f"{name}{_labels(self.labels)} {_num(value)}")

    def histogram(self, name: str, help_text: str, hist: Histogram) -> None:
        self._head(name, "histogram", help_text)
        for le, n in hist.cumulative():
            self.lines.append(f"{name}_bucket{_labels({**self.labels, 'le': le})} {n}")
        self.lines.append(f"{name}_count{_labels(self.labels)} {hist.count}")
        self.lines.append(f"{name}_sum{_labels(self.labels)} {_num(hist.sum)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _num(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def metrics_text(rank: RankProcess) -> str:
    """The /metrics body of one simulated rank."""
    cfg, sched, knobs, held = rank.cfg, rank.sched, rank.knobs, rank.held
    out = Exposition({
        "model_name": cfg.served_model_name,
        "engine_type": ENGINE_TYPE,
        "tp_rank": str(cfg.node_rank),  # one GPU per node: the node rank is the TP rank
        "pp_rank": "0",
    })
    capacity = int(cfg["max_total_tokens"] or 0)
    used = sched.kv_used_tokens(capacity)
    block = cfg["speculative_dspark_block_size"]
    out.gauge("sglang:num_running_reqs", "The number of running requests.", sched.running)
    out.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", sched.waiting)
    out.gauge("sglang:num_retracted_reqs", "The number of retracted requests.", 0)
    out.gauge("sglang:gen_throughput", "The generation throughput (token/s).",
              round(sched.last_gen_throughput, 3))
    out.gauge("sglang:token_usage", "The token usage.", round(used / capacity, 6) if capacity else 0.0)
    out.gauge("sglang:kv_used_tokens", "The number of KV cache tokens in use.", used)
    out.gauge("sglang:kv_available_tokens", "The number of free KV cache tokens.", max(0, capacity - used))
    out.gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0)
    out.gauge("sglang:spec_accept_length", "The average acceptance length of speculative decoding.",
              round(0.61 * (block + 1), 2) if block else 0.0)
    out.counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.",
                sched.prompt_tokens_total)
    out.counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
                sched.generation_tokens_total)
    out.counter("sglang:num_requests_total", "Number of requests processed.", sched.finished)
    out.histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                  sched.ttft_hist)
    out.histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                  sched.itl_hist)
    out.histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                  sched.e2e_hist)
    lost = len(getattr(rank.group, "lost", ()) or ())
    out.gauge("sparkctl_sim_simulator", "1: this endpoint is the sparkctl rank simulator", 1)
    out.gauge("sparkctl_sim_token_rate", "Configured decode tokens per second per request", knobs.token_rate)
    out.gauge("sparkctl_sim_held_bytes", "Memory the simulator holds", len(held) if held is not None else 0)
    out.gauge("sparkctl_sim_peers_lost", "Worker ranks rank 0 has lost", lost)
    out.gauge("sparkctl_sim_up", "1 when the rank serves", 0 if rank.health_problem() else 1)
    out.counter("sparkctl_sim_requests_received_total", "Chat requests received", sched.requests_total)
    out.counter("sparkctl_sim_request_errors_total", "Chat requests refused as invalid", sched.errors_total)
    return out.text()
