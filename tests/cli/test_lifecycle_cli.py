"""`sparkctl upgrade` and `sparkctl reset` with the runner faked: which playbook with which options,
the refusals that touch nothing (exit 2), check mode that stops before stage and up, and a failing
node named with the nodes left untouched."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from support.runner import NODES, FakeRunner, Outcome

from sparkctl.ansible import results, runner
from sparkctl.cli import common
from sparkctl.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from sparkctl.serve import up as serve_up
from sparkctl.serve.up import UpResult

UPGRADE = """
sparkctl_upgrade:
  packages:
    nvidia-driver-580-open: 580.95.05-0ubuntu1
  commands:
    - [/usr/bin/fwupdmgr, update, --assume-yes]
  reboot: true
"""


def upgrade_report(out: Outcome) -> None:
    """upgrade.yml reports the nodes it upgraded; serial 1: the nodes after a failing one never run."""
    stopped = [n for n in NODES if n in out.failed_hosts]
    done = NODES if not stopped else NODES[: NODES.index(stopped[0])]
    out.reported[results.UPGRADE] = {
        n: {"before": {"nvidia-driver-580-open": "575.57.08-0ubuntu1"},
            "after": {"nvidia-driver-580-open": "580.95.05-0ubuntu1"},
            "installed": ["nvidia-driver-580-open"], "commands": 1, "rebooted": True,
            "identity": {"kernel": "6.11.0-1016-nvidia"}}
        for n in done
    }


def fail_upgrade_on(fake: FakeRunner, node: str) -> None:
    """upgrade.yml fails on ``node``: it came back with another identity."""
    fake.fail_on["upgrade.yml"] = [runner.Failure(
        host=node, task="Compare this node's identity with the nodes upgraded before it",
        msg=f"{node} came back with a different identity: kernel is 6.8.0 here", unreachable=False)]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    f = FakeRunner(NODES, ok=3, changed=1, on_playbook={"upgrade.yml": upgrade_report})
    monkeypatch.setattr(runner, "execute", f)
    return f


@pytest.fixture
def ups(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """serve.up.Up, the gated start `upgrade` ends with: its options recorded, not run."""
    calls: list[dict[str, Any]] = []

    class Up:
        def __init__(self, cluster: Any, doc: Any, tools: Any, out: Any, **kw: Any) -> None:
            calls.append({k: kw[k] for k in ("force", "restart", "yes")})

        def run(self) -> UpResult:
            return UpResult(False)

    monkeypatch.setattr(serve_up, "Up", Up)
    return calls


def _terminal(monkeypatch: pytest.MonkeyPatch, interactive: bool, answer: bool = False) -> None:
    """A terminal (or none) that answers ``answer``."""
    tools = dataclasses.replace(common.tools(), interactive=lambda: interactive, ask=lambda question: answer)
    monkeypatch.setattr(common, "tools", lambda: tools)


@pytest.fixture
def site(example_copy: Path) -> Path:
    gv = example_copy / "group_vars" / "all" / "sparkctl.yml"
    gv.write_text(gv.read_text() + UPGRADE)
    return example_copy


def test_upgrade_without_pins_is_bad_input_and_runs_nothing(
        run_cli: Any, example_copy: Path, fake: FakeRunner, ups: list[Any]) -> None:
    res = run_cli("-i", str(example_copy), "upgrade", "--yes")
    assert res.code == EXIT_USAGE
    assert "sparkctl_upgrade is not set" in res.err
    assert fake.plans == [] and ups == []


def test_upgrade_without_a_terminal_needs_yes(run_cli: Any, site: Path, fake: FakeRunner, ups: list[Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _terminal(monkeypatch, False)
    res = run_cli("-i", str(site), "upgrade")
    assert res.code == EXIT_USAGE
    assert "--yes" in res.err
    assert fake.plans == [] and ups == []


def test_upgrade_answered_no_changes_nothing(run_cli: Any, site: Path, fake: FakeRunner, ups: list[Any],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _terminal(monkeypatch, True, False)
    res = run_cli("-i", str(site), "upgrade")
    assert res.code == EXIT_FAILED
    assert fake.plans == [] and ups == []


def test_upgrade_rolls_then_verifies_the_stage_then_runs_the_gated_up(
        run_cli: Any, site: Path, fake: FakeRunner, ups: list[Any]) -> None:
    res = run_cli("-i", str(site), "upgrade", "--yes")
    assert res.code == EXIT_OK, res.err
    upgrade, verify = fake.plans
    assert (upgrade.playbook, upgrade.check) == ("upgrade.yml", False)
    assert upgrade.extravars == {}  # the pins reach the role from the inventory itself
    assert verify.playbook == "stage.yml"
    assert verify.extravars["spark_stage_verify_only"] is True
    assert verify.extravars["spark_stage_what"] == "all"
    assert ups == [{"force": False, "restart": False, "yes": True}]
    assert "575.57.08-0ubuntu1 → 580.95.05-0ubuntu1" in res.out


def test_upgrade_check_mode_stops_after_the_playbook(run_cli: Any, site: Path, fake: FakeRunner,
                                                     ups: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    _terminal(monkeypatch, False)  # no --yes needed: nothing changes
    res = run_cli("-i", str(site), "upgrade", "--check")
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert (plan.playbook, plan.check, plan.diff) == ("upgrade.yml", True, True)
    assert ups == []
    assert "nothing was stopped, installed or rebooted" in " ".join(res.out.split())


def test_upgrade_stops_at_the_failing_node_and_names_the_untouched(
        run_cli: Any, site: Path, fake: FakeRunner, ups: list[Any]) -> None:
    fail_upgrade_on(fake, "spark-2")
    res = run_cli("-i", str(site), "upgrade", "--yes")
    assert res.code == EXIT_FAILED
    assert "upgrade stopped at spark-2" in res.err
    assert "different identity" in res.err
    assert "nodes left untouched: spark-3" in res.err.replace("\n", " ").replace("│", "")
    assert [p.playbook for p in fake.plans] == ["upgrade.yml"]  # no stage verification, no up
    assert ups == []


def test_upgrade_json_names_the_failed_node(run_cli: Any, site: Path, fake: FakeRunner,
                                            ups: list[Any]) -> None:
    fail_upgrade_on(fake, "spark-2")
    res = run_cli("-i", str(site), "--json", "upgrade", "--yes")
    assert res.code == EXIT_FAILED
    doc = json.loads(res.out)
    assert doc["failed_node"] == "spark-2" and doc["untouched"] == ["spark-3"]
    assert sorted(doc["nodes"]) == ["spark-0", "spark-1"]


def test_reset_without_a_terminal_needs_yes(run_cli: Any, example_copy: Path, fake: FakeRunner,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _terminal(monkeypatch, False)
    res = run_cli("-i", str(example_copy), "reset")
    assert res.code == EXIT_USAGE
    assert "--yes" in res.err
    assert fake.plans == []


@pytest.mark.parametrize(("flags", "purge", "check"), [
    ((), False, False), (("--purge-data",), True, False), (("--check",), False, True),
])
def test_reset_plans_the_reset_playbook(run_cli: Any, example_copy: Path, fake: FakeRunner,
                                        monkeypatch: pytest.MonkeyPatch,
                                        flags: tuple[str, ...], purge: bool, check: bool) -> None:
    _terminal(monkeypatch, False)
    res = run_cli("-i", str(example_copy), "reset", *flags, *(() if check else ("--yes",)))
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert plan.playbook == "reset.yml"
    confirmed = {} if check else {"spark_reset_confirm": "yes"}  # given after the CLI's own question
    assert plan.extravars == {"spark_reset_purge_data": purge, **confirmed}
    assert plan.check is check
    assert ("provision" in res.out) is not check
