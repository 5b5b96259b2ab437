"""`sparkctl watch`, `events` and the supervisor's marks on `up`, `down` and `status`, with the runner,
the SSH fleet and the API faked (the lab-shaped site of support.serve_site)."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import gates_fakes as fakes
from support.serve_site import Site
from support.text import flat

from sparkctl.cli import watch
from sparkctl.errors import EXIT_OK, EXIT_UNHEALTHY, EXIT_USAGE
from sparkctl.serve import events, watchunit

API_KEY = fakes.API_KEY


class Stop(KeyboardInterrupt):
    """Ends a foreground watch the way Ctrl-C does."""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    s = Site(tmp_path, monkeypatch)
    gv = s.inventory / "group_vars" / "all" / "sparkctl.yml"
    doc = yaml.safe_load(gv.read_text())
    doc["sparkctl_supervisor"] = {"interval_s": 1, "settle_s": 0, "max_restarts": 1, "window_s": 3600}
    gv.write_text(yaml.safe_dump(doc))
    for st in s.nodes.state.values():
        st.unit = "active"
    return s


def _sleeps(monkeypatch: pytest.MonkeyPatch, each: Any) -> list[float]:
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        each(len(slept))

    monkeypatch.setattr(watch, "_sleep", sleep)
    return slept


def _events(run_cli: Any, site: Any) -> list[dict[str, Any]]:
    res = run_cli("-i", str(site.inventory), "events", "--json", "-n", "100")
    assert res.code == EXIT_OK, res.err
    return [json.loads(line) for line in res.out.splitlines()]


def test_a_failed_rank_restarts_the_group_in_order_then_the_breaker_opens_and_status_names_it(
    run_cli: Any, site: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    site.nodes.state["spark-2"].unit = "failed"

    def kill_again(n: int) -> None:
        if all(st.unit == "active" for st in site.nodes.state.values()):
            site.nodes.state["spark-2"].unit = "failed"

    _sleeps(monkeypatch, kill_again)
    res = run_cli("-i", str(site.inventory), "watch")
    assert res.code == EXIT_UNHEALTHY, res.err
    assert "circuit breaker open since" in flat(res.err) and "sparkctl up" in flat(res.err)
    # One restart (down, then the gated up), then the breaker: down, and it stays down. Every node
    # answers, so each `down` stops the ranks over SSH (four stop scripts) instead of down.yml.
    assert site.books() == ["up.yml"]
    assert sum(what == "stop" for _, what in site.nodes.calls) == 2 * len(site.nodes.state)
    assert {st.unit for st in site.nodes.state.values()} == {"inactive"}
    kinds = [r["kind"] for r in _events(run_cli, site)]
    assert kinds == ["watch", "unit-exited", "restart", "down", "up", "unit-exited", "breaker-open",
                     "down", "watch-stopped"]
    assert API_KEY not in res.out + res.err + json.dumps(_events(run_cli, site))

    status = run_cli("-i", str(site.inventory), "--json", "status")
    assert status.code == EXIT_UNHEALTHY
    reasons = json.loads(status.out)["reasons"]
    assert reasons[0].startswith("supervisor: circuit breaker open since")
    human = run_cli("-i", str(site.inventory), "status")
    assert human.code == EXIT_UNHEALTHY and "circuit breaker open" in human.out

    # The admin's `up` closes the breaker (and says so in the events).
    up = run_cli("-i", str(site.inventory), "up")
    assert up.code == EXIT_OK, up.err
    assert not events.load_breaker(site.cluster.name).is_open
    assert _events(run_cli, site)[-1]["kind"] == "admin-up"
    assert run_cli("-i", str(site.inventory), "status").code == EXIT_OK


def test_the_admins_down_pauses_healing_until_up(
    run_cli: Any, site: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_cli("-i", str(site.inventory), "down").code == EXIT_OK
    assert events.paused(site.cluster.name) is not None
    site.plans.clear()
    site.nodes.state["spark-2"].unit = "failed"

    def stop_after_three(n: int) -> None:
        if n >= 3:
            raise Stop()

    _sleeps(monkeypatch, stop_after_three)
    res = run_cli("-i", str(site.inventory), "watch")
    assert res.code == EXIT_OK, res.err
    assert site.books() == []  # never healed while paused
    kinds = [r["kind"] for r in _events(run_cli, site)]
    assert kinds == ["admin-down", "watch", "paused", "watch-stopped"]
    assert "paused by the admin" in res.out

    assert run_cli("-i", str(site.inventory), "up", "--yes").code == EXIT_OK
    assert events.paused(site.cluster.name) is None
    assert _events(run_cli, site)[-1] == {**_events(run_cli, site)[-1], "kind": "admin-up",
                                          "evidence": "healing resumed"}


def test_a_second_watch_is_refused(run_cli: Any, site: Any) -> None:
    with events.single_watch(site.cluster.name):
        res = run_cli("-i", str(site.inventory), "watch")
    assert res.code == EXIT_USAGE
    assert "another supervisor already watches" in flat(res.err) and "pid" in res.err
    assert site.books() == []


def test_install_without_systemd_says_so_and_writes_nothing(
    run_cli: Any, site: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    units = tmp_path / "units"
    units.mkdir()
    monkeypatch.setattr(watchunit, "UNIT_DIR", units)
    monkeypatch.setattr(watchunit, "systemd_running", lambda: False)
    res = run_cli("-i", str(site.inventory), "watch", "--install")
    assert res.code == EXIT_USAGE
    assert "does not run systemd as PID 1" in flat(res.err) and "nothing was written" in flat(res.err)
    assert list(units.iterdir()) == []


def test_print_unit_runs_the_service_mode_with_this_inventory_and_state(
    run_cli: Any, site: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    me = pwd.getpwuid(os.getuid()).pw_name  # root without sudo must name the account
    res = run_cli("-i", str(site.inventory), "watch", "--print-unit", "--user", me)
    assert res.code == EXIT_OK, res.err
    assert f"-i {site.inventory.absolute()} watch --service" in res.out
    assert "Environment=SPARKCTL_STATE_DIR=" in res.out and "RestartPreventExitStatus=2" in res.out
    assert API_KEY not in res.out


def test_render_unit_is_pure_and_quotes_what_it_must() -> None:
    args = ("lab", Path("/srv/my site/inv"), "/opt/venv/bin/python", Path("/var/lib/sparkctl"), "ops",
            Path("/srv"), "/etc/sparkctl/vault-pass")
    text = watchunit.render_unit(*args)
    assert text == watchunit.render_unit(*args)
    assert "ExecStart=/opt/venv/bin/python -m sparkctl -i '/srv/my site/inv' watch --service" in text
    assert "User=ops" in text and "Environment=ANSIBLE_VAULT_PASSWORD_FILE=/etc/sparkctl/vault-pass" in text
    assert "WantedBy=multi-user.target" in text and "After=network-online.target" in text


def test_events_without_any_yet_and_bad_last(run_cli: Any, site: Any) -> None:
    res = run_cli("-i", str(site.inventory), "events")
    assert res.code == EXIT_OK and "no events yet" in res.err
    assert run_cli("-i", str(site.inventory), "events", "-n", "0").code == EXIT_USAGE
