"""GPU thermals and clocks: the warnings of `status` and `watch`, the maxima of `bench` and `qualify`.

Four stacked Sparks run hot. A GPU above the profile's temperature thresholds (``thermals:`` in the
profile, ``sparkctl_profile_overrides.thermals`` per site), or one whose SM clock sits far below its
maximum while it is under load (throttling), is named with its node and values. These are warnings:
the verdict (ready, degraded, down) and the exit code do not change, so a hot but serving cluster is
still ready; the warnings come beside it in the table, in ``--json`` and in the Prometheus text.

``warnings(cluster, nodes)`` judges one probe round (status's, or the supervisor's: the same
``NodeFacts``). ``ThermalSampler`` reads every node's GPU — when asked (``on_demand``: `bench` and
`qualify` read between their timed windows, never while a batch is timed), or every few seconds on
its own thread — and keeps, per node, the highest temperature, the lowest clock ratio under load and
the highest power, recorded next to the throughput so a slow run explains itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkctl.render import plan_document
from sparkctl.serve.periodic import Periodic
from sparkctl.serve.probe import FleetLike, NodeFacts, collect
from sparkctl.ssh.fleet import Fleet, targets_for

if TYPE_CHECKING:
    from sparkctl.model import Cluster

TEMPERATURE, THROTTLE = "temperature", "throttle"
WARN, CRIT = "warn", "crit"


@dataclass(frozen=True)
class ThermalWarning:
    """One GPU over a threshold: ``kind`` temperature or throttle, ``level`` warn or crit."""

    node: str
    rank: int
    gpu: str
    kind: str
    level: str
    value: float
    threshold: float
    detail: str

    def describe(self) -> str:
        level = "critical: " if self.level == CRIT else ""
        return f"{self.node} (rank {self.rank}) GPU {self.gpu}: {level}{self.detail}"

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "rank": self.rank, "gpu": self.gpu, "kind": self.kind, "level": self.level,
                "value": self.value, "threshold": self.threshold, "text": self.describe()}


def devices(facts: NodeFacts) -> list[Mapping[str, Any]]:
    """The GPU readings the probe returned for one node (empty without a GPU or on a reader error)."""
    gpu = facts.data.get("gpu")
    if not isinstance(gpu, Mapping):
        return []
    return [d for d in gpu.get("devices") or [] if isinstance(d, Mapping)]


def clock_ratio(dev: Mapping[str, Any]) -> float | None:
    """SM clock / its maximum, when both were read."""
    sm, top = dev.get("sm_mhz"), dev.get("max_sm_mhz")
    if sm is None or not top:
        return None
    return float(sm) / float(top)


def under_load(dev: Mapping[str, Any], limits: Any) -> bool:
    util = dev.get("util_pct")
    return util is not None and float(util) >= float(limits.load_util_pct)


def check_device(limits: Any, node: str, rank: int, dev: Mapping[str, Any]) -> list[ThermalWarning]:
    """The warnings of one GPU reading against the profile's ``thermals`` thresholds."""
    out = []
    gpu = str(dev.get("index", "0"))
    temp = dev.get("temp_c")
    if temp is not None and float(temp) >= float(limits.gpu_temp_warn_c):
        crit = float(temp) >= float(limits.gpu_temp_crit_c)
        threshold = float(limits.gpu_temp_crit_c if crit else limits.gpu_temp_warn_c)
        out.append(ThermalWarning(
            node, rank, gpu, TEMPERATURE, CRIT if crit else WARN, float(temp), threshold,
            f"{float(temp):.0f} °C, at or above the {'critical' if crit else 'warning'} threshold "
            f"{threshold:g} °C"))
    ratio = clock_ratio(dev)
    if ratio is not None and under_load(dev, limits) and ratio < float(limits.sm_clock_ratio_warn):
        out.append(ThermalWarning(
            node, rank, gpu, THROTTLE, WARN, round(ratio, 3), float(limits.sm_clock_ratio_warn),
            f"throttling: SM clock {float(dev['sm_mhz']):.0f} of {float(dev['max_sm_mhz']):.0f} MHz "
            f"({ratio:.2f}× max, below {float(limits.sm_clock_ratio_warn):g}×) at "
            f"{float(dev['util_pct']):.0f} % utilization"
            + (f", {float(temp):.0f} °C" if temp is not None else "")
            + (f", {float(dev['power_w']):.0f} W" if dev.get("power_w") is not None else "")))
    return out


