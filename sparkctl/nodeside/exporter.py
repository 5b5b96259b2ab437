"""The node exporter: one Spark's health as Prometheus metrics (sparkctl-exporter.service).

Runs ON the node. Unlike the other node-side modules it needs packages beyond the standard library:
``prometheus_client`` (Debian/Ubuntu ``python3-prometheus-client``, installed by the spark_exporter
role) and, where a GPU exists, NVIDIA's ``nvidia-ml-py`` (``pynvml``). It reads through the same
readers as the status probe (``system``, ``links``, ``rdma``, ``manifests``, ``probe``), so a number
on the dashboard and a line of ``sparkctl status`` come from one place.

Every value is read when Prometheus scrapes (a custom collector; nothing cached between scrapes),
and every read is cheap: ``systemctl show`` for the rank unit, one local ``/health`` request,
``stat`` of the rank's shard files against their manifest (never hashed here), sysfs for links and
RDMA counters, ``ethtool -S`` for PFC pause and discard counters (only where the port has an RDMA
device), NVML for the GPU, /proc/meminfo, ``statvfs`` of the NVMe mount. A section that fails is
left out of that scrape (``sparkctl_exporter_section_ok`` says which) and logged; the rest still
answers. Without a GPU (or without ``pynvml``) there are no GPU series and no error.

Series carry no node label: the scrape configuration sparkctl generates (``sparkctl monitoring
config``) labels each target with ``cluster``, ``node`` and ``rank``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from . import links, manifests, probe, rdma, system

UNIT_STATES = ("active", "reloading", "inactive", "failed", "activating", "deactivating")
# ethtool -S names of mlx5's per-priority PFC counters and physical-port discards.
PFC_STAT = re.compile(r"^(rx|tx)_prio(\d)_pause$")
DISCARD_STAT = re.compile(r"^(rx|tx)_discards_phy$")


@dataclass
class FabricPort:
    netdev: str
    hca: str = ""


@dataclass
class Config:
    """What the exporter watches on this node (the rendered unit passes it as options)."""

    listen: str = "0.0.0.0"
    port: int = 9477
    unit: str = "sparkctl-rank.service"
    health_port: int | None = None
    rank: int = 0
    tp: int = 1
    engram_dir: str | None = None
    nvme_mount: str | None = None
    fabric: list[FabricPort] = field(default_factory=list)
    nvml_module: str = "pynvml"
    net_root: str = links.NET
    ib_root: str = rdma.IB


def _gauge(name: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=list(labels))
    g.add_metric(list(labels.values()), value)
    return g


class Nvml:
    """NVML through ``pynvml`` (or a module with its interface), initialised once; absent → nothing."""

    def __init__(self, module_name: str) -> None:
        self.module_name = module_name
        self.lib: Any = None
        self.why_absent: str | None = None
        self._tried = False

    def _init(self) -> Any:
        if self._tried:
            return self.lib
        self._tried = True
        # No module, no driver, no GPU: no GPU series (the status probe loads it the same way).
        self.lib, self.why_absent = probe.load_nvml(self.module_name)
        return self.lib

    def devices(self) -> list[dict[str, Any]]:
        """Per GPU: index, name, temperature (°C), SM clock and its maximum (MHz), power (W), through
        the status probe's reader (``probe.nvml_devices``)."""
        lib = self._init()
        if lib is None:
            return []
        devices: list[dict[str, Any]] = probe.nvml_devices(lib)
        return devices


def ethtool_stats(netdev: str) -> dict[str, int]:
    """``ethtool -S`` of one interface as {name: value} (empty when it cannot be read)."""
    rc, out, _err = system.run(["ethtool", "-S", netdev], timeout=5)
    if rc != 0:
        return {}
    stats = {}
    for line in out.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and value.strip().lstrip("-").isdigit():
            stats[key.strip()] = int(value.strip())
    return stats


