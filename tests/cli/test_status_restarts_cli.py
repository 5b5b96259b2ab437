"""`status` after `up`: a rank restarted since `up` made the group ready, or OOM-killed, makes the
group unhealthy (exit 3) and says which rank and what happened, in words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.serve_site import Site

from sparkctl.errors import EXIT_OK, EXIT_UNHEALTHY


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    return Site(tmp_path, monkeypatch)


def test_status_fails_naming_a_rank_restarted_since_up(run_cli: Any, site: Site) -> None:
    res = run_cli("-i", str(site.inventory), "up")
    assert res.code == EXIT_OK, res.err
    res = run_cli("-i", str(site.inventory), "status", "--json")
    assert res.code == EXIT_OK and json.loads(res.out)["verdict"] == "ready", res.out + res.err
    site.nodes.state["spark-2"].invocation = "a-later-start"  # systemctl restart of rank 2's unit
    res = run_cli("-i", str(site.inventory), "status")
    assert res.code == EXIT_UNHEALTHY, res.out + res.err
    flat = " ".join(res.out.split())
    assert "degraded" in flat
    assert "spark-2 (rank 2): restarted since `up` made it ready (≥1×: the rank unit runs a new invocation)" \
        in flat


def test_status_fails_naming_an_oom_killed_rank(run_cli: Any, site: Site) -> None:
    assert run_cli("-i", str(site.inventory), "up").code == EXIT_OK
    site.nodes.state["spark-1"].unit, site.nodes.state["spark-1"].result = "failed", "oom-kill"
    res = run_cli("-i", str(site.inventory), "status", "--json")
    assert res.code == EXIT_UNHEALTHY
    reasons = json.loads(res.out)["reasons"]
    assert "spark-1 (rank 1): rank unit was OOM-killed (systemd result oom-kill)" in reasons, reasons


def test_up_heals_a_restarted_rank_without_waiting_for_it(run_cli: Any, site: Site) -> None:
    """The restarted rank is out of its group: rank 0 will never tell it to exit and it serves
    nothing, so the stop before the new start gives it no grace period (a worker's 30 s leave period
    went to it on the lab); the other ranks stop as `down` stops them."""
    from sparkctl.serve import faststop

    assert run_cli("-i", str(site.inventory), "up").code == EXIT_OK
    site.nodes.state["spark-2"].invocation = "a-later-start"
    site.nodes.sent.clear()
    site.nodes.sent_to.clear()
    res = run_cli("-i", str(site.inventory), "up", "--yes")
    assert res.code == EXIT_OK, res.err
    assert "cluster is degraded" in res.out
    stops = {n: t for n, t in zip(site.nodes.sent_to, site.nodes.sent, strict=True)
             if t.startswith(faststop.MARK)}
    assert "grace=0 " in stops["spark-2"], stops["spark-2"]
    assert "head=1 grace=75 " in stops["spark-0"] and "grace=30 " in stops["spark-1"], stops
