"""A node that does not answer, through every verb that contacts the nodes: the same exit code
(``EXIT_UNREACHABLE``) from each, the node named as unreachable with the cause in words, and each
failure printed once, in rank order (the runner's events fed through the live table as well)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.runner import ansible_failures, failed_event, failure_events, unreachable_event
from support.serve_site import Site

from sparkctl.ansible import results, runner
from sparkctl.errors import EXIT_FAILED, EXIT_UNHEALTHY, EXIT_UNREACHABLE

REFUSED = ("EOF on stream; last 100 lines received:\n"
           "ssh: connect to host 10.250.0.13 port 22: Connection refused\r\n")
LINE = "spark-3 (10.250.0.13:22): unreachable: connection refused"

VERBS: dict[str, list[str]] = {
    "provision": ["provision"],
    "stage": ["stage", "--full"],
    "up": ["up", "--yes"],
    "down": ["down"],
    "check fabric": ["check", "fabric"],
    "preflight": ["preflight"],
    "status": ["status"],
    "logs": ["logs"],
}


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    """The lab-shaped site with spark-3 switched off: its SSH refuses (sparkctl's own fan-out) and
    every playbook finds it unreachable (the runner, for the verbs that run one)."""
    s = Site(tmp_path, monkeypatch)
    monkeypatch.setattr(runner, "execute", s.runner)
    s.nodes.state["spark-3"].reachable = False
    s.runner.failures = ansible_failures([unreachable_event("spark-3", REFUSED)])
    s.runner.events = failure_events
    probes = {n: {"ports": [], "pings": [], "rdma": False} for n in ("spark-0", "spark-1", "spark-2")}
    s.runner.reported = {results.FABRIC_PROBE: probes}
    return s


@pytest.mark.parametrize("verb", list(VERBS))
def test_an_unreachable_node_exits_the_same_from_every_verb(run_cli: Any, site: Site, verb: str) -> None:
    res = run_cli("-i", str(site.inventory), *VERBS[verb])
    assert res.code == EXIT_UNREACHABLE, (res.out, res.err)
    said = " ".join((res.out + res.err).replace("│", " ").split())
    assert "spark-3" in said and "unreachable" in said and "EOF on stream" not in said


@pytest.mark.parametrize("verb", ["provision", "stage", "preflight", "down"])
def test_each_failure_is_printed_once_in_rank_order(run_cli: Any, site: Site, verb: str) -> None:
    # the events arrive spark-3 first, spark-1 second: the lines come in rank order, each once
    site.runner.failures = ansible_failures([
        unreachable_event("spark-3", REFUSED),
        failed_event("spark-1", "Write the fabric netplan", msg="[Errno 28] No space left on device"),
    ])
    res = run_cli("-i", str(site.inventory), *VERBS[verb])
    assert res.code == EXIT_UNREACHABLE
    said = " ".join((res.out + res.err).replace("│", " ").split())
    disk = "spark-1 (10.250.0.11:22): failed in 'Write the fabric netplan': disk full"
    if verb == "down":  # the first stop round answers for spark-1 over SSH; the playbook reports both
        assert said.count(LINE) == 1, said
    else:
        assert said.count(LINE) == 1 and said.count(disk) == 1, said
        assert said.index(disk) < said.index(LINE)


def test_json_names_the_unreachable_nodes(run_cli: Any, site: Site) -> None:
    res = run_cli("-i", str(site.inventory), "--json", "provision")  # the run's own document
    assert res.code == EXIT_UNREACHABLE
    (failure,) = json.loads(res.out)["failures"]
    assert failure["host"] == "spark-3" and failure["unreachable"] and failure["cause"] == "refused"
    assert "EOF on stream" not in res.out
    res = run_cli("-i", str(site.inventory), "--json", "preflight")  # an error after a document
    assert res.code == EXIT_UNREACHABLE and json.loads(res.out)["unreachable"]["spark-3"].startswith(
        "unreachable: connection refused — check that sshd runs on spark-3")
    res = run_cli("-i", str(site.inventory), "--json", "logs")  # the lines read, then the error object
    error = json.loads(res.out[res.out.index("{\n"):])["error"]
    assert res.code == error["code"] == EXIT_UNREACHABLE and error["nodes"] == ["spark-3"]
    assert error["details"][0].startswith("spark-3 (10.250.0.13:22): unreachable: connection timed out")


def test_status_keeps_3_for_a_cluster_that_answered_unhealthy(run_cli: Any, site: Site) -> None:
    site.nodes.state["spark-3"].reachable = True
    res = run_cli("-i", str(site.inventory), "status")
    assert res.code == EXIT_UNHEALTHY != EXIT_UNREACHABLE  # nodes answered, no rank runs
    assert EXIT_UNREACHABLE == EXIT_FAILED  # the documented code (README, `sparkctl --help`)


def test_the_stage_table_wraps_and_the_error_says_the_rest(run_cli: Any, site: Site) -> None:
    site.nodes.state["spark-3"].reachable = True
    why = ("rsync: [receiver] write failed on \"/mnt/nvme/models/DeepSeek-V4.1-Flash/model-00031-of-00048"
           ".safetensors\": No space left on device (28) while receiving the checkpoint shard")
    site.runner.failures = ansible_failures([failed_event("spark-2", "Fan out the checkpoint", msg=why)])
    res = run_cli("-i", str(site.inventory), "stage", "--full")
    assert res.code == EXIT_FAILED
    flat = " ".join((res.out + res.err).replace("│", " ").replace("┃", " ").split())
    # the table's cell: the cause in a few words, whole; the message itself once, in the error
    assert "⨯ disk full" in flat
    assert flat.count("while receiving the checkpoint shard") == 1
    assert ("spark-2 (10.250.0.12:22): failed in 'Fan out the checkpoint': disk full (rsync: [receiver] "
            "write failed on") in flat  # as said: "[receiver]" is text, not markup


def test_status_says_why_once(run_cli: Any, site: Site) -> None:
    res = run_cli("-i", str(site.inventory), "status")
    assert res.code == EXIT_UNREACHABLE
    flat = " ".join(res.out.replace("│", " ").replace("┃", " ").split())
    line = "spark-3 (rank 3): unreachable: connection timed out — check that spark-3 is powered on"
    assert flat.count(line) == 1
    assert flat.count("timed out") == 1  # the table's cell says unreachable; the reason says why
