"""Thermals on the lab: `status` reads every node's simulated GPU over SSH, and when spark-2's is
pinned hot and throttled (the simulator's knob file) it warns, naming the node and the values,
with the verdict unchanged; the Prometheus text and spark-2's own exporter say the same.

Needs the lab (tests/integration/conftest.py); provisions it (the simulator's NVML stand-in).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

KNOB = "/run/sparkctl-sim/nvml.json"
HOT = {"temp_c": 95, "sm_clock_ratio": 0.45, "util_pct": 100, "power_w": 140}


def _status(lab: Lab) -> dict[str, Any]:
    proc = lab.run_sparkctl("status", json_out=True, timeout=120)
    assert proc.returncode in (0, 3), proc.stderr[-2000:]
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


@pytest.fixture(scope="module")
def provisioned(lab: Lab) -> Iterator[Lab]:
    proc = lab.run_sparkctl("provision", timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    yield lab
    lab.exec("spark-2", "rm", "-f", KNOB, check=False)


def test_status_warns_of_a_hot_throttled_gpu_naming_node_and_values(provisioned: Lab) -> None:
    lab = provisioned
    before = _status(lab)
    for node in before["nodes"]:
        [dev] = node["gpu"]["devices"]
        assert node["gpu"]["source"] == "sparkctl_sim.nvml" and dev["name"].endswith("(simulated)")
        assert dev["max_sm_mhz"] == 2400
    assert before["warnings"] == []

    lab.exec("spark-2", "sh", "-c", f"mkdir -p /run/sparkctl-sim && echo '{json.dumps(HOT)}' > {KNOB}")
    try:
        after = _status(lab)
        assert after["verdict"] == before["verdict"]  # warnings beside the verdict, never changing it
        found = {(w["node"], w["kind"], w["level"]): w for w in after["warnings"]}
        assert set(found) == {("spark-2", "temperature", "crit"), ("spark-2", "throttle", "warn")}
        assert found[("spark-2", "temperature", "crit")]["text"].startswith(
            "spark-2 (rank 2) GPU 0: critical: 95 °C")
        assert "SM clock 1080 of 2400 MHz (0.45× max" in found[("spark-2", "throttle", "warn")]["text"]

        table = lab.run_sparkctl("status", timeout=120, env={"COLUMNS": "250"})
        assert "spark-2 (rank 2) GPU 0: critical: 95 °C" in table.stdout

        prom = lab.run_sparkctl("status", "--format", "prometheus", timeout=120)
        hot = {s.labels["node"]: s.value for f in text_string_to_metric_families(prom.stdout)
               for s in f.samples if s.name == "sparkctl_status_gpu_hot"}
        assert hot == {"spark-0": 0, "spark-1": 0, "spark-2": 2, "spark-3": 0}

        url = f"http://{lab.mgmt_ip('spark-2')}:9477/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        temps = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == "sparkctl_gpu_temperature_celsius"]
        assert temps == [95]
    finally:
        lab.exec("spark-2", "rm", "-f", KNOB)
    assert _status(lab)["warnings"] == []
