"""The fast path of `down` (sparkctl.serve.faststop): the stop script run for real against a systemctl
and a docker that keep a unit's state in a file, and the role's running states and wait kept equal."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import SparkctlError
from sparkctl.serve import faststop
from sparkctl.ssh.fleet import HostResult

ROLE_DEFAULTS = Path(__file__).resolve().parents[2] / "roles" / "spark_rank" / "defaults" / "main.yml"
UNIT = "sparkctl-rank.service"


def test_the_running_states_and_the_wait_are_the_roles() -> None:
    defaults = yaml.safe_load(ROLE_DEFAULTS.read_text())
    assert tuple(defaults["spark_rank_running_states"]) == faststop.RUNNING_STATES
    assert int(defaults["spark_rank_stop_wait_s"]) == faststop.STOP_WAIT_S


class Node:
    """A directory whose `systemctl` and `docker` act on ``state`` and log every call.

    ``leaves_after``: the unit goes inactive by itself after that many `show` calls (a worker that
    exits when rank 0 broadcasts the shutdown); ``term_stops``: `stop --no-block` makes it inactive
    (rank 0 draining); ``stuck``: neither `stop` nor SIGKILL moves it. SIGKILL turns it failed, as
    systemd does."""

    def __init__(self, tmp: Path, state: str, leaves_after: int = 0, term_stops: bool = False,
                 stuck: bool = False) -> None:
        self.dir = tmp
        (tmp / "state").write_text(state + "\n")
        (tmp / "log").write_text("")
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        (bin_dir / "systemctl").write_text(f"""#!/bin/sh
d={tmp}
echo "systemctl $*" >> $d/log
s=$(cat $d/state)
case "$1" in
  show)
    echo "$s"
    n=$(grep -c '^systemctl show' $d/log)
    if [ {leaves_after} -gt 0 ] && [ $n -ge {leaves_after} ] && [ "$s" = active ]; then
      echo inactive > $d/state
    fi ;;
  stop)
    if [ "$2" = --no-block ]; then
      [ {int(term_stops)} = 1 ] && echo inactive > $d/state
    elif [ {int(stuck)} = 0 ] && [ "$s" != failed ]; then echo inactive > $d/state; fi ;;
  kill) [ {int(stuck)} = 0 ] && echo failed > $d/state ;;
  reset-failed) [ "$s" = failed ] && echo inactive > $d/state ;;
esac
exit 0
""")
        # `docker ps` lists the container while the file ``container`` exists; `docker kill` removes it.
        (bin_dir / "docker").write_text(f"""#!/bin/sh
echo "docker $*" >> {tmp}/log
case "$1" in
  ps) [ -e {tmp}/container ] && echo 0123456789ab ;;
  kill) rm -f {tmp}/container ;;