def warnings(cluster: Cluster, nodes: Mapping[str, NodeFacts]) -> list[ThermalWarning]:
    """Every hot or throttled GPU in one probe round (status mode, or the thermals mode), by rank."""
    limits = cluster.profile.thermals
    out: list[ThermalWarning] = []
    for f in sorted(nodes.values(), key=lambda f: f.rank):
        if not f.reachable or f.error:
            continue
        for dev in devices(f):
            out.extend(check_device(limits, f.name, f.rank, dev))
    return out


def gpu_text(facts: NodeFacts) -> str:
    """The status table's GPU cell: temperature, SM clock against its maximum, power (first GPU):
    ``71°C 2100/2400MHz 95W``."""
    gpu = facts.data.get("gpu")
    if isinstance(gpu, Mapping) and gpu.get("error"):
        return "error"
    devs = devices(facts)
    if not devs:
        return "–"
    dev = devs[0]
    parts = []  # no space before a unit: the cell stays within an 80-column table
    if dev.get("temp_c") is not None:
        parts.append(f"{float(dev['temp_c']):.0f}°C")
    if dev.get("sm_mhz") is not None:
        top = f"/{float(dev['max_sm_mhz']):.0f}" if dev.get("max_sm_mhz") else ""
        parts.append(f"{float(dev['sm_mhz']):.0f}{top}MHz")
    if dev.get("power_w") is not None:
        parts.append(f"{float(dev['power_w']):.0f}W")
    more = f" (+{len(devs) - 1} GPU)" if len(devs) > 1 else ""
    return (" ".join(parts) or "–") + more


# --- sampling during bench and qualify ------------------------------------------------------------


@dataclass
class NodeMaxima:
    samples: int = 0
    loaded_samples: int = 0
    max_temp_c: float | None = None
    min_sm_clock_ratio_under_load: float | None = None
    max_power_w: float | None = None

    def add(self, dev: Mapping[str, Any], limits: Any) -> None:
        self.samples += 1
        if dev.get("temp_c") is not None:
            self.max_temp_c = _max(self.max_temp_c, float(dev["temp_c"]))
        if dev.get("power_w") is not None:
            self.max_power_w = _max(self.max_power_w, float(dev["power_w"]))
        ratio = clock_ratio(dev)
        if ratio is not None and under_load(dev, limits):
            self.loaded_samples += 1
            low = self.min_sm_clock_ratio_under_load
            self.min_sm_clock_ratio_under_load = ratio if low is None else min(low, ratio)

    def as_dict(self) -> dict[str, Any]:
        ratio = self.min_sm_clock_ratio_under_load
        return {
            "samples": self.samples,
            "loaded_samples": self.loaded_samples,
            "max_temp_c": self.max_temp_c,
            "min_sm_clock_ratio_under_load": round(ratio, 3) if ratio is not None else None,
            "max_power_w": round(self.max_power_w, 1) if self.max_power_w is not None else None,
        }


def _worse(new: ThermalWarning, old: ThermalWarning) -> bool:
    """Critical over a warning; at one level a hotter GPU, or a lower clock ratio."""
    if new.level != old.level:
        return new.level == CRIT
    return new.value > old.value if new.kind == TEMPERATURE else new.value < old.value


def _max(current: float | None, value: float) -> float:
    return value if current is None else max(current, value)


