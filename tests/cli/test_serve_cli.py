"""`sparkctl up/down/status/logs/bundle` with the runner, the SSH fleet and the API faked (the
lab-shaped site of support.serve_site): which playbooks run in which order, what is refused, which
exit code, and no secret in a bundle."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from support import gates_fakes as fakes
from support.serve_site import Site

from sparkctl.errors import EXIT_FAILED, EXIT_OK, EXIT_UNHEALTHY, EXIT_USAGE
from sparkctl.serve import faststop, probe

GIB = fakes.GIB
API_KEY = fakes.API_KEY


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    return Site(tmp_path, monkeypatch)


def test_up_runs_preflight_playbook_and_gates(run_cli: Any, site: Site) -> None:
    res = run_cli("-i", str(site.inventory), "--json", "up")
    assert res.code == EXIT_OK, res.err
    assert site.books() == ["up.yml"]
    out = json.loads(res.out)
    assert out["result"] == "ready" and out["changed"] is True
    assert set(out["min_mem_available"]) == {"spark-0", "spark-1", "spark-2", "spark-3"}
    modes = [m for _, m in site.nodes.calls]
    assert modes.index("preflight") < modes.index("watch") < modes.index("markers")
    assert API_KEY not in res.out + res.err


def test_up_when_ready_and_current_does_nothing(run_cli: Any, site: Site) -> None:
    for entry in site.doc["nodes"]:
        st = site.nodes.state[entry["name"]]
        st.unit = "active"
        st.file_sha = probe.expected_hashes(site.cluster, entry)
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_OK, res.err
    assert site.books() == [] and "already up" in res.out
    # A changed environment file (or unit, or secret) means a restart, all ranks together.
    entry = site.doc["nodes"][1]
    site.nodes.state[entry["name"]].file_sha = dict(probe.expected_hashes(site.cluster, entry),
                                                   **{"/etc/sparkctl/rank.env": "0" * 64})
    res = run_cli("-i", str(site.inventory), "up", "--yes")
    assert res.code == EXIT_OK, res.err
    assert site.books() == ["up.yml"] and site.stop_rounds() == 1 and "restarting" in res.out
    # the preflight read beside the snapshot saw the running ranks: it runs again once they are stopped
    assert site.nodes.joined[-2:] == [["preflight", "upcheck"], ["preflight", "upcheck"]]


def test_up_heals_a_degraded_cluster_by_stopping_first(run_cli: Any, site: Site) -> None:
    for st in site.nodes.state.values():
        st.unit = "active"
    site.nodes.state["spark-2"].unit = "failed"
    res = run_cli("-i", str(site.inventory), "up", "-y")
    assert res.code == EXIT_OK, res.err
    assert site.books() == ["up.yml"] and site.stop_rounds() == 1
    assert "cluster is degraded" in res.out


def _running(site: Site) -> None:
    for st in site.nodes.state.values():
        st.unit = "active"


def test_up_without_a_terminal_refuses_to_replace_running_ranks(run_cli: Any, site: Site) -> None:
    _running(site)
    res = run_cli("-i", str(site.inventory), "up", "--restart")
    assert res.code == EXIT_USAGE
    assert site.books() == []
    assert "would stop 4 running rank(s)" in res.err and "rank 2 on spark-2" in res.err
    assert "--yes" in res.err
    assert {st.unit for st in site.nodes.state.values()} == {"active"}


@pytest.mark.parametrize(("answer", "code", "books"), [(False, EXIT_FAILED, []),
                                                       (True, EXIT_OK, ["up.yml"])])
def test_up_at_a_terminal_asks_before_replacing_running_ranks(
    run_cli: Any, site: Site, monkeypatch: pytest.MonkeyPatch, answer: bool, code: int, books: list[str]
) -> None:
    _running(site)
    site.nodes.state["spark-1"].unit = "failed"
    asked: list[str] = []
    site.tools.interactive = lambda: True

    def ask(question: str) -> bool:
        asked.append(question)
        return answer

    site.tools.ask = ask
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == code, res.err
    assert len(asked) == 1 and "cluster is degraded" in asked[0]
    assert site.books() == books and site.stop_rounds() == int(answer)  # stopped over SSH
    running = res.err.split("running:")[1].split("\n")[0]
    assert "rank 0 on spark-0 (active)" in running and "spark-1" not in running
    if not answer:
        assert "left as they were" in res.err


def test_up_replaces_failed_units_without_asking(run_cli: Any, site: Site,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for st in site.nodes.state.values():
        st.unit = "failed"
    site.tools.ask = lambda question: pytest.fail(f"asked: {question}")
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_OK, res.err
    assert site.books() == ["up.yml"] and site.stop_rounds() == 1


def test_preflight_refusal_starts_nothing(run_cli: Any, site: Site) -> None:
    site.nodes.state["spark-3"].reachable = False
    site.nodes.state["spark-1"].ports = [site.cluster.ports.dist_init]
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_FAILED
    assert site.books() == []
    assert "preflight refused the start: 2 problem(s)" in res.err
    flat = " ".join(res.err.replace("│", " ").split())
    assert "spark-3 (10.250.0.13:22): unreachable: connection timed out" in flat
    assert "spark-1: ports free" in flat
    assert flat.count("spark-1: ports free") == 1  # printed once: in the error, not in a table as well


def test_memory_floor_aborts_and_stops_everything(run_cli: Any, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    site = Site(tmp_path, monkeypatch, overrides={"memory": {"floor_gib": 2.5}})
    site.nodes.state["spark-1"].mem = 3 * GIB

    def squeeze(state: dict[str, Any]) -> None:
        state["spark-1"].mem = int(2.2 * GIB)

    site.after_up = squeeze
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_FAILED
    assert site.books() == ["up.yml"] and site.stop_rounds() == 1
    assert "memory guard" in res.err and "spark-1" in res.err
    assert all(st.unit == "inactive" for st in site.nodes.state.values())
    samples = (tmp_path / "run-up" / "memory-samples.jsonl").read_text().splitlines()
    assert any(json.loads(s)["node"] == "spark-1" for s in samples)



def test_a_gate_that_fails_after_a_guard_breach_reports_the_breach(run_cli: Any, site: Site,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The guard's own thread sees spark-1 below the floor and kills every rank; memory comes back,
    # and the boot watch's next sample sees a rank unit that exited. The breach is the cause.
    from sparkctl.serve.guard import Breach, MemoryGuard

    guards: list[Any] = []

    class Guard:
        def __init__(self, cluster: Any, doc: Any, fleet: Any, on_breach: Any, first_after: float) -> None:
            assert first_after == MemoryGuard.interval  # not at once: the unit starts have the CPU
            self.breach: Breach | None = None
            self.record_dir: Path | None = None
            guards.append(self)

        def start(self) -> None: ...

        def stop(self) -> None: ...

    def killed_by_the_guard(state: dict[str, Any]) -> None:
        guards[0].breach = Breach("spark-1", int(2.2 * GIB), int(2.5 * GIB), 0.0)
        for st in state.values():
            st.unit = "failed"

    site.tools.memory_guard = Guard
    site.after_up = killed_by_the_guard
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_FAILED, res.out + res.err
    said = " ".join(res.err.replace("│", " ").split())  # the error box, unwrapped
    assert "failed at the gate 'memory guard' on spark-1" in said, res.err
    assert "MemAvailable 2.20 GiB below the floor 2.50 GiB" in said, res.err
    assert site.books() == ["up.yml"] and site.stop_rounds() == 1

def _up_with_spark_2_exiting(run_cli: Any, site: Site, head_journal: str) -> tuple[Any, str]:
    """`up` where the worker on spark-2 exits ('lost rank 0') with rank 0's journal as given:
    the result and the error box unwrapped to one line."""
    site.nodes.state["spark-0"].journal = head_journal
    site.nodes.state["spark-2"].journal = "2026-11-29T10:00:09+0000 spark-2 rank[2]: lost rank 0\n"

    def worker_exits(state: dict[str, Any]) -> None:
        state["spark-2"].unit = "failed"
        state["spark-2"].result = "exit-code"

    site.after_up = worker_exits
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_FAILED, res.out + res.err
    return res, " ".join(res.err.replace("│", " ").replace("•", " ").split())


def test_a_worker_that_exits_is_reported_with_rank_0s_log_tail(run_cli: Any, site: Site) -> None:
    # A worker exits because it lost rank 0: the cause is in rank 0's journal, so `up` shows it too.
    res, said = _up_with_spark_2_exiting(
        run_cli, site, "2026-11-29T10:00:05+0000 spark-0 rank[0]: scheduler died: oom\n")
    assert "failed at the gate 'unit active' on spark-2" in said, res.err
    assert "log tail: 2026-11-29T10:00:09+0000 spark-2 rank[2]: lost rank 0" in said, res.err
    assert "log tail of rank 0 (spark-0): 2026-11-29T10:00:05+0000 spark-0 rank[0]: scheduler died" in said


def test_a_long_log_line_is_cut_so_the_rest_of_the_failure_stays_readable(run_cli: Any, site: Site) -> None:
    # A rank prints kB-long JSON lines (the MoE layout); shown whole they push the failure off screen.
    layout = "2026-11-29T10:00:04+0000 spark-0 rank[0]: DSPARK_MOE_LAYOUT " + "{\"experts\": 96}" * 400
    res, said = _up_with_spark_2_exiting(
        run_cli, site, layout + "\n2026-11-29T10:00:05+0000 spark-0 rank[0]: oom\n")
    assert len(layout) > 6000 and len(res.err) < 4000, res.err
    assert f"(+{len(layout) - 240} chars)" in said, res.err
    assert "spark-0 rank[0]: oom" in said and "lost rank 0" in said, res.err


def test_failed_start_playbook_stops_everything(run_cli: Any, site: Site) -> None:
    site.fail_playbook = "up.yml"
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_FAILED
    assert site.books() == ["up.yml"] and site.stop_rounds() == 1
    flat = " ".join(res.err.replace("│", " ").split())
    assert "spark-2 (10.250.0.12:22): failed in 'Start the ranks of this wave': unit failed to start" in flat


def test_ctrl_c_during_the_start_playbook_stops_everything(run_cli: Any, site: Site) -> None:
    def interrupted(state: dict[str, Any]) -> None:
        raise KeyboardInterrupt

    site.after_up = interrupted  # the units started, then the admin pressed Ctrl-C
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == 130
    assert site.books() == ["up.yml"] and site.stop_rounds() == 1
    assert all(st.unit == "inactive" for st in site.nodes.state.values())
    assert "all 4 ranks were stopped" in res.err + res.out
    # the group never served: nothing to drain, no worker left waiting for rank 0's broadcast
    stops = [t for t in site.nodes.sent if t.startswith(faststop.MARK)]
    assert len(stops) == 4 and all("grace=0 " in t for t in stops), stops


def test_an_error_while_recording_stops_everything(run_cli: Any, site: Site, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    # The run directory cannot be written: the first record after the start fails.
    site.tools.new_run_dir = lambda verb: blocker / f"run-{verb}"
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_FAILED
    assert site.books() == ["up.yml"] and site.stop_rounds() == 1
    assert all(st.unit == "inactive" for st in site.nodes.state.values())
    assert "Not a directory" in res.err and "all 4 ranks were stopped" in res.err


def test_one_up_one_run_directory(run_cli: Any, site: Site, tmp_path: Path) -> None:
    """The playbooks an `up` runs and its boot records share the one run directory of the verb."""
    made: list[str] = []

    def new_run_dir(verb: str) -> Path:
        made.append(verb)
        return tmp_path / f"run-{verb}"

    site.tools.new_run_dir = new_run_dir
    _running(site)
    site.nodes.state["spark-1"].unit = "failed"
    site.nodes.calls.clear()
    res = run_cli("-i", str(site.inventory), "up", "--yes", "--full")
    assert res.code == EXIT_OK, res.err
    assert made == ["up"]
    assert site.books() == ["up.yml"] and site.run_dirs == [tmp_path / "run-up"]
    assert (tmp_path / "run-up" / "boot-state.json").is_file()


def test_a_failed_stop_is_reported_as_such(run_cli: Any, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    site = Site(tmp_path, monkeypatch, overrides={"memory": {"floor_gib": 2.5}})
    site.nodes.state["spark-1"].mem = 3 * GIB

    def squeeze(state: dict[str, Any]) -> None:
        state["spark-1"].mem = int(2.2 * GIB)

    site.after_up = squeeze
    site.nodes.state["spark-2"].stop_fails = True  # the stop over SSH fails, then the playbook
    site.fail_playbook = "down.yml"
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_FAILED
    assert site.books() == ["up.yml", "down.yml"]
    assert "all ranks were stopped" not in res.err and "all 4 ranks were stopped" not in res.err
    assert "stopping the ranks FAILED on spark-2" in res.err
    assert "running playbooks/down.yml" in " ".join(res.err.split())


def test_up_without_the_api_key_is_bad_input(run_cli: Any, site: Site) -> None:
    Path(site.cluster.secrets["api_key"].file).unlink()
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_USAGE
    assert site.books() == [] and site.nodes.calls == []


def test_down_is_idempotent(run_cli: Any, site: Site) -> None:
    for st in site.nodes.state.values():
        st.unit = "active"
    res = run_cli("-i", str(site.inventory), "down", "--grace", "5")
    assert res.code == EXIT_OK, res.err
    # Every node answered: the role's stop steps over SSH, one round, no playbook; --grace reaches it.
    assert site.books() == [] and "over SSH without the playbook" in res.out
    assert sorted(n for n, what in site.nodes.calls if what == "stop") == sorted(site.nodes.state)
    stops = [t for t in site.nodes.sent if t.startswith(faststop.MARK)]
    assert len(stops) == 4 and all("grace=5 " in t for t in stops)
    assert sum("head=1 " in t for t in stops) == 1  # only rank 0 sends SIGTERM
    assert "every rank is stopped" in res.out and "nothing was running" not in res.out
    res = run_cli("-i", str(site.inventory), "down")
    assert res.code == EXIT_OK and "nothing was running" in res.out and site.books() == []


def test_down_with_nothing_running_needs_no_playbook(run_cli: Any, site: Site) -> None:
    # Every node answers and every rank unit is inactive: one SSH round, no playbook.
    res = run_cli("-i", str(site.inventory), "--json", "down")
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)
    assert site.books() == [] and doc["path"] == "fast" and doc["stopped"] is False
    assert set(doc["nodes"].values()) == {"inactive"}
    res = run_cli("-i", str(site.inventory), "down")
    assert res.code == EXIT_OK and "nothing was running" in res.out and "over SSH" in res.out
    assert site.books() == []
    # --full runs the playbook whatever the nodes say.
    res = run_cli("-i", str(site.inventory), "--json", "down", "--full")
    assert res.code == EXIT_OK, res.err
    assert site.books() == ["down.yml"] and json.loads(res.out)["path"] == "playbook"


@pytest.mark.parametrize("state", ["active", "failed", "activating", "deactivating"])
def test_down_stops_over_ssh_when_every_node_answers(run_cli: Any, site: Site, state: str) -> None:
    # A running, failed or half-started unit on a node that answers: the stop script clears it.
    site.nodes.state["spark-1"].unit = state
    res = run_cli("-i", str(site.inventory), "--json", "down")
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)
    assert site.books() == [] and doc["path"] == "ssh" and doc["stopped"] is True
    assert set(doc["nodes"].values()) == {"inactive"}


def test_down_runs_the_playbook_for_a_node_that_does_not_answer(run_cli: Any, site: Site) -> None:
    # A node that does not answer is the playbook's to report; no stop goes over SSH first.
    site.nodes.state["spark-1"].unit = "active"
    site.nodes.state["spark-3"].reachable = False
    run_cli("-i", str(site.inventory), "--json", "down")
    assert site.books() == ["down.yml"]
    assert not any(what == "stop" for _, what in site.nodes.calls)


def test_a_failed_stop_over_ssh_runs_the_playbook_and_says_why(run_cli: Any, site: Site) -> None:
    for st in site.nodes.state.values():
        st.unit = "active"
    site.nodes.state["spark-2"].stop_fails = True
    res = run_cli("-i", str(site.inventory), "--json", "down", "--grace", "7")
    assert res.code == EXIT_OK, res.err
    assert site.books() == ["down.yml"] and site.plans[0].extravars == {"spark_rank_grace_s": 7}
    assert json.loads(res.out)["path"] == "playbook"
    flat = " ".join(res.err.split())
    assert "spark-2: sparkctl-rank.service is still active 30 s after its stop" in flat
    assert "running playbooks/down.yml" in flat


def test_status_exit_codes_and_json(run_cli: Any, site: Site) -> None:
    for st in site.nodes.state.values():
        st.unit = "active"
    res = run_cli("-i", str(site.inventory), "status", "--json")
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)
    assert doc["verdict"] == "ready" and [n["rank"] for n in doc["nodes"]] == [0, 1, 2, 3]
    site.nodes.state["spark-2"].unit = "failed"
    res = run_cli("-i", str(site.inventory), "status")
    assert res.code == EXIT_UNHEALTHY
    assert "degraded" in res.out and "spark-2 (rank 2)" in res.out
    assert site.nodes.closed


def test_logs_prefixes_ranks_and_redacts(run_cli: Any, site: Site) -> None:
    site.nodes.state["spark-1"].journal = f"line one\nleaked key {API_KEY}\n"
    res = run_cli("-i", str(site.inventory), "logs", "1", "-n", "5")
    assert res.code == EXIT_OK, res.err
    assert res.out.splitlines() == ["[r1 spark-1] line one", "[r1 spark-1] leaked key <redacted>"]
    res = run_cli("-i", str(site.inventory), "logs", "7")
    assert res.code == EXIT_USAGE


def test_bundle_contains_the_facts_and_never_the_key(run_cli: Any, site: Site, tmp_path: Path) -> None:
    for st in site.nodes.state.values():
        st.unit = "active"
        st.journal = f"boot ok\nAuthorization: Bearer {API_KEY}\napi-key: {API_KEY}\n"
    out = tmp_path / "b.tar.gz"
    res = run_cli("-i", str(site.inventory), "bundle", "-o", str(out))
    assert res.code == EXIT_OK, res.err
    raw = out.read_bytes()
    key = API_KEY.encode()
    assert key not in raw and key not in gzip.decompress(raw)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        names = {m.name.split("/", 1)[1]: m for m in tar.getmembers()}
        for member in names.values():
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            assert key not in data, member.name
        assert {"versions.json", "identity.json", "plan.json", "status.json",
                "nodes/spark-0/journal.txt", "nodes/spark-3/links.txt"} <= set(names)
        plan = json.loads(tar.extractfile(names["plan.json"]).read())  # type: ignore[union-attr]
        journal = tar.extractfile(names["nodes/spark-0/journal.txt"]).read().decode()  # type: ignore[union-attr]
    assert "<secret:api_key>" in json.dumps(plan)
    assert "boot ok" in journal and "<redacted>" in journal
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_bundle_with_unreachable_nodes_is_written_and_exits_1_naming_them(
        run_cli: Any, site: Site, tmp_path: Path) -> None:
    for name in ("spark-2", "spark-1"):
        site.nodes.state[name].reachable = False
    out = tmp_path / "b.tar.gz"
    res = run_cli("-i", str(site.inventory), "--json", "bundle", "-o", str(out))
    assert res.code == EXIT_FAILED
    assert json.loads(res.out)["unreachable"] == ["spark-1", "spark-2"]  # rank order
    assert "2 of 4 nodes did not answer (spark-1, spark-2)" in " ".join(res.err.replace("│", " ").split())
    with tarfile.open(out) as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers()}
        why = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("spark-1/unreachable.txt")))
        assert why is not None and why.read().decode().startswith(
            "spark-1 (10.250.0.11:22): unreachable: connection timed out — check that spark-1 is powered on")
    assert {"nodes/spark-1/unreachable.txt", "nodes/spark-2/unreachable.txt",
            "nodes/spark-0/journal.txt"} <= names


# --- the fast path (sparkctl.serve.fastup) -----------------------------------------------------------


def _installed(site: Site) -> None:
    """Every node holds exactly what the up playbook installs."""
    for entry in site.doc["nodes"]:
        site.nodes.state[entry["name"]].upcheck = fakes.clean_upcheck(site.cluster, entry)


def test_up_with_nothing_to_install_starts_over_ssh_workers_first(run_cli: Any, site: Site) -> None:
    _installed(site)
    res = run_cli("-i", str(site.inventory), "--json", "up")
    assert res.code == EXIT_OK, res.err
    assert site.books() == []
    starts = [n for n, what in site.nodes.calls if what == "start"]
    assert sorted(starts[:3]) == ["spark-1", "spark-2", "spark-3"] and starts[3:] == ["spark-0"]
    out = json.loads(res.out)
    assert out["result"] == "ready" and out["start"]["path"] == "fast" and out["start"]["reasons"] == []
    t = out["timeline"]
    assert 0 < t["last_start_s"] <= t["ready_s"] <= t["done_s"] <= out["seconds"] + 0.01
    assert "starting over SSH without the playbook" in " ".join(res.err.split())
    assert not any(API_KEY in text for text in site.nodes.sent)
    modes = [m for _, m in site.nodes.calls]
    assert modes.index("preflight") < modes.index("upcheck") < modes.index("start")
    # the preflight probe (its answer holds the status snapshot's facts) and the check in one SSH
    # round per node, in that order; no status round of its own
    assert site.nodes.joined == [["preflight", "upcheck"]]
    assert site.nodes.rounds["preflight"] == site.nodes.rounds["upcheck"] == 1
    assert "status" not in site.nodes.rounds


def test_a_changed_env_file_on_one_node_runs_the_playbook_and_says_why(run_cli: Any, site: Site) -> None:
    _installed(site)
    site.nodes.state["spark-2"].upcheck["files"]["/etc/sparkctl/rank.env"]["digest"] = "0" * 64
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_OK, res.err
    assert site.books() == ["up.yml"]
    assert "start" not in [what for _, what in site.nodes.calls]
    said = " ".join(res.out.split())
    assert "running playbooks/up.yml: spark-2: /etc/sparkctl/rank.env differs from the rendered file" in said


def test_up_full_always_runs_the_playbook(run_cli: Any, site: Site) -> None:
    _installed(site)
    res = run_cli("-i", str(site.inventory), "--json", "up", "--full")
    assert res.code == EXIT_OK, res.err
    assert site.books() == ["up.yml"] and "upcheck" not in [m for _, m in site.nodes.calls]
    assert site.nodes.joined == [["preflight"]] and site.nodes.rounds["preflight"] == 1
    assert json.loads(res.out)["start"] == {"path": "playbook", "reasons": ["--full"], "check_seconds": 0.0}


def test_a_worker_that_fails_to_start_on_the_fast_path_stops_everything(run_cli: Any, site: Site) -> None:
    _installed(site)
    site.nodes.state["spark-3"].start_fails = True
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_FAILED
    assert site.books() == [] and site.stop_rounds() == 1
    assert "spark-0" not in [n for n, what in site.nodes.calls if what == "start"]
    assert "spark-3: sparkctl-rank.service failed right after its start" in res.err
    assert "all 4 ranks were stopped" in res.err


def test_a_start_playbook_failing_on_a_container_stopped_in_its_prestart_names_that_gate(
        run_cli: Any, site: Site) -> None:
    """Under load the playbook's wait saw spark-2's unit fail before the boot watch began: `up`
    reported the wait ("installing and starting the rank units failed") instead of the kit
    pre-start checks that stopped the container. The checks in its journal are the reason."""
    from sparkctl.nodeside import prestart

    site.fail_playbook = "up.yml"
    site.nodes.state["spark-2"].journal = (
        f"{prestart.BEGIN} kit /opt/sglang4\n"
        f"{prestart.FAIL} sglang-commit env:SGLANG_BUILD_COMMIT expected {'c' * 40} actual {'d' * 40}\n"
        f"{prestart.STOPPED} 1 of 9 checks failed; sglang not started\n")
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_FAILED
    assert site.books() == ["up.yml"] and site.stop_rounds() == 1
    flat = " ".join(res.err.replace("│", " ").split())
    assert "failed at the gate 'kit pre-start checks' on spark-2" in flat, flat
    assert "1 check failed (sglang-commit)" in flat, flat


class _Counted:
    """One fleet as `up` opened it (all share the site's fake nodes): was it closed?"""

    def __init__(self, nodes: Any) -> None:
        self._nodes, self.closed = nodes, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._nodes, name)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("fails", [False, True])
def test_up_closes_every_fleet_it_opened(run_cli: Any, site: Site, fails: bool) -> None:
    """The memory guard's own SSH connections were left open after `up`: a supervisor that runs `up`
    again and again kept four more connections (and their threads) each time."""
    opened: list[_Counted] = []

    def fleet(cluster: Any) -> _Counted:
        opened.append(_Counted(site.nodes))
        return opened[-1]

    site.tools.fleet = fleet
    site.fail_playbook = "up.yml" if fails else None
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == (EXIT_FAILED if fails else EXIT_OK), res.out + res.err
    assert len(opened) >= 2 and all(f.closed for f in opened), [f.closed for f in opened]
