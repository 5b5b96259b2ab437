"""`sparkctl status --format prometheus`: the status snapshot as Prometheus text exposition.

Meant for node_exporter's textfile collector on the controller (``-o DIR/sparkctl.prom`` writes the
file atomically, as the collector requires) or any cron job that keeps a ``.prom`` file fresh. The
names follow the node exporter's (``sparkctl_*``, base units, the same suffixes) under a
``sparkctl_status_`` prefix, so a series of the controller's view never collides with a node's own:
``sparkctl_gpu_temperature_celsius`` comes from a node's exporter, scraped every 15 s,
``sparkctl_status_gpu_temperature_celsius`` from the last `status` run. The exporter's series carry
no node label (the scrape configuration adds ``cluster``, ``node``, ``rank``); these carry them
themselves, since one file holds the whole cluster.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from sparkctl.serve import thermals
from sparkctl.serve.verdict import DEGRADED, DOWN, READY, Snapshot

if TYPE_CHECKING:
    from sparkctl.model import Cluster

VERDICTS = (READY, DEGRADED, DOWN)
HOT_LEVEL = {None: 0, thermals.WARN: 1, thermals.CRIT: 2}


class StatusCollector:
    """Yields one snapshot's metrics (the snapshot is taken before; collecting reads nothing)."""

    def __init__(self, cluster: Cluster, snap: Snapshot) -> None:
        self.cluster = cluster
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        name = str(self.cluster.name)
        snap = self.snap
        yield _one("sparkctl_status_ready", "1 when `sparkctl status` says ready", name,
                   snap.verdict == READY)
        verdict = GaugeMetricFamily("sparkctl_status_verdict", "The verdict (1 for the current one)",
                                    labels=["cluster", "verdict"])
        for v in VERDICTS:
            verdict.add_metric([name, v], 1 if snap.verdict == v else 0)
        yield verdict
        yield _one("sparkctl_status_reasons", "Problems behind a verdict other than ready", name,
                   len(snap.reasons))
        yield _one("sparkctl_status_warnings", "Warnings beside the verdict (hot or throttled GPUs)", name,
                   len(snap.warnings))
        yield _one("sparkctl_status_probe_seconds", "Time the status probe took", name, snap.seconds)
        yield _one("sparkctl_status_timestamp_seconds", "When the status was taken (Unix time)", name,
                   snap.taken_at)
        yield from self._nodes(name)
        yield from self._gpus(name)
        yield from self._head(name)

    def _nodes(self, cluster: str) -> Iterator[Metric]:
        labels = ["cluster", "node", "rank"]
        fams = {
            "reachable": GaugeMetricFamily("sparkctl_status_node_reachable",
                                           "1 when the node answered the status probe", labels=labels),
            "active": GaugeMetricFamily("sparkctl_status_rank_unit_active", "1 when the rank unit is active",
                                        labels=labels),
            "mem": GaugeMetricFamily("sparkctl_status_memory_available_bytes", "MemAvailable of the node",
                                     labels=labels),
            "shards": GaugeMetricFamily("sparkctl_status_shards_verified",
                                        "1 when the rank's packed shards match their manifest (stat)",
                                        labels=labels),
        }
        link_up = GaugeMetricFamily("sparkctl_status_link_up", "1 when the fabric interface is up",
                                    labels=[*labels, "netdev"])
        link_mtu = GaugeMetricFamily("sparkctl_status_link_mtu_bytes", "Fabric interface MTU",
                                     labels=[*labels, "netdev"])
        for f in sorted(self.snap.nodes.values(), key=lambda f: f.rank):
            key = [cluster, f.name, str(f.rank)]
            fams["reachable"].add_metric(key, 1 if f.reachable and not f.error else 0)
            if not f.reachable or f.error:
                continue
            fams["active"].add_metric(key, 1 if f.active == "active" else 0)
            if f.mem_available is not None:
                fams["mem"].add_metric(key, f.mem_available)
            shards = f.data.get("shards")
            if shards is not None:
                fams["shards"].add_metric(key, 1 if shards.get("verified") else 0)
            for dev, link in sorted((f.data.get("links") or {}).items()):
                up = link.get("present") and link.get("state") in ("up", "unknown")
                link_up.add_metric([*key, dev], 1 if up else 0)
                if link.get("mtu"):
                    link_mtu.add_metric([*key, dev], link["mtu"])
        yield from fams.values()
        yield from (link_up, link_mtu)

    def _gpus(self, cluster: str) -> Iterator[Metric]:
        labels = ["cluster", "node", "rank", "gpu"]
        specs = {  # reading -> (metric, help, scale to base units)
            "temp_c": ("sparkctl_status_gpu_temperature_celsius", "GPU temperature", 1.0),
            "sm_mhz": ("sparkctl_status_gpu_sm_clock_hertz", "Current SM clock", 1e6),
            "max_sm_mhz": ("sparkctl_status_gpu_sm_clock_max_hertz", "Maximum SM clock", 1e6),
            "power_w": ("sparkctl_status_gpu_power_watts", "GPU power draw", 1.0),
            "util_pct": ("sparkctl_status_gpu_utilization_ratio", "GPU utilization (0..1)", 0.01),
        }
        fams = {k: GaugeMetricFamily(n, doc, labels=labels) for k, (n, doc, _s) in specs.items()}
        hot = GaugeMetricFamily("sparkctl_status_gpu_hot",
                                "0: below the temperature thresholds, 1: at or above warn, 2: crit",
                                labels=labels)
        throttled = GaugeMetricFamily("sparkctl_status_gpu_throttled",
                                      "1 when the SM clock is below sm_clock_ratio_warn × max under load",
                                      labels=labels)
        worst: dict[tuple[str, str, str], str] = {}
        for w in self.snap.warnings:
            k = (w.node, w.gpu, w.kind)
            if k not in worst or w.level == thermals.CRIT:
                worst[k] = w.level
        for f in sorted(self.snap.nodes.values(), key=lambda f: f.rank):
            if not f.reachable or f.error:
                continue
            for dev in thermals.devices(f):
                gpu = str(dev.get("index", "0"))
                key = [cluster, f.name, str(f.rank), gpu]
                for reading, (_n, _d, scale) in specs.items():
                    if dev.get(reading) is not None:
                        fams[reading].add_metric(key, round(float(dev[reading]) * scale, 6))
                hot.add_metric(key, HOT_LEVEL[worst.get((f.name, gpu, thermals.TEMPERATURE))])
                throttled.add_metric(key, 1 if (f.name, gpu, thermals.THROTTLE) in worst else 0)
        yield from fams.values()
        yield from (hot, throttled)
        limits = self.cluster.profile.thermals
        for metric, doc, value in (
            ("sparkctl_status_gpu_temperature_warn_celsius", "The warning threshold (profile thermals)",
             limits.gpu_temp_warn_c),
            ("sparkctl_status_gpu_temperature_crit_celsius", "The critical threshold (profile thermals)",
             limits.gpu_temp_crit_c),
            ("sparkctl_status_gpu_sm_clock_ratio_warn", "Throttling below this SM clock / max under load",
             limits.sm_clock_ratio_warn),
        ):
            yield _one(metric, doc, cluster, float(value))

    def _head(self, cluster: str) -> Iterator[Metric]:
        head = self.snap.head
        if head is None:
            return
        ok = GaugeMetricFamily("sparkctl_status_endpoint_ok", "1 when rank 0's endpoint answered as expected",
                               labels=["cluster", "path"])
        for path, ans in (("/health", head.health), ("/ready", head.ready), ("/v1/models", head.models)):
            ok.add_metric([cluster, path], 1 if ans.ok else 0)
        yield ok


def _one(name: str, doc: str, cluster: str, value: float | bool) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=["cluster"])
    g.add_metric([cluster], float(value))
    return g


def registry(cluster: Cluster, snap: Snapshot) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StatusCollector(cluster, snap))
    return reg


def exposition(cluster: Cluster, snap: Snapshot) -> str:
    """The text exposition format (what a textfile collector reads)."""
    text: str = generate_latest(registry(cluster, snap)).decode()
    return text


TEXTFILE_MODE = 0o644  # node_exporter's textfile collector runs as its own user and must read it


def write_textfile(path: Path, cluster: Cluster, snap: Snapshot) -> None:
    """Write the exposition to ``path`` atomically (a temporary file, not ``*.prom`` so the textfile
    collector never reads it half written, renamed over it), mode 0644 whatever the umask."""
    data = generate_latest(registry(cluster, snap))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            os.fchmod(fh.fileno(), TEXTFILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
