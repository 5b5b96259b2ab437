"""The node exporter on a fake node: a sysfs tree, a shard manifest, fake unit/health/memory readers,
canned ``ethtool -S`` and a stand-in NVML; read through prometheus_client's own generate_latest."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.node_tree import fake_ib, fake_net, fake_shards
from support.nvml import FakeGpu, FakeNvml
from support.ports import free_port as _free_port

from sparkctl.nodeside import exporter, probe, system
from sparkctl.nodeside.exporter import Config, FabricPort, Nvml

REPO = Path(__file__).resolve().parents[2]
ETHTOOL_S = """NIC statistics:
     rx_packets: 10
     rx_prio3_pause: 42
     tx_prio3_pause: 7
     rx_prio0_pause: 0
     rx_discards_phy: 3
     tx_discards_phy: 1
"""


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    net, ib = tmp_path / "net", tmp_path / "ib"
    fake_net(net, "enp1s0f0np0", rx_errors=17)
    fake_net(net, "enP2p1s0f0np0", state="down")
    fake_ib(ib, "rocep1s0f0")
    fake_shards(tmp_path / "engram")
    monkeypatch.setattr(probe, "unit_state", lambda unit: {"active": "active", "up_s": 12.5})
    monkeypatch.setattr(probe, "local_http",
                        lambda port, path: 200 if (port, path) == (8004, "/health") else None)
    monkeypatch.setattr(probe, "meminfo", lambda: {"MemAvailable": 90 << 30, "MemTotal": 119 << 30})
    calls: list[list[str]] = []

    def run(argv: list[str], timeout: float = 5.0) -> tuple[int, str, str]:
        calls.append(argv)
        return (0, ETHTOOL_S, "") if argv[:2] == ["ethtool", "-S"] else (1, "", "unexpected")

    monkeypatch.setattr(system, "run", run)
    return Config(port=0, unit="sparkctl-rank.service", health_port=8004, rank=1, tp=4,
                  engram_dir=str(tmp_path / "engram"), nvme_mount=str(tmp_path),
                  fabric=[FabricPort("enp1s0f0np0", "rocep1s0f0"),
                          FabricPort("enP2p1s0f0np0", "roceP2p1s0f0"), FabricPort("absent9", "")],
                  net_root=str(net), ib_root=str(ib))


def scrape(cfg: Config, nvml: Any = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    nv = Nvml("unused")
    nv._tried, nv.lib = True, nvml
    text = generate_latest(exporter.registry_for(cfg, nv)).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def get(samples: dict[Any, float], metric: str, **labels: str) -> float:
    return samples[(metric, tuple(sorted(labels.items())))]


def test_every_section_from_the_fake_node(node: Config) -> None:
    s = scrape(node, FakeNvml(FakeGpu(temp_c=67, sm_mhz=1200, max_sm_mhz=2400, power_mw=None)))
    unit = "sparkctl-rank.service"
    assert get(s, "sparkctl_rank_unit_active", unit=unit) == 1
    assert get(s, "sparkctl_rank_unit_state", unit=unit, state="active") == 1
    assert get(s, "sparkctl_rank_unit_state", unit=unit, state="failed") == 0
    assert get(s, "sparkctl_rank_unit_uptime_seconds", unit=unit) == 12.5
    assert get(s, "sparkctl_rank_ready", port="8004") == 1
    assert get(s, "sparkctl_shards_verified", engram_dir=node.engram_dir or "") == 1
    assert get(s, "sparkctl_shards_bytes", engram_dir=node.engram_dir or "") == 4096
    a = {"netdev": "enp1s0f0np0", "hca": "rocep1s0f0"}
    assert get(s, "sparkctl_link_up", **a) == 1
    assert get(s, "sparkctl_link_up", netdev="enP2p1s0f0np0", hca="roceP2p1s0f0") == 0
    assert get(s, "sparkctl_link_present", netdev="absent9", hca="") == 0
    assert get(s, "sparkctl_link_speed_bytes", **a) == 200000 * 1e6 / 8
    assert get(s, "sparkctl_link_mtu_bytes", **a) == 9000
    assert get(s, "sparkctl_link_rx_errors_total", **a) == 17
    assert get(s, "sparkctl_link_rx_dropped_total", **a) == 5
    # RDMA and PFC only for the port whose HCA exists under the infiniband root.
    assert get(s, "sparkctl_rdma_port_counter_total", hca="rocep1s0f0", port="1",
               counter="out_of_buffer") == 11
    assert get(s, "sparkctl_rdma_port_counter_total", hca="rocep1s0f0", port="1",
               counter="port_xmit_discards") == 9
    assert get(s, "sparkctl_pfc_pause_frames_total", netdev="enp1s0f0np0", priority="3", direction="rx") == 42
    assert get(s, "sparkctl_pfc_pause_frames_total", netdev="enp1s0f0np0", priority="3", direction="tx") == 7
    assert get(s, "sparkctl_link_discards_total", netdev="enp1s0f0np0", direction="rx") == 3
    assert not any(k[0].startswith("sparkctl_pfc") and ("netdev", "enP2p1s0f0np0") in k[1] for k in s)
    g = {"gpu": "0", "name": "NVIDIA GB10"}
    assert get(s, "sparkctl_gpu_temperature_celsius", **g) == 67
    assert get(s, "sparkctl_gpu_sm_clock_hertz", **g) == 1.2e9
    assert get(s, "sparkctl_gpu_sm_clock_max_hertz", **g) == 2.4e9
    assert not any(k[0] == "sparkctl_gpu_power_watts" for k in s)  # not supported: absent, not an error
    assert get(s, "sparkctl_memory_available_bytes") == 90 << 30
    st = os.statvfs(node.nvme_mount or "")
    assert get(s, "sparkctl_nvme_size_bytes", mount=node.nvme_mount or "") == st.f_blocks * st.f_frsize
    assert all(v == 1 for k, v in s.items() if k[0] == "sparkctl_exporter_section_ok")


def test_no_gpu_no_rdma_gives_no_series_and_no_error(node: Config, tmp_path: Path) -> None:
    node.ib_root = str(tmp_path / "no-infiniband")
    node.nvml_module = "sparkctl_no_such_nvml"
    nv = Nvml(node.nvml_module)
    text = generate_latest(exporter.registry_for(node, nv)).decode()
    assert "sparkctl_gpu_" not in text and "sparkctl_pfc_" not in text and "sparkctl_rdma_" not in text
    assert nv.why_absent and "sparkctl_no_such_nvml" in nv.why_absent
    assert 'sparkctl_exporter_section_ok{section="gpu"} 1.0' in text
    assert 'sparkctl_exporter_section_ok{section="rdma"} 1.0' in text


def test_a_failing_section_is_left_out_and_named(node: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "unit_state", lambda unit: {"error": "Failed to connect to bus"})
    Path(node.engram_dir or "", "engram-r1.bin").write_bytes(b"short")  # size differs from the manifest
    s = scrape(node)
    assert get(s, "sparkctl_exporter_section_ok", section="unit") == 0
    assert not any(k[0].startswith("sparkctl_rank_unit") for k in s)
    assert get(s, "sparkctl_shards_verified", engram_dir=node.engram_dir or "") == 0
    assert get(s, "sparkctl_memory_available_bytes") == 90 << 30  # the rest still answers


def test_nvml_is_initialised_once() -> None:
    fake = FakeNvml(FakeGpu(temp_c=67, power_mw=None))  # power not supported, as on some boards
    sys.modules["sparkctl_test_nvml"] = fake  # type: ignore[assignment]
    try:
        nv = Nvml("sparkctl_test_nvml")
        assert nv.devices()[0]["temp_c"] == 67 and nv.devices()[0]["power_w"] is None
        assert fake.inits == 1
    finally:
        del sys.modules["sparkctl_test_nvml"]


def test_the_lab_nvml_stand_in_has_pynvmls_interface() -> None:
    nv = Nvml("sparkctl_sim.nvml")
    (dev,) = nv.devices()
    assert dev["name"].endswith("(simulated)") and dev["max_sm_mhz"] == 2400
    assert 0 < dev["sm_mhz"] <= 2400 and 20 < dev["temp_c"] < 100 and dev["power_w"] > 0


def test_serves_metrics_over_http(tmp_path: Path) -> None:
    """The module as the unit runs it: options in, /metrics out (no systemd here: the unit section fails)."""
    port = _free_port()
    argv = [sys.executable, "-m", "sparkctl.nodeside.exporter", "--listen", "127.0.0.1", "--port", str(port),
            "--fabric", "lo", "--nvme-mount", str(tmp_path), "--nvml-module", "sparkctl_no_such_nvml"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        body = ""
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    body = resp.read().decode()
                break
            except OSError:
                time.sleep(0.05)
        assert 'sparkctl_link_present{hca="",netdev="lo"} 1.0' in body
        assert "sparkctl_memory_available_bytes " in body and "sparkctl_nvme_free_bytes{" in body
        assert "python_gc_objects_collected_total" not in body  # only the node's own series
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0, out
    assert f"serving http://127.0.0.1:{port}/metrics" in out and "no GPU series (sparkctl_no_such_nvml" in out


# Both run main() in a child whose start_http_server is replaced: no port, and the signal sent
# from where the race puts it.
_STOP_CHILD = """
import os, signal, sys, threading, time
from sparkctl.nodeside import exporter

def from_another_thread(*_a, **_k):

    def kill_from_here():
        time.sleep(0.3)  # main is waiting by now
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # this thread, not main, gets it

    threading.Thread(target=kill_from_here, daemon=True).start()

def while_starting(*_a, **_k):
    os.kill(os.getpid(), signal.SIGTERM)

exporter.start_http_server = {which}
sys.exit(exporter.main(["--port", "1", "--nvml-module", "sparkctl_no_such_nvml"]))
"""


@pytest.mark.parametrize("which", ["from_another_thread", "while_starting"])
def test_a_stop_is_clean_whichever_thread_gets_it_and_however_early(which: str) -> None:
    """SIGTERM delivered to the server's thread while main waits, or before the server is up, exits 0."""
    proc = subprocess.run([sys.executable, "-c", _STOP_CHILD.format(which=which)], cwd=REPO,
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)


def test_bad_fabric_option_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as err:
        exporter.parse_args(["--port", "1", "--fabric", ":mlx5_0"])
    assert err.value.code == 2
