"""Thermals: the profile's thresholds, the warnings of one probe round, the sampler's maxima, the
node probe's GPU readers (NVML, nvidia-smi, neither; the lab's simulated GPU and its knob file)."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from support import gates_fakes as fakes
from support.gates_fakes import GpuNodes
from support.nvml import FakeGpu, FakeNvml

from sparkctl.errors import InputError
from sparkctl.nodeside import probe as nodeprobe
from sparkctl.profiles import Thermals, load_profile
from sparkctl.serve import thermals
from sparkctl.serve.probe import NodeFacts, probe_params

REPO = Path(__file__).resolve().parents[2]


def dev(temp: float | None = 60, sm: float | None = 2400, top: float | None = 2400, util: float | None = 90,
        power: float | None = 80, index: str = "0") -> dict[str, Any]:
    return {"index": index, "name": "NVIDIA GB10", "temp_c": temp, "sm_mhz": sm, "max_sm_mhz": top,
            "power_w": power, "util_pct": util}


def facts(name: str, rank: int, *devices: dict[str, Any], error: str | None = None) -> NodeFacts:
    gpu: dict[str, Any] = {"source": "pynvml", "error": error} if error else {"source": "pynvml",
                                                                             "devices": list(devices)}
    return NodeFacts(name, rank, True, None, {"unit": {"active": "active"}, "gpu": gpu})


LIMITS = Thermals.model_validate({})


# --- thresholds -------------------------------------------------------------------------------


def test_defaults_are_documented_and_every_profile_has_them() -> None:
    got = (LIMITS.gpu_temp_warn_c, LIMITS.gpu_temp_crit_c, LIMITS.sm_clock_ratio_warn, LIMITS.load_util_pct)
    assert got == (85.0, 92.0, 0.75, 50.0)
    for name in ("r4-nvme", "m1-1m", "lab"):
        assert load_profile(name).thermals == LIMITS
    for field in Thermals.model_fields.values():
        assert field.description


def test_sites_override_per_key_and_bad_thresholds_name_the_field() -> None:
    tuned = load_profile("r4-nvme", {"thermals": {"gpu_temp_warn_c": 80}})
    assert tuned.thermals.gpu_temp_warn_c == 80 and tuned.thermals.gpu_temp_crit_c == 92
    with pytest.raises(InputError) as exc:
        load_profile("r4-nvme", {"thermals": {"gpu_temp_crit_c": 70}})
    assert exc.value.details == ["sparkctl_profile_overrides.thermals: gpu_temp_crit_c 70 must be above "
                                 "gpu_temp_warn_c 85"]
    with pytest.raises(InputError) as exc:
        load_profile("r4-nvme", {"thermals": {"sm_clock_ratio_warn": 1.5, "gpu_temp_warm_c": 80}})
    text = "\n".join(exc.value.details)
    assert "sparkctl_profile_overrides.thermals.sm_clock_ratio_warn" in text
    assert "sparkctl_profile_overrides.thermals.gpu_temp_warm_c" in text


# --- the warnings of one round ----------------------------------------------------------------


def test_a_cool_gpu_at_full_clock_warns_nothing() -> None:
    assert thermals.check_device(LIMITS, "spark-0", 0, dev()) == []


def test_temperature_warn_then_crit_names_node_and_values() -> None:
    [w] = thermals.check_device(LIMITS, "spark-2", 2, dev(temp=86))
    assert (w.kind, w.level, w.value, w.threshold) == ("temperature", "warn", 86.0, 85.0)
    assert w.describe() == "spark-2 (rank 2) GPU 0: 86 °C, at or above the warning threshold 85 °C"
    [w] = thermals.check_device(LIMITS, "spark-2", 2, dev(temp=93))
    assert w.level == "crit" and w.threshold == 92.0
    assert w.describe().startswith("spark-2 (rank 2) GPU 0: critical: 93 °C")


def test_a_low_clock_is_throttling_only_under_load() -> None:
    [w] = thermals.check_device(LIMITS, "spark-1", 1, dev(sm=1200, util=97, temp=80, power=140))
    assert (w.kind, w.value, w.threshold) == ("throttle", 0.5, 0.75)
    assert w.describe().endswith(
        "SM clock 1200 of 2400 MHz (0.50× max, below 0.75×) at 97 % utilization, 80 °C, 140 W")
    assert thermals.check_device(LIMITS, "spark-1", 1, dev(sm=1200, util=10)) == []  # idle: clocks down
    assert thermals.check_device(LIMITS, "spark-1", 1, dev(sm=1200, util=None)) == []  # load unknown
    assert thermals.check_device(LIMITS, "spark-1", 1, dev(sm=1200, top=None)) == []  # no maximum
    assert thermals.check_device(LIMITS, "spark-1", 1, dev(temp=None, sm=None, power=None)) == []


def test_both_at_once_and_thresholds_from_the_profile() -> None:
    hot = dev(temp=95, sm=1000)
    assert [w.kind for w in thermals.check_device(LIMITS, "n", 0, hot)] == ["temperature", "throttle"]
    cool_site = Thermals.model_validate({"gpu_temp_warn_c": 96, "gpu_temp_crit_c": 99,
                                         "sm_clock_ratio_warn": 0.4})
    assert thermals.check_device(cool_site, "n", 0, hot) == []


def test_warnings_of_a_round_by_rank_skipping_unreachable_and_broken_readers(tmp_path: Path) -> None:
    cluster, _doc = fakes.lab_cluster(tmp_path)
    nodes = {
        "spark-3": facts("spark-3", 3, dev(temp=88)),
        "spark-1": facts("spark-1", 1, dev(), dev(index="1", sm=900)),
        "spark-2": NodeFacts("spark-2", 2, False, "timed out"),
        "spark-0": facts("spark-0", 0, error="NVMLError: Unknown Error"),
    }
    found = thermals.warnings(cluster, nodes)
    assert [(w.node, w.gpu, w.kind) for w in found] == [("spark-1", "1", "throttle"),
                                                       ("spark-3", "0", "temperature")]


def test_status_cell_shows_temperature_clock_against_max_and_power() -> None:
    assert thermals.gpu_text(facts("a", 0, dev(temp=71, sm=2100, power=95.4))) == "71°C 2100/2400MHz 95W"
    assert thermals.gpu_text(facts("a", 0, dev(), dev(index="1"))).endswith("(+1 GPU)")
    assert thermals.gpu_text(facts("a", 0, error="boom")) == "error"
    assert thermals.gpu_text(NodeFacts("a", 0, True, None, {"gpu": None})) == "–"


# --- sampling during bench and qualify --------------------------------------------------------


def test_sampler_keeps_per_node_maxima_and_the_worst_warning(tmp_path: Path) -> None:
    cluster, doc = fakes.lab_cluster(tmp_path)
    nodes = GpuNodes([n.name for n in cluster.nodes], {n.name: n.rank for n in cluster.nodes})
    sampler = thermals.ThermalSampler(cluster, doc, nodes, interval=0.01)
    rounds = [
        {"spark-0": dev(temp=70, power=90), "spark-1": dev(temp=60, sm=2200, util=80)},
        {"spark-0": dev(temp=87, power=120), "spark-1": dev(temp=62, sm=1500, util=99)},
        {"spark-0": dev(temp=93, power=100), "spark-1": dev(temp=61, sm=600, util=5)},  # idle: not counted
    ]
    for r in rounds:
        nodes.gpu.update(r)
        sampler.sample_once()
    nodes.state["spark-2"].reachable = False
    sampler.sample_once()
    assert ("spark-0", "thermals") in nodes.calls
    s = sampler.summary()
    assert s["rounds"] == 4 and s["max_temp_c"] == 93.0 and s["max_power_w"] == 120.0
    assert s["min_sm_clock_ratio_under_load"] == 0.625
    assert s["nodes"]["spark-0"]["max_temp_c"] == 93.0
    assert s["nodes"]["spark-1"] == {"samples": 4, "loaded_samples": 2, "max_temp_c": 62.0,
                                     "min_sm_clock_ratio_under_load": 0.625, "max_power_w": 80.0}
    assert s["thresholds"]["gpu_temp_warn_c"] == 85.0
    assert s["warnings"] == [
        "spark-0 (rank 0) GPU 0: critical: 93 °C, at or above the critical threshold 92 °C",
        "spark-1 (rank 1) GPU 0: throttling: SM clock 1500 of 2400 MHz (0.62× max, below 0.75×) "
        "at 99 % utilization, 62 °C, 80 W",
    ]
    assert any(e.startswith("spark-2: timed out") for e in s["errors"])
    line = thermals.summary_line(s)
    assert line == ("GPU during the run: max 93 °C (spark-0), lowest SM clock under load 0.62× max, "
                    "max 120 W")


def test_sampler_thread_samples_until_stopped_and_survives_errors(tmp_path: Path) -> None:
    cluster, doc = fakes.lab_cluster(tmp_path)
    nodes = GpuNodes([n.name for n in cluster.nodes], {n.name: n.rank for n in cluster.nodes})
    nodes.gpu["spark-0"] = dev(temp=50)
    calls = {"n": 0}

    def flaky(mode: str, n: int, state: Any) -> None:
        calls["n"] += 1
        if n == 2:
            raise RuntimeError("ssh hiccup")

    nodes.on_round = flaky
    with thermals.ThermalSampler(cluster, doc, nodes, interval=0.01) as sampler:
        while calls["n"] < 4:
            pass
    s = sampler.summary()
    assert s["rounds"] >= 3 and "RuntimeError: ssh hiccup" in s["errors"]
    assert thermals.summary_line({"nodes": {}}) is None


# --- the node probe's readers -----------------------------------------------------------------


def test_nvml_reads_every_gpu_and_tolerates_unsupported_readings(monkeypatch: pytest.MonkeyPatch) -> None:
    # GPU 1 does not report its utilization (NVML_ERROR_NOT_SUPPORTED): None, the rest still come.
    lib = FakeNvml(FakeGpu(temp_c=70, sm_mhz=2000, max_sm_mhz=2500, power_mw=95500, util_pct=88),
                   FakeGpu(temp_c=71, sm_mhz=2000, max_sm_mhz=2500, power_mw=95500, util_pct=None))
    monkeypatch.setitem(sys.modules, "fake_pynvml", lib)
    got = nodeprobe.gpu("fake_pynvml")
    assert got == {"source": "fake_pynvml", "devices": [
        {"index": "0", "name": "NVIDIA GB10", "temp_c": 70.0, "sm_mhz": 2000.0, "max_sm_mhz": 2500.0,
         "power_w": 95.5, "util_pct": 88.0},
        {"index": "1", "name": "NVIDIA GB10", "temp_c": 71.0, "sm_mhz": 2000.0, "max_sm_mhz": 2500.0,
         "power_w": 95.5, "util_pct": None},
    ]}
    assert lib.shut


def fake_bin(tmp: Path, name: str, body: str) -> Path:
    d = tmp / "bin"
    d.mkdir(exist_ok=True)
    script = d / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return d


def test_without_pynvml_the_probe_reads_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = "0, NVIDIA GB10, 81, 1890, 3003, 97.40, 100\n1, NVIDIA, Odd Name, 40, [N/A], 3003, [N/A], 0\n"
    monkeypatch.setenv("PATH", str(fake_bin(tmp_path, "nvidia-smi", f"printf '{out}'\n")))
    got = nodeprobe.gpu("no_such_nvml_module")
    assert got == {"source": "nvidia-smi", "devices": [
        {"index": "0", "name": "NVIDIA GB10", "temp_c": 81.0, "sm_mhz": 1890.0, "max_sm_mhz": 3003.0,
         "power_w": 97.4, "util_pct": 100.0},
        {"index": "1", "name": "NVIDIA, Odd Name", "temp_c": 40.0, "sm_mhz": None, "max_sm_mhz": 3003.0,
         "power_w": None, "util_pct": 0.0},
    ]}
    failing = fake_bin(tmp_path, "nvidia-smi", "echo 'NVIDIA-SMI has failed' >&2; exit 9\n")
    monkeypatch.setenv("PATH", str(failing))
    assert nodeprobe.gpu("no_such_nvml_module") == {"source": "nvidia-smi", "error": "NVIDIA-SMI has failed"}


def test_no_nvml_and_no_nvidia_smi_is_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert nodeprobe.gpu("no_such_nvml_module") is None
    lib, why = nodeprobe.load_nvml("no_such_nvml_module")
    assert lib is None and why is not None and why.startswith("no_such_nvml_module: ModuleNotFoundError")


def test_the_lab_probe_reads_the_simulated_gpu_by_path_and_its_knob(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    knob = tmp_path / "nvml.json"
    monkeypatch.setenv("SPARKCTL_SIM_NVML_FILE", str(knob))
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    for mod in [m for m in sys.modules if m == "sparkctl_sim" or m.startswith("sparkctl_sim.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != REPO])
    got = nodeprobe.gpu("sparkctl_sim.nvml", str(REPO))  # as on a node: importable only by the path
    [idle] = got["devices"]
    assert got["source"] == "sparkctl_sim.nvml" and idle["name"].endswith("(simulated)")
    assert idle["util_pct"] == 0 and idle["sm_mhz"] == 960 and idle["max_sm_mhz"] == 2400
    knob.write_text(json.dumps({"temp_c": 95, "sm_clock_ratio": 0.45, "util_pct": 100, "power_w": 140}))
    [hot] = nodeprobe.gpu("sparkctl_sim.nvml", str(REPO))["devices"]
    assert hot == {"index": "0", "name": idle["name"], "temp_c": 95.0, "sm_mhz": 1080.0, "max_sm_mhz": 2400.0,
                   "power_w": 140.0, "util_pct": 100.0}
    kinds = [(w.kind, w.level) for w in thermals.check_device(LIMITS, "spark-2", 2, hot)]
    assert kinds == [("temperature", "crit"), ("throttle", "warn")]
    knob.write_text("{not json")
    assert nodeprobe.gpu("sparkctl_sim.nvml", str(REPO))["devices"][0]["util_pct"] == 0


def test_simulated_gpu_runs_at_full_clock_from_half_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkctl_sim import nvml

    monkeypatch.setenv("SPARKCTL_SIM_NVML_FILE", "/nonexistent/nvml.json")
    cpus = os.cpu_count() or 1
    for busy, clock in ((0.5, 2400), (1.0, 2400), (0.25, round(2400 * 0.7))):
        monkeypatch.setattr(os, "getloadavg", lambda b=busy: (b * cpus, 0.0, 0.0))
        util = nvml.nvmlDeviceGetUtilizationRates(0).gpu
        assert nvml.nvmlDeviceGetClockInfo(0, nvml.NVML_CLOCK_SM) == clock
        # The lab never warns of throttling by itself: under load it is at its maximum.
        reading = dev(sm=clock, util=util, temp=nvml.nvmlDeviceGetTemperature(0, 0))
        assert thermals.check_device(LIMITS, "lab", 0, reading) == []


def test_status_and_thermals_probes_name_the_lab_nvml_and_real_sites_do_not(tmp_path: Path) -> None:
    cluster, doc = fakes.lab_cluster(tmp_path)
    entry = doc["nodes"][0]
    for mode in ("status", "thermals", "preflight"):
        p = probe_params(cluster, entry, mode)
        assert (p["nvml_module"], p["nvml_path"]) == ("sparkctl_sim.nvml", "/opt/sparkctl_sim/current")
    assert set(probe_params(cluster, entry, "thermals")) == {"mode", "unit", "nvml_module", "nvml_path"}
    assert "nvml_module" not in probe_params(cluster, entry, "watch")
    real = types.SimpleNamespace(profile=types.SimpleNamespace(simulator=None))
    from sparkctl.serve.probe import nvml_params

    assert nvml_params(real) == {}
