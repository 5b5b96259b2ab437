"""`upgrade`, `reset`, `up` and `down` as the supervisor sees them, with the runner, the SSH fleet and
the API faked (support.serve_site): each holds the lifecycle lock and pauses healing while it runs
(a supervisor tick then does nothing, autostart included), and leaves healing in the state it
promises and prints; an `up` that is refused or declined leaves the pause and the breaker as they were."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from support.runner import Outcome
from support.serve_site import Site
from support.text import flat

from sparkctl.ansible import results, runner
from sparkctl.cli import common
from sparkctl.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from sparkctl.serve import events, supervisor

UPGRADE = """
sparkctl_upgrade:
  packages:
    nvidia-driver-580-open: 580.95.05-0ubuntu1
  reboot: true
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    s = Site(tmp_path, monkeypatch)
    monkeypatch.setattr(runner, "execute", s.runner)  # upgrade's and reset's tables run it directly
    gv = s.inventory / "group_vars" / "all" / "sparkctl.yml"
    gv.write_text(gv.read_text() + UPGRADE)
    for st in s.nodes.state.values():
        st.unit = "active"
    return s


class Seen:
    """What a supervisor (autostart on) finds while a lifecycle command's playbook runs."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.holder: str | None = None
        self.paused: dict[str, Any] | None = None
        self.decisions: list[supervisor.Decision] = []
        self.acted: list[str] = []

    def __call__(self, out: Outcome) -> None:
        name = self.site.cluster.name
        for st in self.site.nodes.state.values():  # the playbook took the ranks down (nodes reboot)
            st.unit = "inactive"
        self.holder = events.lifecycle_busy(name)
        self.paused = events.paused(name)
        actions = supervisor.Actions(self.snapshot, lambda: (True, "ok"), lambda: self._act("down"),
                                     lambda: self._act("up"), lambda record: [], lambda s: None)
        sup = supervisor.Supervisor(name, self.site.cluster.supervisor, True, 4.0, actions)
        self.decisions = [sup.tick() for _ in range(3)]
        sup._act(supervisor.Decision("autostart", "every node answers", supervisor.START))

    def snapshot(self) -> Any:
        raise AssertionError("the supervisor probed while a lifecycle command ran")

    def _act(self, what: str) -> str:
        self.acted.append(what)
        return what

    def check(self, verb: str) -> None:
        assert self.holder is not None and self.holder.startswith(f"sparkctl {verb} (pid"), self.holder
        assert self.paused is not None and f"`sparkctl {verb}` in progress" in self.paused["why"]
        assert {d.kind for d in self.decisions} == {"paused"}
        assert self.acted == []


def upgrade_report(out: Outcome) -> None:
    failed = {f.host for f in out.failures}
    out.reported[results.UPGRADE] = {
        n: {"before": {}, "after": {}, "installed": [], "commands": 0, "rebooted": False, "identity": {}}
        for n in out.hosts if n not in failed and (not failed or n < min(failed))
    }


def _open_breaker_and_pause(site: Site) -> None:
    events.save_breaker(site.cluster.name, events.BreakerState([1.0], 1_780_000_000.0, "2 restarts in 600 s"))
    events.pause(site.cluster.name, "sparkctl down")


def test_upgrade_holds_the_lock_pauses_healing_and_resumes_it_after_its_gated_up(
        run_cli: Any, site: Site) -> None:
    seen = Seen(site)

    def during_upgrade(out: Outcome) -> None:
        seen(out)
        upgrade_report(out)

    site.runner.on_playbook["upgrade.yml"] = during_upgrade
    _open_breaker_and_pause(site)
    res = run_cli("-i", str(site.inventory), "upgrade", "--yes")
    assert res.code == EXIT_OK, res.err
    seen.check("upgrade")
    name = site.cluster.name
    assert events.paused(name) is None and not events.load_breaker(name).is_open
    assert events.lifecycle_busy(name) is None
    assert events.admin_record(name)["state"] == "resumed"
    assert {st.unit for st in site.nodes.state.values()} == {"active"}  # the gated up ran
    assert "healing resumed, circuit breaker closed (it was open), restart count reset" in flat(res.out)
    kinds = [r["kind"] for r in events.EventLog(name).read()]
    assert "autostart" not in kinds and kinds[-1] == "admin-upgrade"


def test_a_failed_upgrade_leaves_healing_paused_with_its_reason(run_cli: Any, site: Site) -> None:
    seen = Seen(site)

    def during_upgrade(out: Outcome) -> None:
        seen(out)
        upgrade_report(out)

    site.runner.on_playbook["upgrade.yml"] = during_upgrade
    site.runner.fail_on["upgrade.yml"] = [runner.Failure(
        host="spark-2", task="Compare this node's identity with the nodes upgraded before it",
        msg="spark-2 came back with a different identity", unreachable=False)]
    res = run_cli("-i", str(site.inventory), "upgrade", "--yes")
    assert res.code == EXIT_FAILED
    seen.check("upgrade")
    pause = events.paused(site.cluster.name)
    assert pause is not None and "`sparkctl upgrade` failed: upgrade stopped at spark-2" in pause["why"]
    assert "healing paused until the next `sparkctl up`" in flat(res.out)
    assert {st.unit for st in site.nodes.state.values()} == {"inactive"}  # no up, no autostart


def test_reset_holds_the_lock_and_leaves_healing_paused(run_cli: Any, site: Site) -> None:
    seen = Seen(site)
    site.runner.on_playbook["reset.yml"] = seen
    res = run_cli("-i", str(site.inventory), "reset", "--yes")
    assert res.code == EXIT_OK, res.err
    seen.check("reset")
    pause = events.paused(site.cluster.name)
    assert pause is not None and "`sparkctl reset` removed the ranks" in pause["why"]
    assert "healing paused until the next `sparkctl up`" in flat(res.out)
    assert events.lifecycle_busy(site.cluster.name) is None


def test_reset_in_check_mode_touches_neither_lock_nor_healing(run_cli: Any, site: Site) -> None:
    res = run_cli("-i", str(site.inventory), "reset", "--check")
    assert res.code == EXIT_OK, res.err
    assert events.paused(site.cluster.name) is None
    assert events.admin_record(site.cluster.name)["generation"] == 0


@pytest.mark.parametrize(("interactive", "code"), [(False, EXIT_USAGE), (True, EXIT_FAILED)])
def test_a_refused_or_declined_up_leaves_the_pause_and_the_breaker_as_they_were(
        run_cli: Any, site: Site, monkeypatch: pytest.MonkeyPatch, interactive: bool, code: int) -> None:
    # No terminal and no --yes (refused, exit 2), or the admin answers no (declined, exit 1).
    tools = dataclasses.replace(site.tools, interactive=lambda: interactive, ask=lambda question: False)
    monkeypatch.setattr(common, "tools", lambda: tools)
    site.nodes.state["spark-2"].unit = "failed"  # degraded: `up` would replace the running ranks
    _open_breaker_and_pause(site)
    before = events.paused(site.cluster.name)
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == code, res.err
    assert events.paused(site.cluster.name) == before
    assert events.load_breaker(site.cluster.name).is_open
    assert "healing left as it was before `sparkctl up`: paused (sparkctl down); circuit breaker open" in (
        flat(res.out))
    assert site.books() == []


def test_a_successful_up_resumes_healing_and_closes_the_breaker(run_cli: Any, site: Site) -> None:
    site.nodes.state["spark-2"].unit = "failed"
    _open_breaker_and_pause(site)
    res = run_cli("-i", str(site.inventory), "up", "--yes")
    assert res.code == EXIT_OK, res.err
    assert events.paused(site.cluster.name) is None and not events.load_breaker(site.cluster.name).is_open
    assert "healing resumed" in flat(res.out)
