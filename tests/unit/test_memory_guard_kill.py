"""The memory guard's action checks its own kill: a rank that survives SIGKILL (or comes back by
auto-restart) gets a harder round — the unit's whole cgroup, the container removed, the unit
stopped — and what was achieved on every node is reported with the breach."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from support.gates_fakes import GIB, FakeNodes, lab_cluster

from sparkctl.serve.guard import KILL_ROUNDS, KillReport, MemoryGuard, abort_ranks
from sparkctl.ssh.fleet import HostResult, Target


class Nodes:
    """Nodes whose rank survives ``survives[node]`` kill rounds; ``gone`` nodes never answer."""

    def __init__(self, names: list[str], survives: dict[str, int] | None = None,
                 gone: tuple[str, ...] = ()) -> None:
        self.targets = {n: Target(n, f"10.250.0.{10 + i}", rank=i) for i, n in enumerate(names)}
        self.survives = dict.fromkeys(names, 0) | (survives or {})
        self.gone = gone
        self.sent: list[dict[str, str]] = []

    def run(self, script: Any, timeout: float = 10.0, only: Any = None) -> dict[str, HostResult]:
        names = list(only) if only is not None else list(self.targets)
        self.sent.append({n: script[n] for n in names})
        out = {}
        for n in names:
            if n in self.gone:
                out[n] = HostResult(n, error="timed out connecting to 10.250.0.12:22")
                continue
            alive = self.survives[n] > 0
            self.survives[n] -= 1
            unit = "activating" if alive else "failed"  # auto-restart brings it back
            out[n] = HostResult(n, 0, f"unit={unit}\ncontainer={'true' if alive else 'gone'}\n")
        return out


def _doc(tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    return lab_cluster(tmp_path, {"memory": {"floor_gib": 2.5}})


def test_a_kill_that_works_is_checked_once_and_reported(tmp_path: Path) -> None:
    cluster, doc = _doc(tmp_path)
    nodes = Nodes([n.name for n in cluster.nodes])
    report = abort_ranks(doc, nodes)
    assert isinstance(report, KillReport) and report.ok and report.rounds == 1
    assert set(report.nodes.values()) == {"killed"}
    assert all("systemctl is-active" in text for text in nodes.sent[0].values())


def test_a_rank_that_survives_the_kill_gets_a_harder_round(tmp_path: Path) -> None:
    cluster, doc = _doc(tmp_path)
    nodes = Nodes([n.name for n in cluster.nodes], survives={"spark-2": 1})
    report = abort_ranks(doc, nodes)
    assert report.ok and report.rounds == 2
    assert list(nodes.sent[1]) == ["spark-2"]  # only the node where it did not take
    harder = nodes.sent[1]["spark-2"]
    assert "--kill-whom=all" in harder and "systemctl stop" in harder


def test_a_kill_that_never_takes_is_reported_with_the_node(tmp_path: Path) -> None:
    cluster, doc = _doc(tmp_path)
    nodes = Nodes([n.name for n in cluster.nodes], survives={"spark-1": 99}, gone=("spark-3",))
    report = abort_ranks(doc, nodes)
    assert not report.ok and report.rounds == KILL_ROUNDS
    said = report.describe()
    assert "spark-1: still running (unit activating, container running)" in said
    assert "spark-3: unreachable (timed out connecting" in said and "spark-0" not in said


def test_the_guard_records_what_its_action_achieved(tmp_path: Path) -> None:
    cluster, doc = _doc(tmp_path)
    fleet = FakeNodes([n.name for n in cluster.nodes], {n.name: n.rank for n in cluster.nodes})
    for st in fleet.state.values():
        st.unit, st.mem = "active", 3 * GIB
    fleet.state["spark-2"].mem = int(2.0 * GIB)
    kill = Nodes([n.name for n in cluster.nodes], survives={"spark-2": 99})
    guard = MemoryGuard(cluster, doc, fleet, on_breach=lambda b: abort_ranks(doc, kill),
                        record_dir=tmp_path / "rec", interval=0.05)
    with guard:
        deadline = time.monotonic() + 5
        while guard.breach is None and time.monotonic() < deadline:
            time.sleep(0.02)
    assert guard.breach is not None and "the kill did not take" in (guard.breach.kill or "")
    summary = guard.summary()
    assert "spark-2: still running" in summary["kill"] and "spark-2: still running" in summary["breach"]
    assert any(e.startswith("memory guard: the kill did not take") for e in summary["errors"])
