"""`sparkctl watch` on a site of two serving groups: each group supervised on its own (its probe,
its restarts limited to its nodes, its breaker and events under its own name); --group picks one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.groups_site import TwoGroupSite

from sparkctl.cli import watch
from sparkctl.errors import EXIT_OK, EXIT_UNHEALTHY
from sparkctl.serve import events


class Stop(KeyboardInterrupt):
    """Ends a foreground watch the way Ctrl-C does."""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TwoGroupSite:
    s = TwoGroupSite(tmp_path, monkeypatch)
    gv = next(s.inventory.glob("group_vars/all/*.yml"))
    doc = yaml.safe_load(gv.read_text())
    doc["sparkctl_supervisor"] = {"interval_s": 1, "settle_s": 0, "max_restarts": 1, "window_s": 3600}
    gv.write_text(yaml.safe_dump(doc))
    for st in s.nodes.state.values():
        st.unit = "active"
    return s


def test_watch_group_restarts_only_its_own_group(run_cli: Any, site: TwoGroupSite,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    site.nodes.state["spark-3"].unit = "failed"

    def sleep(seconds: float) -> None:
        if all(site.nodes.state[n].unit == "active" for n in ("spark-2", "spark-3")):
            site.nodes.state["spark-3"].unit = "failed"

    monkeypatch.setattr(watch, "_sleep", sleep)
    res = run_cli("-i", str(site.inventory), "watch", "--group", "b")
    assert res.code == EXIT_UNHEALTHY, res.out + res.err
    # Group b was restarted once (its own nodes), then its breaker opened; group a never stopped.
    assert [p.limit for p in site.plans if p.playbook == "up.yml"] == ["spark-2,spark-3"]
    assert {site.nodes.state[n].unit for n in ("spark-0", "spark-1")} == {"active"}
    assert not any(node in ("spark-0", "spark-1") and what == "stop" for node, what in site.nodes.calls)


def test_watch_supervises_every_group_side_by_side(run_cli: Any, site: TwoGroupSite,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def sleep(seconds: float) -> None:
        raise Stop

    monkeypatch.setattr(watch, "_sleep", sleep)
    res = run_cli("-i", str(site.inventory), "--json", "watch")
    assert res.code == EXIT_OK, res.out + res.err
    stopped = [json.loads(line) for line in res.out.splitlines() if '"watch-stopped"' in line]
    assert len(stopped) == 2
    assert site.plans == []
    # Each group keeps its own event log, under its own name.
    for group in ("a", "b"):
        kinds = [r["kind"] for r in events.EventLog(f"{site.cluster.name}-{group}").read(100)]
        assert kinds[-1] == "watch-stopped", kinds
