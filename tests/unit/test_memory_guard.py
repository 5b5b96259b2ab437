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
