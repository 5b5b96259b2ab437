"""The memory guard samples on its own thread, whatever the command waits on; below the floor it
acts once and records the lowest MemAvailable per node next to R4's published receipt."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from support.gates_fakes import GIB, FakeNodes, lab_cluster

from sparkctl.serve.guard import R4_MIN_MEM_AVAILABLE_GIB, Breach, MemoryGuard


def _nodes(cluster: Any) -> FakeNodes:
    nodes = FakeNodes([n.name for n in cluster.nodes], {n.name: n.rank for n in cluster.nodes})
    for st in nodes.state.values():
        st.unit, st.mem = "active", 3 * GIB
    return nodes


def test_a_breach_while_the_command_is_busy_elsewhere_is_acted_on_once(tmp_path: Path) -> None:
    cluster, doc = lab_cluster(tmp_path, {"memory": {"floor_gib": 2.5}})
    nodes = _nodes(cluster)
    seen: list[Breach] = []
    guard = MemoryGuard(cluster, doc, nodes, on_breach=seen.append, record_dir=tmp_path / "rec",
                        interval=0.05)
    with guard:
        time.sleep(0.2)  # the command is "blocked" (a long HTTP call); the guard keeps sampling
        nodes.state["spark-2"].mem = int(2.1 * GIB)
        deadline = time.monotonic() + 5
        while guard.breach is None and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(seen) == 1 and seen[0].node == "spark-2"
    assert guard.samples >= 3
    summary = json.loads((tmp_path / "rec" / "memory-guard.json").read_text())
    assert summary["lowest_mem_available_gib"]["spark-2"] == 2.1
    assert summary["lowest_mem_available_gib"]["spark-0"] == 3.0
    assert summary["r4_published_lowest_gib"] == R4_MIN_MEM_AVAILABLE_GIB
    assert "spark-2: MemAvailable 2.10 GiB below the floor 2.50 GiB" in summary["breach"]


def test_an_unreachable_node_is_noted_not_fatal_to_the_guard(tmp_path: Path) -> None:
    cluster, doc = lab_cluster(tmp_path, {"memory": {"floor_gib": 2.5}})
    nodes = _nodes(cluster)
    nodes.state["spark-1"].reachable = False
    guard = MemoryGuard(cluster, doc, nodes, interval=0.05)
    with guard:
        time.sleep(0.2)
    assert guard.breach is None and guard.samples >= 2
    assert "spark-1" not in guard.lowest and any(e.startswith("spark-1:") for e in guard.errors)


def test_a_first_sample_put_off_waits_and_a_stop_before_it_samples_nothing(tmp_path: Path) -> None:
    """`up` puts the first sample off by one interval (the unit starts have the CPU first); stopped
    before then, the guard has sampled nothing and stops at once."""
    cluster, doc = lab_cluster(tmp_path, {"memory": {"floor_gib": 2.5}})
    nodes = _nodes(cluster)
    guard = MemoryGuard(cluster, doc, nodes, interval=0.05, first_after=0.3)
    t0 = time.monotonic()
    with guard:
        deadline = t0 + 10
        while guard.samples == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        first = time.monotonic() - t0
    assert guard.samples >= 1 and first >= 0.3, first
    early = MemoryGuard(cluster, doc, nodes, interval=0.05, first_after=30)
    t0 = time.monotonic()
    with early:
        time.sleep(0.05)
    assert early.samples == 0 and time.monotonic() - t0 < 10