def rdma_counters(hca: str, root: str = rdma.IB) -> dict[tuple[str, str], int]:
    """{(port, counter): value} from ``ports/N/counters`` and ``ports/N/hw_counters`` of one HCA."""
    out: dict[tuple[str, str], int] = {}
    ports_dir = os.path.join(root, hca, "ports")
    try:
        ports = sorted(os.listdir(ports_dir))
    except OSError:
        return out
    for port in ports:
        for sub in ("counters", "hw_counters"):
            d = os.path.join(ports_dir, port, sub)
            try:
                names = sorted(os.listdir(d))
            except OSError:
                continue
            for name in names:
                value = system.read_int(os.path.join(d, name))
                if value is not None:
                    out[(port, name)] = value
    return out


class NodeCollector:
    """The prometheus_client collector: every section read afresh on each scrape."""

    def __init__(self, cfg: Config, nvml: Nvml | None = None) -> None:
        self.cfg = cfg
        self.nvml = nvml if nvml is not None else Nvml(cfg.nvml_module)
        self.sections: dict[str, Callable[[], Iterator[Metric]]] = {
            "unit": self._unit,
            "readiness": self._readiness,
            "shards": self._shards,
            "links": self._links,
            "rdma": self._rdma,
            "gpu": self._gpu,
            "memory": self._memory,
            "nvme": self._nvme,
        }

    def collect(self) -> Iterator[Metric]:
        t0 = time.monotonic()
        ok = GaugeMetricFamily(
            "sparkctl_exporter_section_ok",
            "1 when the section was read in this scrape, 0 when it failed (see the journal)",
            labels=["section"],
        )
        for name, section in self.sections.items():
            try:
                metrics = list(section())
            except Exception as exc:
                sys.stderr.write(f"sparkctl-exporter: {name}: {type(exc).__name__}: {exc}\n")
                ok.add_metric([name], 0)
                continue
            ok.add_metric([name], 1)
            yield from metrics
        yield ok
        yield _gauge("sparkctl_exporter_collect_seconds", "Time this scrape took to read the node",
                     {}, time.monotonic() - t0)

    # -- sections -------------------------------------------------------------------------------

    def _unit(self) -> Iterator[Metric]:
        unit = self.cfg.unit
        facts = probe.unit_state(unit)
        if "error" in facts:
            raise RuntimeError(facts["error"])
        active = facts.get("active", "unknown")
        states = GaugeMetricFamily("sparkctl_rank_unit_state",
                                   "systemd ActiveState of the rank unit (1 for the current state)",
                                   labels=["unit", "state"])
        for state in UNIT_STATES:
            states.add_metric([unit, state], 1 if active == state else 0)
        yield states
        yield _gauge("sparkctl_rank_unit_active", "1 when the rank unit is active", {"unit": unit},
                     1 if active == "active" else 0)
        if facts.get("up_s") is not None and active == "active":
            yield _gauge("sparkctl_rank_unit_uptime_seconds", "Seconds since the rank unit became active",
                         {"unit": unit}, facts["up_s"])

    def _readiness(self) -> Iterator[Metric]:
        if self.cfg.health_port is None:
            return
        code = probe.local_http(self.cfg.health_port, "/health")
        labels = {"port": str(self.cfg.health_port)}
        yield _gauge("sparkctl_rank_ready", "1 when the rank's local /health answers 200", labels,
                     1 if code == 200 else 0)
        yield _gauge("sparkctl_rank_health_status_code",
                     "HTTP status of the rank's local /health (0: no answer)", labels, code or 0)

    def _shards(self) -> Iterator[Metric]:
        if not self.cfg.engram_dir:
            return
        res = manifests.shards_on_disk(self.cfg.engram_dir, self.cfg.rank, self.cfg.tp)
        labels = {"engram_dir": self.cfg.engram_dir}
        yield _gauge("sparkctl_shards_verified",
                     "1 when every file of this rank's shard manifest is on disk with its recorded size "
                     "and time (stat only; `sparkctl stage --verify-only` hashes them)",
                     labels, 1 if res.get("verified") else 0)
        if res.get("verified"):
            yield _gauge("sparkctl_shards_bytes", "Bytes of this rank's packed shards", labels, res["bytes"])

    def _links(self) -> Iterator[Metric]:
        names = ["netdev", "hca"]
        gauges = {
            "present": ("sparkctl_link_present", "1 when the fabric interface exists"),
            "up": ("sparkctl_link_up", "1 when the interface's operstate is up"),
            "carrier": ("sparkctl_link_carrier", "1 with carrier"),
            "speed": ("sparkctl_link_speed_bytes", "Link speed in bytes per second"),
            "mtu": ("sparkctl_link_mtu_bytes", "Interface MTU"),
        }
        fam = {k: GaugeMetricFamily(name, doc, labels=names) for k, (name, doc) in gauges.items()}
        counters = {
            "rx_bytes": "Bytes received", "tx_bytes": "Bytes sent",
            "rx_errors": "Receive errors", "tx_errors": "Transmit errors",
            "rx_dropped": "Received packets dropped",
        }
        cfam = {k: CounterMetricFamily(f"sparkctl_link_{k}", doc, labels=names)
                for k, doc in counters.items()}
        for port in self.cfg.fabric:
            info = links.read_link(port.netdev, self.cfg.net_root)
            key = [port.netdev, port.hca]
            fam["present"].add_metric(key, 1 if info.get("present") else 0)
            if not info.get("present"):
                continue
            fam["up"].add_metric(key, 1 if info["state"] == "up" else 0)
            fam["carrier"].add_metric(key, 1 if info["carrier"] else 0)
            if info["speed_mbps"]:
                fam["speed"].add_metric(key, info["speed_mbps"] * 1_000_000 / 8)
            fam["mtu"].add_metric(key, info["mtu"])
            for k, c in cfam.items():
                c.add_metric(key, info[k])
        yield from fam.values()
        yield from cfam.values()

    def _rdma(self) -> Iterator[Metric]:
        ports = [p for p in self.cfg.fabric if p.hca and rdma.has_device(p.hca, self.cfg.ib_root)]
        if not ports:
            return  # no RDMA device (the lab): no PFC or RDMA series
        hw = CounterMetricFamily("sparkctl_rdma_port_counter",
                                 "RDMA port counters of the HCA (sysfs counters/ and hw_counters/)",
                                 labels=["hca", "port", "counter"])
        pause = CounterMetricFamily("sparkctl_pfc_pause_frames", "PFC pause frames per priority (ethtool -S)",
                                    labels=["netdev", "priority", "direction"])
        discards = CounterMetricFamily("sparkctl_link_discards", "Packets discarded by the physical port",
                                       labels=["netdev", "direction"])
        for p in ports:
            for (port, name), value in rdma_counters(p.hca, self.cfg.ib_root).items():
                hw.add_metric([p.hca, port, name], value)
            for name, value in ethtool_stats(p.netdev).items():
                m = PFC_STAT.match(name)
                if m:
                    pause.add_metric([p.netdev, m.group(2), m.group(1)], value)
                d = DISCARD_STAT.match(name)
                if d:
                    discards.add_metric([p.netdev, d.group(1)], value)
        yield from (hw, pause, discards)

    def _gpu(self) -> Iterator[Metric]:
        devices = self.nvml.devices()
        if not devices:
            return
        specs = {  # reading -> (metric, help, scale to base units)
            "temp_c": ("sparkctl_gpu_temperature_celsius", "GPU temperature", 1.0),
            "sm_mhz": ("sparkctl_gpu_sm_clock_hertz", "Current SM clock", 1e6),
            "max_sm_mhz": ("sparkctl_gpu_sm_clock_max_hertz", "Maximum SM clock", 1e6),
            "power_w": ("sparkctl_gpu_power_watts", "GPU power draw", 1.0),
        }
        for key, (name, doc, scale) in specs.items():
            fam = GaugeMetricFamily(name, doc, labels=["gpu", "name"])
            for dev in devices:
                if dev.get(key) is not None:
                    fam.add_metric([dev["index"], dev["name"]], dev[key] * scale)
            if fam.samples:
                yield fam

    def _memory(self) -> Iterator[Metric]:
        mem = probe.meminfo()
        if "MemAvailable" not in mem:
            raise RuntimeError("/proc/meminfo has no MemAvailable")
        yield _gauge("sparkctl_memory_available_bytes", "MemAvailable of the node (unified memory on GB10)",
                     {}, mem["MemAvailable"])
        yield _gauge("sparkctl_memory_total_bytes", "MemTotal of the node", {}, mem.get("MemTotal", 0))

    def _nvme(self) -> Iterator[Metric]:
        if not self.cfg.nvme_mount:
            return
        st = os.statvfs(self.cfg.nvme_mount)
        labels = {"mount": self.cfg.nvme_mount}
        yield _gauge("sparkctl_nvme_free_bytes", "Bytes available to the ranks on the NVMe filesystem",
                     labels, st.f_bavail * st.f_frsize)
        yield _gauge("sparkctl_nvme_size_bytes", "Size of the NVMe filesystem", labels,
                     st.f_blocks * st.f_frsize)


