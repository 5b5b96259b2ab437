"""sparkctl.serve: the verdict, the preflight judgement, /server_info equality and the boot watch
(gates in order, memory guard, unit exits, timeouts), against a scripted fleet and a fake API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.gates_fakes import API_KEY, GIB, FakeApi, FakeClock, FakeNodes, lab_cluster

from sparkctl.serve import bootwatch, preflight, probe, redact, verdict


@pytest.fixture
def lab(tmp_path: Path) -> tuple[Any, dict[str, Any], FakeNodes, FakeApi]:
    cluster, doc = lab_cluster(tmp_path)
    ranks = {n.name: n.rank for n in cluster.nodes}
    nodes = FakeNodes([n.name for n in cluster.nodes], ranks)
    return cluster, doc, nodes, FakeApi(cluster, doc)


def _all(nodes: FakeNodes, **kw: Any) -> None:
    for st in nodes.state.values():
        for k, v in kw.items():
            setattr(st, k, v)


# --- probe script --------------------------------------------------------------------------------


def test_probe_script_carries_params_on_stdin_and_runs(tmp_path: Path) -> None:
    """The shipped probe really runs (here, locally) and prints one JSON document."""
    import subprocess

    script = probe.probe_script({"mode": "watch", "unit": "sparkctl-rank.service", "health_port": 1})
    proc = subprocess.run(["/bin/sh", "-s"], input=script, capture_output=True, text=True, timeout=30)
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["mode"] == "watch" and data["mem"]["MemAvailable"] > 0
    assert data["health"] is None  # nothing listens on port 1


# --- verdict ---------------------------------------------------------------------------------------


def test_verdict_ready_degraded_down(lab: Any) -> None:
    cluster, doc, nodes, api = lab
    http = api.client()
    _all(nodes, unit="active")
    snap = verdict.snapshot(cluster, doc, nodes, http, API_KEY)
    assert snap.verdict == verdict.READY and snap.reasons == []
    assert snap.head is not None and snap.head.served == ["deepseek-v41-flash"]

    nodes.state["spark-2"].unit = "failed"
    nodes.state["spark-2"].result = "signal"
    snap = verdict.snapshot(cluster, doc, nodes, http, API_KEY)
    assert snap.verdict == verdict.DEGRADED
    assert any("spark-2 (rank 2): rank unit not running (failed" in r and "signal" in r for r in snap.reasons)

    _all(nodes, unit="inactive")
    api.health = {}
    snap = verdict.snapshot(cluster, doc, nodes, http, API_KEY)
    assert snap.verdict == verdict.DOWN


def test_verdict_names_links_shards_memory_and_unreachable(lab: Any) -> None:
    cluster, doc, nodes, api = lab
    _all(nodes, unit="active")
    nodes.state["spark-1"].links_up = False
    nodes.state["spark-3"].mtu = 1500
    nodes.state["spark-0"].shards_ok = False
    nodes.state["spark-2"].mem = int(0.1 * GIB)
    snap = verdict.snapshot(cluster, doc, nodes, api.client(), API_KEY)
    text = "\n".join(snap.reasons)
    assert snap.verdict == verdict.DEGRADED
    assert "spark-1 (rank 1): fabric port enp1s0f0np0 is down" in text
    assert "spark-3 (rank 3): fabric port enp1s0f0np0 MTU 1500 < 9000" in text
    assert "spark-0 (rank 0): Engram shards not verified" in text
    assert "spark-2 (rank 2): MemAvailable 0.10 GiB below the floor 0.50 GiB" in text
    nodes.state["spark-3"].reachable = False
    snap = verdict.snapshot(cluster, doc, nodes, api.client(), API_KEY)
    assert any(r.startswith("spark-3 (rank 3): unreachable: connection timed out — check that spark-3 is "
                            "powered on") for r in snap.reasons), snap.reasons


def test_wrong_api_key_shows_in_the_verdict(lab: Any) -> None:
    cluster, doc, nodes, api = lab
    _all(nodes, unit="active")
    snap = verdict.snapshot(cluster, doc, nodes, api.client(), "wrong")
    assert snap.verdict == verdict.DEGRADED and "rank 0 /v1/models: 401" in snap.reasons


# --- preflight ------------------------------------------------------------------------------------


def _preflight(lab: Any, force: bool = False) -> list[preflight.Check]:
    cluster, doc, nodes, _ = lab
    checks, _facts = preflight.preflight(cluster, doc, nodes, force)
    return checks


def test_preflight_all_good_on_the_lab(lab: Any) -> None:
    checks = _preflight(lab)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    gid = [c for c in checks if c.name == "RoCE GID index"]
    assert len(gid) == 4 and all(c.skipped and "lab" in c.detail for c in gid)


def test_preflight_reports_every_problem_together(lab: Any) -> None:
    cluster, _doc, nodes, _ = lab
    nodes.state["spark-0"].ports = [cluster.ports.api]
    nodes.state["spark-1"].procs = [{"pid": 4242, "cmd": "sparkctl-sim-rank serve --node-rank 1"}]
    nodes.state["spark-2"].mem = int(0.2 * GIB)
    nodes.state["spark-3"].reachable = False
    nodes.state["spark-1"].shards_ok = False
    nodes.state["spark-2"].identity = "sha256:other"
    failed = {(c.node, c.name) for c in _preflight(lab) if not c.ok}
    assert failed == {
        ("spark-0", "ports free"),
        ("spark-1", "no earlier rank alive"),
        ("spark-1", "Engram shards"),
        ("spark-2", "MemAvailable"),
        ("spark-3", "reachable"),
        ("cluster", "same runtime everywhere"),
    }


def test_preflight_gpu_in_use_needs_force(lab: Any) -> None:
    _, _, nodes, _ = lab
    nodes.state["spark-2"].gpu_apps = ["777, python3"]
    assert [c.name for c in _preflight(lab) if not c.ok] == ["GPU idle"]
    forced = [c for c in _preflight(lab, force=True) if c.name == "GPU idle" and c.node == "spark-2"]
    assert forced[0].ok and "ignored (--force)" in forced[0].detail


def test_preflight_gid_must_resolve_and_be_common(lab: Any) -> None:
    _, _, nodes, _ = lab
    for st in nodes.state.values():
        st.gids = {"rocep1s0f0": 3, "roceP2p1s0f0": 3}
    assert all(c.ok for c in _preflight(lab))
    nodes.state["spark-1"].gids = {"rocep1s0f0": 5, "roceP2p1s0f0": 5}
    nodes.state["spark-2"].gids = {"rocep1s0f0": None, "roceP2p1s0f0": 3}
    failed = {(c.node, c.name) for c in _preflight(lab) if not c.ok}
    assert failed == {("spark-2", "RoCE GID index"), ("cluster", "common GID index")}


# --- /server_info ---------------------------------------------------------------------------------


def test_server_info_compared_on_the_profile_fields(lab: Any) -> None:
    cluster, doc, _, api = lab
    head = next(e for e in doc["nodes"] if e["rank"] == 0)
    expected = bootwatch.expected_server_info(cluster, head)
    assert expected["tp_size"] == "4" and expected["context_length"] == "32768"
    assert set(expected) == set(cluster.profile.gates.server_info_fields)
    assert bootwatch.compare_server_info(api.server_info, expected) == []
    bad = dict(api.server_info, max_total_tokens=65536)
    del bad["ep_size"]
    problems = bootwatch.compare_server_info(bad, expected)
    assert problems == ["ep_size missing (want 4)", "max_total_tokens=65536, rendered 131072"]


# --- the boot watch -------------------------------------------------------------------------------


def _watch(lab: Any, tmp_path: Path, qualify: Any = None) -> tuple[bootwatch.BootWatch, FakeClock, list[str]]:
    cluster, doc, nodes, api = lab
    clock = FakeClock()
    gates_seen: list[str] = []
    watch = bootwatch.BootWatch(cluster, doc, nodes, api.client(), API_KEY, record_dir=tmp_path / "rec",
                            on_update=lambda s: gates_seen.append(s.gate), qualify=qualify,
                            clock=clock, sleep=clock.sleep)
    return watch, clock, gates_seen


def _boots(start_round: int = 1) -> Any:
    """Units active from the first sample, workers healthy from round 2, rank 0 ready from round 3."""

    def step(mode: str, n: int, state: dict[str, Any]) -> None:
        if mode != "watch":
            return
        for st in state.values():
            st.unit = "active"
            st.markers = {"The server is fired up and ready to roll!": 1}

    return step


def test_boot_watch_passes_the_gates_in_order(lab: Any, tmp_path: Path) -> None:
    cluster, _doc, nodes, api = lab
    nodes.on_round = _boots()
    api.ready = False
    workers = [str(n.mgmt_ip) for n in cluster.workers]
    for ip in workers:
        api.health[ip] = False

    def later(mode: str, n: int, state: dict[str, Any]) -> None:
        _boots()(mode, n, state)
        if mode == "watch" and n >= 2:
            for ip in workers:
                api.health[ip] = True
        if mode == "watch" and n >= 3:
            api.ready = True

    nodes.on_round = later
    asked: list[str] = []
    watch, _clock, seen = _watch(lab, tmp_path, qualify=lambda: (asked.append("quick"), (True, "passed"))[1])
    state = watch.run()
    assert state.done and asked == ["quick"]
    order = [g for i, g in enumerate(seen) if i == 0 or seen[i - 1] != g]
    assert order[:4] == ["unit active", "worker /health", "rank 0 /ready", "log markers"]
    head = state.rows["spark-0"]
    assert all(head.phases[p] == bootwatch.OK for p in bootwatch.PHASES)
    # /server_info carried the API key (as SGLang's does): no record holds it.
    assert api.server_info["api_key"] == API_KEY
    records = sorted((tmp_path / "rec").iterdir())
    assert any(r.name == "server-info.json" for r in records)
    for record in records:
        assert API_KEY not in record.read_text(), record.name
    assert json.loads((tmp_path / "rec" / "server-info.json").read_text())["api_key"] == "<redacted>"
    assert all(r.phases["health"] == bootwatch.OK for r in state.rows.values())
    records = tmp_path / "rec"
    samples = (records / "memory-samples.jsonl").read_text().splitlines()
    assert len(samples) == 4 * state.samples and json.loads(samples[0])["mem_available"] == 3 * GIB
    assert json.loads((records / "boot-state.json").read_text())["status"] == "READY"
    assert json.loads((records / "server-info.json").read_text())["tp_size"] == 4
    chat = [r for r in api.requests if r.url.path == "/v1/chat/completions"]
    assert len(chat) == 1 and chat[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert API_KEY not in (records / "boot-state.json").read_text()


def test_memory_guard_stops_the_boot_and_names_the_node(lab: Any, tmp_path: Path) -> None:
    _cluster, _doc, nodes, api = lab
    api.ready = False

    def sink(mode: str, n: int, state: dict[str, Any]) -> None:
        _boots()(mode, n, state)
        if mode == "watch":
            state["spark-2"].mem = int((1.0 - 0.3 * n) * GIB)

    nodes.on_round = sink
    watch, _, _ = _watch(lab, tmp_path)
    with pytest.raises(bootwatch.GateFailure) as info:
        watch.run()
    exc = info.value
    assert exc.gate == "memory guard" and exc.node == "spark-2"
    assert "below the floor 0.50 GiB" in exc.detail and "minimum seen 0.40 GiB" in exc.detail
    assert "started" in exc.log_tail
    assert ("spark-2", "journalctl") in nodes.calls
    rec = json.loads((tmp_path / "rec" / "boot-state.json").read_text())
    assert rec["status"] == "FAILED" and rec["gate"] == "memory guard"


def _exits_at_round_3(node: str) -> Any:
    """A boot in which ``node``'s rank unit exits (status 1) at the third watch round."""

    def dies(mode: str, n: int, state: dict[str, Any]) -> None:
        _boots()(mode, n, state)
        if mode == "watch" and n >= 3:
            state[node].unit = "failed"
            state[node].result = "exit-code"

    return dies


