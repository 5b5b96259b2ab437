"""A rank OOM-killed or restarted fails the verdict (`status`), the supervisor's judgement (`watch`)
and the boot (`up`), as the publisher's start-up guard does (R4 scripts/cluster.py serve(): a
container not running, OOMKilled, RestartCount > 0), with systemd's restarts and a rank started
again since readiness counted too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from support.gates_fakes import (
    API_KEY,
    FakeApi,
    FakeClock,
    FakeNodes,
    container_site,
    kit_lines,
    lab_cluster,
    marker_reading,
)

from sparkctl.cli.status_view import render_status
from sparkctl.serve import bootwatch, verdict
from sparkctl.serve.supervisor import RESTART, Brain, observe

STARTED = "2026-12-05T10:00:00.123456789Z"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _site(tmp_path: Path, container: bool = True) -> tuple[Any, dict[str, Any], FakeNodes, FakeApi]:
    cluster, doc = container_site(tmp_path) if container else lab_cluster(tmp_path)
    nodes = FakeNodes([n.name for n in cluster.nodes], {n.name: n.rank for n in cluster.nodes})
    for n in cluster.nodes:
        st = nodes.state[n.name]
        st.unit = "active"
        st.markers = {"The server is fired up and ready to roll!": 1}
        if container:  # the kit's markers too: the container site mounts the kit
            st.markers, st.marker_lines = marker_reading(list(cluster.profile.gates.log_markers),
                                                         kit_lines(n.rank))
            st.container = {"exists": True, "name": f"sparkctl-{cluster.name}-r{n.rank}", "running": True,
                            "oom_killed": False, "restart_count": 0, "started_at": STARTED,
                            "status": "running"}
    return cluster, doc, nodes, FakeApi(cluster, doc)


def _text(snap: verdict.Snapshot) -> str:
    console = Console(width=240, record=True)
    console.print(render_status(snap))
    return console.export_text()


def _snap(site: tuple[Any, dict[str, Any], FakeNodes, FakeApi]) -> verdict.Snapshot:
    cluster, doc, nodes, api = site
    return verdict.snapshot(cluster, doc, nodes, api.client(), API_KEY)


def test_an_oom_killed_container_fails_the_verdict_in_words(tmp_path: Path) -> None:
    site = _site(tmp_path)
    assert _snap(site).verdict == verdict.READY
    cluster, _doc, nodes, _api = site
    box = nodes.state["spark-2"].container
    assert box is not None
    box["oom_killed"] = True
    snap = _snap(site)
    name = f"sparkctl-{cluster.name}-r2"
    assert snap.verdict == verdict.DEGRADED
    assert snap.reasons == [f"spark-2 (rank 2): container {name} was OOM-killed"]
    assert snap.as_dict()["faults"] == {"spark-2": [f"container {name} was OOM-killed"]}
    assert f"container {name} was OOM-killed" in _text(snap)


def test_docker_and_systemd_restart_counts_fail_the_verdict(tmp_path: Path) -> None:
    site = _site(tmp_path)
    cluster, _doc, nodes, _api = site
    box = nodes.state["spark-1"].container
    assert box is not None
    box["restart_count"] = 1
    nodes.state["spark-3"].restarts = 2
    snap = _snap(site)
    assert snap.verdict == verdict.DEGRADED
    assert snap.reasons == [f"spark-1 (rank 1): container sparkctl-{cluster.name}-r1 restarted 1× "
                            "(docker RestartCount)",
                            "spark-3 (rank 3): rank unit restarted 2× (systemd NRestarts)"]
    assert "restarted 1×" in _text(snap)


def test_a_unit_killed_by_the_oom_killer_says_so(tmp_path: Path) -> None:
    site = _site(tmp_path, container=False)
    _cluster, _doc, nodes, _api = site
    nodes.state["spark-2"].unit, nodes.state["spark-2"].result = "failed", "oom-kill"
    snap = _snap(site)
    assert "spark-2 (rank 2): rank unit was OOM-killed (systemd result oom-kill)" in snap.reasons


def test_a_rank_started_again_since_ready_fails_the_verdict(tmp_path: Path) -> None:
    site = _site(tmp_path)
    cluster, _doc, nodes, _api = site
    first = _snap(site)
    verdict.save_ready_marks(verdict.ready_file(cluster.name), first.nodes)
    assert _snap(site).verdict == verdict.READY
    # `docker restart` of one rank's container: the same unit, the container started again.
    box = nodes.state["spark-2"].container
    assert box is not None
    box["started_at"] = "2026-12-05T10:07:00.5Z"
    snap = _snap(site)
    assert snap.verdict == verdict.DEGRADED
    assert snap.reasons == [f"spark-2 (rank 2): container sparkctl-{cluster.name}-r2 restarted since "
                            "`up` made it ready (≥1×: started 2026-12-05T10:07:00.5Z, ready with the "
                            f"start of {STARTED})"]
    # `systemctl restart` of another rank's unit: a new invocation (and a new container).
    nodes.state["spark-1"].invocation = "def"
    reasons = _snap(site).reasons
    assert "spark-1 (rank 1): restarted since `up` made it ready (≥1×: the rank unit runs a new invocation)" \
        in reasons
    # A `docker restart` whose `docker run` then exited: the unit stopped, the restart still named.
    nodes.state["spark-3"].unit, nodes.state["spark-3"].result = "failed", "exit-code"
    box = nodes.state["spark-3"].container
    assert box is not None
    box["started_at"], box["running"] = "2026-12-05T10:09:00Z", False
    reasons = _snap(site).reasons
    assert any(r.startswith("spark-3 (rank 3): rank unit not running") for r in reasons), reasons
    assert f"spark-3 (rank 3): container sparkctl-{cluster.name}-r3 restarted since `up` made it ready " \
           f"(≥1×: started 2026-12-05T10:09:00Z, ready with the start of {STARTED})" in reasons


def test_without_a_ready_record_nothing_is_compared(tmp_path: Path) -> None:
    site = _site(tmp_path, container=False)
    site[2].state["spark-1"].invocation = "def"
    assert _snap(site).verdict == verdict.READY


# --- the supervisor ---------------------------------------------------------------------------------


def test_the_supervisor_restarts_the_group_for_a_restarted_rank(tmp_path: Path) -> None:
    site = _site(tmp_path)
    cluster, _doc, nodes, _api = site
    box = nodes.state["spark-3"].container
    assert box is not None
    box["oom_killed"] = True
    snap = _snap(site)
    brain = Brain(max_restarts=3, window_s=600.0, failures=3, autostart=False)
    d = brain.decide(observe(snap, (True, "3 tokens"), 0.5), 0.0)
    assert (d.kind, d.action, d.node) == ("rank-restarted", RESTART, "spark-3")
    assert d.evidence == f"rank 3: container sparkctl-{cluster.name}-r3 was OOM-killed"


# --- the boot watch ---------------------------------------------------------------------------------


def _watch(site: tuple[Any, dict[str, Any], FakeNodes, FakeApi], tmp_path: Path) -> bootwatch.BootWatch:
    cluster, doc, nodes, api = site
    clock = FakeClock()
    return bootwatch.BootWatch(cluster, doc, nodes, api.client(), API_KEY, record_dir=tmp_path / "rec",
                               clock=clock, sleep=clock.sleep, ready_file=verdict.ready_file(cluster.name))


def test_a_rank_restarted_during_the_boot_fails_it(tmp_path: Path) -> None:
    site = _site(tmp_path, container=False)
    _cluster, _doc, nodes, api = site
    api.ready = False

    def restart(mode: str, n: int, state: dict[str, Any]) -> None:
        if mode == "watch" and n == 3:
            state["spark-1"].invocation = "def"

    nodes.on_round = restart
    with pytest.raises(bootwatch.GateFailure) as info:
        _watch(site, tmp_path).run()
    assert info.value.gate == "rank restarted or OOM-killed" and info.value.node == "spark-1"
    assert info.value.detail == ("rank 1: restarted since `up` made it ready (≥1×: the rank unit runs a new "
                                 "invocation)")


def test_an_oom_kill_after_the_last_gate_fails_the_boot(tmp_path: Path) -> None:
    site = _site(tmp_path)
    cluster, _doc, nodes, _api = site

    def late(mode: str, n: int, state: dict[str, Any]) -> None:
        if mode == "markers":  # the ranks pass every gate; one is OOM-killed while the last ones run
            state["spark-2"].container["oom_killed"] = True

    nodes.on_round = late
    with pytest.raises(bootwatch.GateFailure) as info:
        _watch(site, tmp_path).run()
    assert info.value.gate == "rank restarted or OOM-killed" and info.value.node == "spark-2"
    assert info.value.detail == f"rank 2: container sparkctl-{cluster.name}-r2 was OOM-killed"
    assert not verdict.ready_file(cluster.name).exists()


def test_a_good_boot_records_each_rank_for_status(tmp_path: Path) -> None:
    site = _site(tmp_path)
    cluster = site[0]
    assert _watch(site, tmp_path).run().done
    marks = verdict.load_ready_marks(verdict.ready_file(cluster.name))
    assert marks == {f"spark-{r}": {"invocation": "abc", "started_at": STARTED} for r in range(4)}