esac
exit 0
""")
        for tool in ("systemctl", "docker"):
            (bin_dir / tool).chmod(0o755)
        self.env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def run(self, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", script], env=self.env, capture_output=True, text=True,
                              timeout=30, check=False)

    def calls(self) -> list[str]:
        lines = (self.dir / "log").read_text().splitlines()
        return [ln for ln in lines if not ln.startswith(("systemctl show", "docker ps"))]

    @property
    def state(self) -> str:
        return (self.dir / "state").read_text().strip()


def test_rank_0_gets_sigterm_first_and_drains_within_the_grace_period(tmp_path: Path) -> None:
    node = Node(tmp_path, "active", term_stops=True)
    proc = node.run(faststop.stop_script(UNIT, "sparkctl-r0", grace_s=5, head=True, wait_s=2))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "stop: stopped (was active, forced: no)"
    assert node.calls() == [f"systemctl stop --no-block {UNIT}", f"systemctl stop {UNIT}",
                            f"systemctl reset-failed {UNIT}"]
    assert node.state == "inactive"


def test_a_worker_is_not_signalled_and_leaves_when_rank_0_tells_it_to(tmp_path: Path) -> None:
    node = Node(tmp_path, "active", leaves_after=4)
    proc = node.run(faststop.stop_script(UNIT, "sparkctl-r2", grace_s=5, head=False, wait_s=2))
    assert proc.stdout.splitlines()[-1] == "stop: stopped (was active, forced: no)"
    assert f"systemctl stop --no-block {UNIT}" not in node.calls()
    assert not any(c.startswith(("systemctl kill", "docker")) for c in node.calls())


def test_a_rank_still_running_after_the_grace_period_is_killed_with_its_container(tmp_path: Path) -> None:
    node = Node(tmp_path, "active")
    proc = node.run(faststop.stop_script(UNIT, "sparkctl-r1", grace_s=1, head=False, wait_s=2))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "stop: stopped (was active, forced: yes)"
    assert node.calls()[:2] == [f"systemctl kill --signal=SIGKILL {UNIT}", "docker kill sparkctl-r1"]
    assert node.state == "inactive"  # the failed state SIGKILL left is cleared for the next start


def test_a_failed_unit_is_cleared_and_an_inactive_one_left_alone(tmp_path: Path) -> None:
    (tmp_path / "failed").mkdir()
    failed = Node(tmp_path / "failed", "failed")
    proc = failed.run(faststop.stop_script(UNIT, None, grace_s=5, head=True, wait_s=2))
    assert proc.stdout.splitlines()[-1] == "stop: stopped (was failed, forced: no)"
    assert failed.state == "inactive"
    assert not any("--no-block" in c or "kill" in c for c in failed.calls())
    (tmp_path / "idle").mkdir()
    idle = Node(tmp_path / "idle", "inactive")
    proc = idle.run(faststop.stop_script(UNIT, None, grace_s=5, head=True, wait_s=2))
    assert proc.stdout.splitlines()[-1] == "stop: inactive" and idle.calls() == []


def test_a_unit_that_will_not_stop_is_named_with_the_wait(tmp_path: Path) -> None:
    node = Node(tmp_path, "activating", stuck=True)
    proc = node.run(faststop.stop_script(UNIT, None, grace_s=0, head=False, wait_s=1))
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == f"stop: {UNIT} is still activating 1 s after its stop"


class Fleet:
    """Every round's scripts (``rounds``) and, by node, the stop script each got (``sent``)."""

    def __init__(self, answers: dict[str, HostResult]) -> None:
        self.answers = answers
        self.sent: dict[str, str] = {}
        self.rounds: list[dict[str, str]] = []

    def run(self, script: Any, timeout: float = 10.0, only: Any = None) -> dict[str, HostResult]:
        self.rounds.append(dict(script))
        self.sent.update({n: t for n, t in script.items() if t.startswith(faststop.MARK)})
        return {n: self.answers[n] for n in only}


def test_stop_names_every_node_that_failed_or_did_not_answer(tmp_path: Path) -> None:
    doc = {"nodes": [{"name": f"spark-{r}", "rank": r,
                      "rank_launch": {"unit_name": UNIT, "container": f"sparkctl-r{r}", "drain_s": 75}}
                     for r in range(4)]}
    ok = HostResult("spark-0", 0, "stop: stopped (was active, forced: no)\n")
    fleet = Fleet({"spark-0": ok, "spark-1": HostResult("spark-1", 0, "stop: inactive\n"),
                   "spark-2": HostResult("spark-2", 1, f"stop: {UNIT} is still active 30 s after its stop\n"),
                   "spark-3": HostResult("spark-3", error="timed out connecting to 10.250.0.13:22")})
    with pytest.raises(SparkctlError) as err:
        faststop.stop(doc, fleet)
    assert err.value.details == [f"spark-2: {UNIT} is still active 30 s after its stop",
                                 "spark-3: timed out connecting to 10.250.0.13:22"]
    assert "grace=75 " in fleet.sent["spark-0"] and "head=1 " in fleet.sent["spark-0"]
    assert "grace=30 " in fleet.sent["spark-1"] and "head=0 " in fleet.sent["spark-1"]  # the leave period
    fleet.answers["spark-2"] = fleet.answers["spark-3"] = ok
    assert faststop.stop(doc, fleet, grace_s=3)["spark-1"] == "inactive"
    assert all("grace=3 " in t for t in fleet.sent.values())


def _doc(ranks: int = 4, router_on: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"nodes": [
        {"name": f"spark-{r}", "rank": r,
         "rank_launch": {"unit_name": UNIT, "container": f"sparkctl-r{r}", "drain_s": 75, "leave_s": 30}}
        for r in range(ranks)]}
    if router_on:
        doc["router"] = {"node": router_on, "unit": "sparkctl-router.service"}
    return doc