def test_a_rank_that_exits_fails_the_boot(lab: Any, tmp_path: Path) -> None:
    _, _, nodes, api = lab
    api.ready = False

    nodes.on_round = _exits_at_round_3("spark-1")
    nodes.state["spark-0"].journal = "2026-11-29T10:00:05+0000 spark-0 rank[0]: scheduler died: oom\n"
    watch, _, _ = _watch(lab, tmp_path)
    with pytest.raises(bootwatch.GateFailure) as info:
        watch.run()
    assert info.value.gate == "rank unit exited" and info.value.node == "spark-1"
    assert "exit-code" in info.value.detail
    # A worker that exits has most often lost rank 0: rank 0's journal comes with the failure.
    assert info.value.head == "spark-0"
    assert info.value.head_tail.endswith("scheduler died: oom")
    assert "scheduler died" not in info.value.log_tail
    assert ("spark-1", "journalctl") in nodes.calls and ("spark-0", "journalctl") in nodes.calls


def test_a_failure_on_rank_0_reads_only_rank_0s_journal(lab: Any, tmp_path: Path) -> None:
    _, _, nodes, api = lab
    api.ready = False

    nodes.on_round = _exits_at_round_3("spark-0")
    watch, _, _ = _watch(lab, tmp_path)
    with pytest.raises(bootwatch.GateFailure) as info:
        watch.run()
    assert info.value.node == "spark-0" and info.value.head is None and info.value.head_tail == ""
    assert [c for c in nodes.calls if c[1] == "journalctl"] == [("spark-0", "journalctl")]