@dataclass
class ThermalSampler(Periodic):
    """Reads every node's GPU every ``interval`` seconds on its own thread; ``summary()`` at any time.

    Start with ``start()``, stop with ``stop()`` (or use it as a context manager). A sampling
    problem is recorded, never raised: it must not fail the run it watches.
    """

    cluster: Cluster
    doc: Mapping[str, Any]
    fleet: FleetLike
    interval: float = 5.0
    nodes: dict[str, NodeMaxima] = field(default_factory=dict)
    rounds: int = 0
    warned: dict[str, ThermalWarning] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.limits = self.cluster.profile.thermals
        self._prepare("sparkctl-thermals")

    def sample_once(self) -> None:
        facts = collect(self.cluster, self.doc, self.fleet, "thermals", timeout=max(10.0, 2 * self.interval))
        self.record(facts)

    def record(self, facts: Mapping[str, NodeFacts]) -> None:
        """Fold one probe round into the maxima (the thermals or the status mode)."""
        with self._lock:
            self.rounds += 1
            for name, f in facts.items():
                if not f.reachable or f.error:
                    self.errors.append(f"{name}: {f.error or 'no answer'}")
                    continue
                gpu = f.data.get("gpu")
                if isinstance(gpu, Mapping) and gpu.get("error"):
                    self.errors.append(f"{name}: GPU: {gpu['error']}")
                for dev in devices(f):
                    self.nodes.setdefault(name, NodeMaxima()).add(dev, self.limits)
            for w in warnings(self.cluster, facts):
                key = f"{w.node}/{w.gpu}/{w.kind}"
                seen = self.warned.get(key)
                if seen is None or _worse(w, seen):
                    self.warned[key] = w

    def summary(self) -> dict[str, Any]:
        """Per node and over the cluster: highest temperature, lowest SM clock ratio under load,
        highest power; the thresholds; every warning seen (the worst per GPU and kind)."""
        with self._lock:
            per_node = {n: m.as_dict() for n, m in sorted(self.nodes.items())}
            temps = [m.max_temp_c for m in self.nodes.values() if m.max_temp_c is not None]
            ratios = [m.min_sm_clock_ratio_under_load for m in self.nodes.values()
                      if m.min_sm_clock_ratio_under_load is not None]
            powers = [m.max_power_w for m in self.nodes.values() if m.max_power_w is not None]
            return {
                "interval_s": self.interval,
                "rounds": self.rounds,
                "thresholds": self.limits.model_dump(),
                "max_temp_c": max(temps, default=None),
                "min_sm_clock_ratio_under_load": round(min(ratios), 3) if ratios else None,
                "max_power_w": round(max(powers), 1) if powers else None,
                "nodes": per_node,
                "warnings": [w.describe() for w in self.warned.values()],
                "errors": self.errors[-20:],
            }


def summary_line(summary: Mapping[str, Any]) -> str | None:
    """One line for the terminal: the run's maxima and the worst node; None when nothing was read."""
    nodes: Mapping[str, Mapping[str, Any]] = summary.get("nodes") or {}
    if not nodes:
        return None
    parts = []
    hottest = max(nodes, key=lambda n: nodes[n].get("max_temp_c") or -1.0)
    if summary.get("max_temp_c") is not None:
        parts.append(f"max {summary['max_temp_c']:.0f} °C ({hottest})")
    if summary.get("min_sm_clock_ratio_under_load") is not None:
        parts.append(f"lowest SM clock under load {summary['min_sm_clock_ratio_under_load']:.2f}× max")
    if summary.get("max_power_w") is not None:
        parts.append(f"max {summary['max_power_w']:.0f} W")
    return "GPU during the run: " + ", ".join(parts) if parts else None


@contextlib.contextmanager
def on_demand(cluster: Cluster, interval: float = 5.0) -> Iterator[ThermalSampler]:
    """A ThermalSampler on its own SSH connections that reads only when asked (``sample_once``), never
    on a timer: `bench` and `qualify` read the GPUs between their timed windows only
    (``sparkctl.qa.quiet.Windows``), never while a batch is timed."""
    fleet = Fleet(targets_for(cluster))
    try:
        yield ThermalSampler(cluster, plan_document(cluster), fleet, interval=interval)
    finally:
        fleet.close()
