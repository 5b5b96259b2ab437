"""`status`'s table at 80 columns: one line per node, no cell cut or wrapped (the GPU cell ran over
three lines and the fabric cell over two)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from support.gates_fakes import FakeNodes, lab_cluster

from sparkctl.cli.status_view import fabric_cell, render_status, uptime
from sparkctl.serve import verdict

API_KEY = "sk-test"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))


def _snapshot(tmp_path: Path) -> verdict.Snapshot:
    from support.gates_fakes import FakeApi

    cluster, doc = lab_cluster(tmp_path)
    nodes = FakeNodes([n.name for n in cluster.nodes], {n.name: n.rank for n in cluster.nodes})
    for n in cluster.nodes:
        nodes.state[n.name].unit = "active"
        nodes.state[n.name].markers = {"The server is fired up and ready to roll!": 1}
    snap = verdict.snapshot(cluster, doc, nodes, FakeApi(cluster, doc).client(), API_KEY)
    for f in snap.nodes.values():  # a Spark's: one GB10, two fabric ports, most of 121.7 GiB free
        f.data["gpu"] = {"devices": [{"temp_c": 61, "sm_mhz": 2418, "max_sm_mhz": 3003, "power_w": 87}]}
        f.data["mem"] = {"MemAvailable": int(98.2 * verdict.GIB)}
        f.data["links"] = {"enp1s0f0np0": {"present": True, "state": "up", "mtu": 9000},
                           "enP2p1s0f0np0": {"present": True, "state": "up", "mtu": 9000}}
        f.data["shards"] = {"verified": f.rank != 2}
    return snap


def _lines(snap: verdict.Snapshot) -> list[str]:
    console = Console(width=80, record=True, color_system=None)
    console.print(render_status(snap))
    return console.export_text().splitlines()


def test_four_sparks_fit_80_columns_one_line_each(tmp_path: Path) -> None:
    lines = _lines(_snapshot(tmp_path))
    assert all(len(ln) <= 80 for ln in lines), lines
    assert not any("…" in ln for ln in lines), lines
    rows = [ln for ln in lines if ln.split()[:1] in (["0"], ["1"], ["2"], ["3"])]
    assert len(rows) == 4, lines
    assert all("61°C 2418/3003MHz 87W" in r and "2× up 9000" in r and "98.2" in r for r in rows), rows
    assert rows[2].rstrip().endswith("⨯") and rows[0].rstrip().endswith("✓")
    assert lines[0].split() == ["rank", "node", "unit", "mem", "GiB", "GPU", "fabric", "shards"]


def test_a_long_uptime_still_fits(tmp_path: Path) -> None:
    assert [uptime(s) for s in (5, 754, 11520, 3 * 86400 + 7300)] == ["5s", "12m", "3h12m", "3d2h"]
    snap = _snapshot(tmp_path)
    for f in snap.nodes.values():
        f.data["unit"] = {**f.unit, "up_s": 11520 + f.rank}
    lines = _lines(snap)
    rows = [ln for ln in lines if "active 3h12m" in ln]
    assert len(rows) == 4 and all(len(ln) <= 80 and "…" not in ln for ln in lines), lines


def test_ports_that_differ_are_each_shown() -> None:
    up: dict[str, Any] = {"present": True, "state": "up", "mtu": 9000}
    assert fabric_cell({"a": up, "b": dict(up)}) == "2× [green]up[/green] 9000"
    assert fabric_cell({"a": up, "b": dict(up, mtu=1500)}) == "[green]up[/green] 9000 [green]up[/green] 1500"
    assert fabric_cell({"a": up, "b": {"present": False}}) == "[green]up[/green] 9000 [red]b missing[/red]"
    assert fabric_cell({}) == "–"
