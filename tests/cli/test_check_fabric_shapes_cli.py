"""`sparkctl check fabric` on the switchless shapes, with the runner faked: the pings follow each
topology's matrix, a ring's opposite nodes are reported as having no direct path (expected, not a
failure), and a broken triangle cable is named by its two ends."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.fabric_answers import fabric_answers
from support.runner import FakeRunner

from sparkctl.ansible import results, runner
from sparkctl.errors import EXIT_FAILED, EXIT_OK
from sparkctl.model import load_inventory

EXAMPLES = Path(__file__).resolve().parents[2] / "inventory" / "examples"


def _site(tmp_path: Path, shape: str) -> Path:
    dest = tmp_path / shape
    shutil.copytree(EXAMPLES / shape, dest)
    return dest


def _probes(inv: Path, failing: frozenset[tuple[str, str]] = frozenset()) -> dict[str, Any]:
    """Each node's probe answering the pings the role hands it (sparkctl_cluster.fabric_check)."""
    return fabric_answers(load_inventory(inv), failing, kind="unreachable",
                          detail="0/15 replies, and 0/2 small pings")


def _fake(monkeypatch: pytest.MonkeyPatch, inv: Path, reported: dict[str, Any]) -> FakeRunner:
    names = [n.name for n in load_inventory(inv).nodes]
    fake = FakeRunner(names, ok=3, duration_s=1.0)
    fake.reported = reported
    monkeypatch.setattr(runner, "execute", fake)
    return fake


def test_ring_passes_and_names_the_opposite_pairs_as_expected_absent(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = _site(tmp_path, "ring-tp4")
    _fake(monkeypatch, inv, {results.FABRIC_PROBE: _probes(inv)})
    res = run_cli("-i", str(inv), "check", "fabric")
    assert res.code == EXIT_OK, res.err
    flat = " ".join(res.out.split())
    assert "all 8 pings over every cable, both directions" in flat
    assert "spark-0 <-> spark-2: no direct path, as expected: opposite nodes on the ring" in flat
    assert "spark-1 <-> spark-3: no direct path, as expected" in flat
    doc = json.loads(run_cli("-i", str(inv), "--json", "check", "fabric").out)
    assert doc["ok"] is True and doc["problems"] == []
    assert [a.split(":")[0] for a in doc["absent"]] == ["spark-0 <-> spark-2", "spark-1 <-> spark-3"]
    assert sorted({(p["src"], p["dst"]) for p in doc["pairs"]}) == [
        ("spark-0", "spark-1"), ("spark-0", "spark-3"), ("spark-1", "spark-0"), ("spark-1", "spark-2"),
        ("spark-2", "spark-1"), ("spark-2", "spark-3"), ("spark-3", "spark-0"), ("spark-3", "spark-2"),
    ]


def test_triangle_broken_cable_fails_naming_both_ends(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = _site(tmp_path, "triangle-tp3")
    broken = frozenset({("spark-1", "spark-2"), ("spark-2", "spark-1")})
    _fake(monkeypatch, inv, {results.FABRIC_PROBE: _probes(inv, broken)})
    res = run_cli("-i", str(inv), "--json", "check", "fabric")
    assert res.code == EXIT_FAILED
    doc = json.loads(res.out)
    assert doc["absent"] == []
    cable = "likely culprit: the cable spark-1 enp1s0f1np1 - spark-2 enp1s0f1np1 (10.77.3.0/24)"
    assert any(p.startswith(cable) for p in doc["problems"])
    assert cable in " ".join(res.err.replace("│", " ").split())
    assert len([p for p in doc["pairs"] if p["ok"]]) == 4