def registry_for(cfg: Config, nvml: Nvml | None = None) -> CollectorRegistry:
    """A registry holding only the node collector (no process or platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(cfg, nvml))
    return registry


def _fabric_port(text: str) -> FabricPort:
    netdev, _, hca = text.partition(":")
    if not netdev:
        raise argparse.ArgumentTypeError(f"--fabric {text!r}: expected NETDEV[:HCA]")
    return FabricPort(netdev, hca)


def parse_args(argv: list[str]) -> Config:
    ap = argparse.ArgumentParser(prog="sparkctl-exporter", description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="0.0.0.0", help="address to serve /metrics on")
    ap.add_argument("--port", type=int, required=True, help="port to serve /metrics on")
    ap.add_argument("--unit", default="sparkctl-rank.service", help="the rank's systemd unit")
    ap.add_argument("--health-port", type=int, help="the rank's HTTP port (local /health)")
    ap.add_argument("--rank", type=int, default=0, help="this node's rank")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel size (names the shard manifest)")
    ap.add_argument("--engram-dir", help="directory of this rank's packed shards and their manifest")
    ap.add_argument("--nvme-mount", help="mount point of the NVMe filesystem")
    ap.add_argument("--fabric", type=_fabric_port, action="append", default=[], metavar="NETDEV[:HCA]",
                    help="a fabric port (repeat for each PCIe half)")
    ap.add_argument("--nvml-module", default="pynvml", help="Python module with pynvml's interface")
    ns = ap.parse_args(argv)
    return Config(listen=ns.listen, port=ns.port, unit=ns.unit, health_port=ns.health_port, rank=ns.rank,
                  tp=ns.tp, engram_dir=ns.engram_dir, nvme_mount=ns.nvme_mount, fabric=ns.fabric,
                  nvml_module=ns.nvml_module)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    # The handlers come first: a stop asked for while the server starts is a clean stop, not a kill.
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    nvml = Nvml(cfg.nvml_module)
    registry = registry_for(cfg, nvml)
    start_http_server(cfg.port, addr=cfg.listen, registry=registry)
    nvml.devices()  # initialise NVML now, so its absence is logged at start rather than on a scrape
    where = ", ".join(f"{p.netdev}/{p.hca or '-'}" for p in cfg.fabric) or "no fabric ports"
    gpu = "GPU via " + cfg.nvml_module if nvml.lib is not None else f"no GPU series ({nvml.why_absent})"
    print(f"sparkctl-exporter: serving http://{cfg.listen}:{cfg.port}/metrics for {cfg.unit} "
          f"(rank {cfg.rank}, {where}; {gpu})", flush=True)
    # Python runs a handler only when the main thread runs: the kernel may hand the signal to the
    # server's thread while the main one sleeps in an untimed wait, which then never wakes. A short
    # timed wait looks again twice a second.
    while not stop.wait(0.5):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
