"""`sparkctl preflight` and `sparkctl switch diff|apply` with the runner faked: which playbook in which
mode, the identity table, what is refused, which exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.pair_site import make_switchless_pair
from support.runner import NODES, FakeRunner, Outcome

from sparkctl.ansible import runner
from sparkctl.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE

IDENTITY = {"os": "Ubuntu 24.04.3 LTS", "kernel": "6.11.0-1016-nvidia", "nvidia_driver": "580.95.05",
            "cuda": "13.0", "cx7_firmware": "28.45.1020", "bios": "5.36_0ACUM018"}


@pytest.fixture
def identity() -> dict[str, dict[str, str]]:
    """What the identity module answers per node."""
    return {n: dict(IDENTITY) for n in NODES}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, identity: dict[str, dict[str, str]]) -> FakeRunner:
    """runner.execute: the identity module answers on every node that is reachable (its result is found
    by the module's return value, whatever the task is called); switch.yml also runs on the switch,
    which is where its ``changed`` are."""

    def answer_identity(out: Outcome) -> None:
        out.results = {"Some task name": {n: {"identity": ident, "missing_netdevs": [], "rdma": True}
                                          for n, ident in identity.items() if n not in out.unreachable_hosts}}

    def on_the_switch(out: Outcome) -> None:
        out.stats["crs812"] = runner.HostStats(ok=4, changed=out.changed)
        out.changed = 0

    f = FakeRunner(NODES, ok=6, duration_s=0.8, on_run=answer_identity,
                   on_playbook={"switch.yml": on_the_switch})
    monkeypatch.setattr(runner, "execute", f)
    return f


# --- preflight -----------------------------------------------------------------------------------


def test_preflight_runs_the_preflight_playbook_and_shows_the_identity_table(
    run_cli: Any, example_copy: Path, fake: FakeRunner
) -> None:
    res = run_cli("-i", str(example_copy), "preflight")
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert (plan.playbook, plan.check, plan.limit, plan.extravars) == ("preflight.yml", False, None, {})
    assert "node identity" in res.out and "580.95.05" in res.out and "28.45.1020" in res.out
    assert "4 nodes answered and agree" in res.out


def test_preflight_json_names_the_field_that_differs_and_exits_1(
    run_cli: Any, example_copy: Path, fake: FakeRunner, identity: dict[str, dict[str, str]]
) -> None:
    identity["spark-2"]["kernel"] = "6.8.0-1010-nvidia"
    fake.failures = [runner.Failure("spark-0", "Refuse nodes that differ", "node identity differs in kernel")]
    res = run_cli("-i", str(example_copy), "--json", "preflight")
    assert res.code == EXIT_FAILED
    doc = json.loads(res.out)
    assert doc["ok"] is False and doc["mismatched"] == ["kernel"]
    assert doc["nodes"]["spark-2"]["kernel"] == "6.8.0-1010-nvidia"
    assert "node identity differs in kernel" in res.err


def test_preflight_names_an_unreachable_node(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    fake.failures = [runner.Failure("spark-3", "Read the node identity", "Connection timed out",
                                    unreachable=True)]
    res = run_cli("-i", str(example_copy), "preflight")
    assert res.code == EXIT_FAILED
    err = " ".join(res.err.replace("│", " ").split())
    assert "could not reach spark-3" in err
    assert "spark-3 (192.168.7.13:22): unreachable: connection timed out" in err
    # the nodes that answered agree: nothing to bring to one level
    assert "one level" not in err and "identity differs" not in err
    assert "no:" in res.out and "timed out" in res.out  # spark-3's column in the table (the cause, short)


def test_preflight_limit_is_checked_before_anything_runs(
    run_cli: Any, example_copy: Path, fake: FakeRunner
) -> None:
    res = run_cli("-i", str(example_copy), "preflight", "--limit", "spark-1,spark-9")
    assert res.code == EXIT_USAGE and "spark-9" in res.err
    assert fake.plans == []
    res = run_cli("-i", str(example_copy), "preflight", "--limit", "spark-1,spark-2")
    assert res.code == EXIT_OK, res.err
    assert fake.plans[0].limit == "spark-1,spark-2"


# --- switch diff | apply -------------------------------------------------------------------------


def test_switch_diff_is_check_mode_with_diff(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    fake.changed = 3
    res = run_cli("-i", str(example_copy), "switch", "diff")
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert (plan.playbook, plan.check, plan.diff) == ("switch.yml", True, True)
    assert plan.argv()[-2:] == ["--check", "--diff"]
    assert "switch diff: crs812 (routeros) 3 would change" in res.out


@pytest.mark.parametrize(("extra", "diff"), [([], False), (["--diff"], True)])
def test_switch_apply_runs_for_real(
    run_cli: Any, example_copy: Path, fake: FakeRunner, extra: list[str], diff: bool
) -> None:
    fake.changed = 2
    res = run_cli("-i", str(example_copy), "--json", "switch", "apply", *extra)
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert (plan.playbook, plan.check, plan.diff) == ("switch.yml", False, diff)
    doc = json.loads(res.out)
    assert doc["switch"] == "crs812" and doc["changed"] == 2 and doc["ok"] is True


def test_switch_verbs_contact_the_switch_alone(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    """The switch can be done first: diff and apply are limited to it, so no node is asked to answer
    (the day the switch is set up before the nodes)."""
    for verb in ("diff", "apply"):
        fake.plans.clear()
        res = run_cli("-i", str(example_copy), "switch", verb)
        assert res.code == EXIT_OK, res.err
        (plan,) = fake.plans
        assert plan.limit == "crs812" and plan.argv()[plan.argv().index("--limit") + 1] == "crs812"


def test_switch_apply_rollback_asks_the_role_for_the_newest_backup(
    run_cli: Any, example_copy: Path, fake: FakeRunner
) -> None:
    res = run_cli("-i", str(example_copy), "switch", "apply", "--rollback")
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert (plan.playbook, plan.check) == ("switch.yml", False)
    assert plan.extravars == {"spark_switch_rollback": True}
    assert "switch apply --rollback: crs812" in res.out
    fake.plans.clear()
    assert run_cli("-i", str(example_copy), "switch", "apply").code == EXIT_OK
    assert fake.plans[0].extravars == {}


def test_switch_apply_failure_exits_1_naming_the_host(
    run_cli: Any, example_copy: Path, fake: FakeRunner
) -> None:
    fake.failures = [runner.Failure("crs812", "Run the configuration script", "expected end of command")]
    res = run_cli("-i", str(example_copy), "switch", "apply")
    assert res.code == EXIT_FAILED
    assert "switch apply failed on crs812" in res.err and "expected end of" in res.err


def test_switch_verbs_on_a_switchless_site_do_nothing(
    run_cli: Any, example_copy: Path, fake: FakeRunner
) -> None:
    make_switchless_pair(example_copy)  # four nodes would need a switch
    for verb in ("diff", "apply"):
        res = run_cli("-i", str(example_copy), "switch", verb)
        assert res.code == EXIT_OK, res.err
        assert "switchless" in res.out
    assert fake.plans == []


def test_provision_tags_switch_still_runs_the_switch_role(
    run_cli: Any, example_copy: Path, fake: FakeRunner
) -> None:
    res = run_cli("-i", str(example_copy), "provision", "--tags", "switch")
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert (plan.playbook, plan.tags) == ("provision.yml", ("switch",))
