"""`sparkctl preflight` and `sparkctl switch diff|apply` with the runner faked: which playbook in which
mode, the identity table, what is refused, which exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.ansible import runner
from sparkctl.ansible.plan import Plan
from sparkctl.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE

NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]
IDENTITY = {"os": "Ubuntu 24.04.3 LTS", "kernel": "6.11.0-1016-nvidia", "nvidia_driver": "580.95.05",
            "cuda": "13.0", "cx7_firmware": "28.45.1020", "bios": "5.36_0ACUM018"}


class FakeRunner:
    """Stands in for runner.execute: records plans; the identity module answers per node."""

    def __init__(self) -> None:
        self.plans: list[Plan] = []
        self.identity = {n: dict(IDENTITY) for n in NODES}
        self.failures: list[runner.Failure] = []
        self.switch_changed = 0

    def __call__(self, plan: Plan, on_event: Any = None, **_: Any) -> runner.RunResult:
        self.plans.append(plan)
        dark = {f.host for f in self.failures if f.unreachable}
        # The result is found by the module's return value, whatever the task is called.
        results = {"Some task name": {n: {"identity": ident, "missing_netdevs": [], "rdma": True}
                                      for n, ident in self.identity.items() if n not in dark}}
        stats = {n: runner.HostStats(ok=6, unreachable=int(n in dark)) for n in NODES}
        if plan.playbook == "switch.yml":
            stats["crs812"] = runner.HostStats(ok=4, changed=self.switch_changed)
        return runner.RunResult(
            plan=plan, rc=2 if self.failures else 0, status="failed" if self.failures else "successful",
            stats=stats, failures=list(self.failures), artifact_dir=Path("/tmp/fake-run/artifacts"),
            run_dir=Path("/tmp/fake-run"), duration_s=0.8, results=results,
        )


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    f = FakeRunner()
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
    run_cli: Any, example_copy: Path, fake: FakeRunner
) -> None:
    fake.identity["spark-2"]["kernel"] = "6.8.0-1010-nvidia"
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
    assert "unreachable: spark-3" in res.err
    assert "no:" in res.out  # spark-3's column in the table


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
    fake.switch_changed = 3
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
    fake.switch_changed = 2
    res = run_cli("-i", str(example_copy), "--json", "switch", "apply", *extra)
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert (plan.playbook, plan.check, plan.diff) == ("switch.yml", False, diff)
    doc = json.loads(res.out)
    assert doc["switch"] == "crs812" and doc["changed"] == 2 and doc["ok"] is True


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
    hosts = example_copy / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    del doc["all"]["children"]["switches"]
    hosts.write_text(yaml.safe_dump(doc))
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
