"""`sparkctl status` with hot and throttled GPUs (fleet and API faked): the warnings in the table and
in --json beside an unchanged verdict, and `--format prometheus` parsed by prometheus_client."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import gates_fakes as fakes
from support.gates_fakes import GpuNodes

from sparkctl.cli import common
from sparkctl.errors import EXIT_OK, EXIT_UNHEALTHY, EXIT_USAGE


def dev(temp: float, sm: float, util: float = 95.0) -> dict[str, Any]:
    return {"index": "0", "name": "NVIDIA GB10", "temp_c": temp, "sm_mhz": sm, "max_sm_mhz": 2400.0,
            "power_w": 90.0, "util_pct": util}


class Site:
    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch):
        self.cluster, self.doc = fakes.lab_cluster(tmp)
        self.inventory = Path(self.cluster.inventory_dir)
        nodes = self.cluster.nodes
        self.nodes = GpuNodes([n.name for n in nodes], {n.name: n.rank for n in nodes})
        for st in self.nodes.state.values():
            st.unit = "active"
        for name in self.nodes.gpu:
            self.nodes.gpu[name] = dev(60, 2400)
        self.api = fakes.FakeApi(self.cluster, self.doc)
        tools = dataclasses.replace(common.tools(), fleet=lambda cluster: self.nodes, http=self.api.client)
        monkeypatch.setattr(common, "tools", lambda: tools)


@pytest.fixture
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables and warning lines unwrapped, so assertions read whole phrases."""
    from sparkctl import ui

    monkeypatch.setattr(ui.console, "width", 250)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    return Site(tmp_path, monkeypatch)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def node_labels(node: str, rank: int, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"cluster": "lab", "node": node, "rank": str(rank), **more}.items()))


@pytest.mark.usefixtures("wide_console")
def test_hot_and_throttled_gpus_are_warned_of_and_the_cluster_stays_ready(run_cli: Any, site: Site) -> None:
    res = run_cli("-i", str(site.inventory), "status")
    assert res.code == EXIT_OK and "!" not in res.out and "60°C 2400/2400MHz 90W" in res.out
    site.nodes.gpu["spark-2"] = dev(93, 2300)
    site.nodes.gpu["spark-1"] = dev(80, 1100)
    res = run_cli("-i", str(site.inventory), "status")
    assert res.code == EXIT_OK, res.out
    out = " ".join(res.out.split())
    assert "ready" in out
    assert "! spark-1 (rank 1) GPU 0: throttling: SM clock 1100 of 2400 MHz (0.46× max, below 0.75×)" in out
    assert "! spark-2 (rank 2) GPU 0: critical: 93 °C, at or above the critical threshold 92 °C" in out
    res = run_cli("-i", str(site.inventory), "status", "--json")
    doc = json.loads(res.out)
    assert doc["verdict"] == "ready"
    assert [(w["node"], w["kind"], w["level"], w["value"]) for w in doc["warnings"]] == [
        ("spark-1", "throttle", "warn", 0.458), ("spark-2", "temperature", "crit", 93.0)]
    assert doc["nodes"][2]["gpu"]["devices"][0]["temp_c"] == 93