def test_ready_timeout_names_rank_0(lab: Any, tmp_path: Path) -> None:
    cluster, _, nodes, api = lab
    api.ready = False
    nodes.on_round = _boots()
    watch, clock, _ = _watch(lab, tmp_path)
    with pytest.raises(bootwatch.GateFailure) as info:
        watch.run()
    assert info.value.gate == "rank 0 /ready" and info.value.node == "spark-0"
    assert clock.now - 1000.0 >= cluster.profile.gates.boot_timeout_s


def test_server_info_mismatch_fails_the_boot(lab: Any, tmp_path: Path) -> None:
    _, _, nodes, api = lab
    nodes.on_round = _boots()
    api.server_info["context_length"] = 4096
    watch, _, _ = _watch(lab, tmp_path)
    with pytest.raises(bootwatch.GateFailure) as info:
        watch.run()
    assert info.value.gate == "/server_info equals the rendered config"
    assert "context_length=4096, rendered 32768" in info.value.detail


def test_missing_log_marker_and_empty_chat_fail(lab: Any, tmp_path: Path) -> None:
    _, _, nodes, api = lab

    def no_marker(mode: str, n: int, state: dict[str, Any]) -> None:
        _boots()(mode, n, state)
        state["spark-0"].markers = {}

    nodes.on_round = no_marker
    watch, _, _ = _watch(lab, tmp_path)
    with pytest.raises(bootwatch.GateFailure) as info:
        watch.run()
    assert info.value.gate == "log markers" and info.value.node == "spark-0"

    nodes.on_round = _boots()
    api.chat_text = "  "
    watch, _, _ = _watch(lab, tmp_path)
    with pytest.raises(bootwatch.GateFailure) as info:
        watch.run()
    assert info.value.gate == "chat completion" and "empty answer" in info.value.detail


def test_failed_qualify_fails_the_boot(lab: Any, tmp_path: Path) -> None:
    _, _, nodes, _ = lab
    nodes.on_round = _boots()
    watch, _, _ = _watch(lab, tmp_path, qualify=lambda: (False, "failed: arithmetic"))
    with pytest.raises(bootwatch.GateFailure) as info:
        watch.run()
    assert info.value.gate == "qualify --suite quick" and "arithmetic" in info.value.detail


def test_redact() -> None:
    text = f"key={API_KEY} Authorization: Bearer abc.def other {API_KEY[:6]}"
    out = redact.redact(text, [API_KEY, ""])
    assert API_KEY not in out and "abc.def" not in out and API_KEY[:6] in out