def test_rank_0_is_stopped_before_the_workers_which_wait_only_the_leave_period() -> None:
    """A worker is told to exit by its rank 0, before rank 0 leaves; one that was not (a rank restarted
    by hand outside the group) never will be. The workers' round starts once rank 0 is gone and
    waits 30 s for them, not the 75 s drain: `up` healing such a group waited the whole drain."""
    ok = HostResult("x", 0, "stop: stopped (was active, forced: no)\n")
    fleet = Fleet({f"spark-{r}": ok for r in range(4)})
    faststop.stop(_doc(), fleet)
    assert [sorted(r) for r in fleet.rounds] == [["spark-0"], ["spark-1", "spark-2", "spark-3"]]
    assert "head=1 grace=75 " in fleet.rounds[0]["spark-0"]
    assert all("head=0 grace=30 " in t for t in fleet.rounds[1].values())


def test_the_router_on_a_worker_stops_with_rank_0_and_its_rank_with_the_workers() -> None:
    ok = HostResult("x", 0, "stop: stopped (was active, forced: no)\n")
    fleet = Fleet({f"spark-{r}": ok for r in range(4)})
    done = faststop.stop(_doc(router_on="spark-2"), fleet)
    stop = faststop.router_stop("sparkctl-router.service")
    assert fleet.rounds[0]["spark-2"] == stop and faststop.MARK in fleet.rounds[0]["spark-0"]
    assert stop not in fleet.rounds[1]["spark-2"] and fleet.rounds[1]["spark-2"].startswith(faststop.MARK)
    assert sorted(done) == [f"spark-{r}" for r in range(4)]


def test_the_router_on_another_groups_node_is_left_to_that_groups_stop() -> None:
    """A site of two groups stops each group with its own document: the router's node (spark-5 here)
    is not among this group's nodes, and nothing is sent to it (the fleet knows only the group's)."""
    ok = HostResult("x", 0, "stop: stopped (was active, forced: no)\n")
    fleet = Fleet({f"spark-{r}": ok for r in range(4)})
    done = faststop.stop(_doc(router_on="spark-5"), fleet)
    assert sorted(done) == [f"spark-{r}" for r in range(4)]
    assert all("spark-5" not in sent for sent in fleet.rounds)
    router = faststop.router_stop("sparkctl-router.service")
    assert not any(router in t for sent in fleet.rounds for t in sent.values())


def test_the_workers_are_stopped_even_when_rank_0_does_not_answer() -> None:
    ok = HostResult("x", 0, "stop: stopped (was active, forced: yes)\n")
    fleet = Fleet({"spark-0": HostResult("spark-0", error="timed out connecting to 10.250.0.10:22")}
                  | {f"spark-{r}": ok for r in range(1, 4)})
    with pytest.raises(SparkctlError) as err:
        faststop.stop(_doc(), fleet)
    assert err.value.details == ["spark-0: timed out connecting to 10.250.0.10:22"]
    assert sorted(fleet.rounds[1]) == ["spark-1", "spark-2", "spark-3"]


def test_the_leave_period_is_the_rendered_one_and_the_roles() -> None:
    from sparkctl.render import rank

    defaults = yaml.safe_load(ROLE_DEFAULTS.read_text())
    assert defaults["spark_rank_leave_s"] == "{{ spark_rank_launch.leave_s }}"
    assert rank.RankLaunch.from_json({}).leave_s == rank.LEAVE_S


def test_a_container_that_outlived_its_killed_unit_is_killed(tmp_path: Path) -> None:
    # `systemctl kill` of a unit whose `docker run` client died first leaves the container running
    # and the unit failed: its ExecStop never runs. `down` must not leave that container behind.
    node = Node(tmp_path, "failed")
    (tmp_path / "container").write_text("")
    proc = node.run(faststop.stop_script(UNIT, "sparkctl-r2", grace_s=5, head=False, wait_s=2))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = proc.stdout.splitlines()[-1]
    assert said == "stop: stopped (was failed, forced: yes, its container had outlived it)"
    assert "docker kill sparkctl-r2" in node.calls() and not (tmp_path / "container").exists()
    assert "docker ps -q --filter name=^/sparkctl-r2$" in (tmp_path / "log").read_text()


def test_an_outsider_is_stopped_without_a_wait_whatever_its_rank() -> None:
    """A rank restarted or OOM-killed since `up` made it ready (`verdict.rank_faults`) is out of its
    group: no broadcast will reach it and it serves nothing."""
    texts = faststop.scripts(_doc(), outsiders={"spark-0", "spark-2"})
    assert "head=1 grace=0 " in texts["spark-0"] and "head=0 grace=0 " in texts["spark-2"]
    assert "head=0 grace=30 " in texts["spark-1"]