def test_status_as_prometheus_text(run_cli: Any, site: Site) -> None:
    site.nodes.gpu["spark-2"] = dev(88, 1000)
    site.nodes.state["spark-3"].unit = "failed"
    res = run_cli("-i", str(site.inventory), "status", "--format", "prometheus")
    assert res.code == EXIT_UNHEALTHY  # the file is the same whatever the verdict; the code says it
    got = samples(res.out)
    lab = (("cluster", "lab"),)
    assert got[("sparkctl_status_ready", lab)] == 0
    assert got[("sparkctl_status_verdict", (("cluster", "lab"), ("verdict", "degraded")))] == 1
    assert got[("sparkctl_status_verdict", (("cluster", "lab"), ("verdict", "ready")))] == 0
    assert got[("sparkctl_status_reasons", lab)] == 1 and got[("sparkctl_status_warnings", lab)] == 2
    assert got[("sparkctl_status_rank_unit_active", node_labels("spark-3", 3))] == 0
    assert got[("sparkctl_status_rank_unit_active", node_labels("spark-0", 0))] == 1
    assert got[("sparkctl_status_node_reachable", node_labels("spark-1", 1))] == 1
    assert got[("sparkctl_status_memory_available_bytes", node_labels("spark-0", 0))] == 3 * fakes.GIB
    g2 = node_labels("spark-2", 2, gpu="0")
    assert got[("sparkctl_status_gpu_temperature_celsius", g2)] == 88
    assert got[("sparkctl_status_gpu_sm_clock_hertz", g2)] == 1000e6
    assert got[("sparkctl_status_gpu_sm_clock_max_hertz", g2)] == 2400e6
    assert got[("sparkctl_status_gpu_utilization_ratio", g2)] == 0.95
    assert got[("sparkctl_status_gpu_hot", g2)] == 1 and got[("sparkctl_status_gpu_throttled", g2)] == 1
    assert got[("sparkctl_status_gpu_hot", node_labels("spark-0", 0, gpu="0"))] == 0
    assert got[("sparkctl_status_gpu_temperature_warn_celsius", lab)] == 85
    assert got[("sparkctl_status_endpoint_ok", (("cluster", "lab"), ("path", "/health")))] == 1
    assert got[("sparkctl_status_timestamp_seconds", lab)] > 1.7e9
    # Every series under its own prefix; those the node exporter also has keep the exporter's name.
    names = {name for name, _ in got}
    assert all(n.startswith("sparkctl_status_") for n in names)
    exporter_text = (Path(common.__file__).parents[1] / "nodeside" / "exporter.py").read_text()
    mirrored = ["gpu_temperature_celsius", "gpu_sm_clock_hertz", "gpu_sm_clock_max_hertz", "gpu_power_watts",
                "rank_unit_active", "memory_available_bytes", "shards_verified", "link_up", "link_mtu_bytes"]
    for suffix in mirrored:
        assert f'"sparkctl_{suffix}"' in exporter_text and f"sparkctl_status_{suffix}" in names, suffix


def test_prometheus_textfile_is_written_atomically_and_bad_combinations_are_refused(
        run_cli: Any, site: Site, tmp_path: Path) -> None:
    target = tmp_path / "textfile" / "sparkctl.prom"
    target.parent.mkdir()
    res = run_cli("-i", str(site.inventory), "status", "--format", "prometheus", "-o", str(target))
    assert res.code == EXIT_OK and res.out == ""
    assert samples(target.read_text())[("sparkctl_status_ready", (("cluster", "lab"),))] == 1
    assert [p.name for p in target.parent.iterdir()] == ["sparkctl.prom"]  # no temporary file left
    res = run_cli("-i", str(site.inventory), "status", "-o", str(target))
    assert res.code == EXIT_USAGE and "--output: only with --format prometheus" in res.err
    res = run_cli("-i", str(site.inventory), "status", "--format", "prometheus", "--watch")
    assert res.code == EXIT_USAGE and "--format prometheus" in res.err
    res = run_cli("-i", str(site.inventory), "status", "--format", "prometheus", "-o",
                  str(tmp_path / "missing" / "x.prom"))
    assert res.code == 1 and "--output" in res.err
    res = run_cli("-i", str(site.inventory), "status", "--format", "json")
    assert res.code == EXIT_OK and json.loads(res.out)["verdict"] == "ready"


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json-lines"])
def test_status_watch_piped_prints_one_snapshot_per_interval(
        run_cli: Any, site: Site, monkeypatch: pytest.MonkeyPatch, as_json: bool) -> None:
    """Into a file or a pipe, `status --watch` prints each snapshot as it is taken (a live redraw
    reached a pipe only at Ctrl-C): the table under a time line, or one JSON line per snapshot."""
    import time as time_mod
    import types

    from sparkctl.cli import status as status_cli

    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise KeyboardInterrupt
        site.nodes.gpu["spark-1"] = dev(60 + len(sleeps), 2400)

    # The command's own clock only: its pause between snapshots (nothing else in the process).
    clock = types.SimpleNamespace(sleep=sleep, strftime=time_mod.strftime, time=time_mod.time)
    monkeypatch.setattr(status_cli, "time", clock)
    res = run_cli("-i", str(site.inventory), "status", "--watch", *(["--json"] if as_json else []))
    assert res.code == EXIT_OK, res.err
    if as_json:
        lines = res.out.splitlines()
        temps = [json.loads(line)["nodes"][1]["gpu"]["devices"][0]["temp_c"] for line in lines]
        assert temps == [60, 61, 62]
    else:
        stamps = re.findall(r"^— \d{4}-\d\d-\d\d \d\d:\d\d:\d\d —$", res.out, re.MULTILINE)
        assert len(stamps) == 3 and res.out.count("ready") >= 3, res.out
        assert "61°C" in res.out and "62°C" in res.out
