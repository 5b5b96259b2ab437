"""The serving verbs on a site of two groups: `up`, `down` and `status` act on every group by
default and on those --group names; each group comes up with its own playbook run limited to its
nodes; `status` shows each group's verdict and the site's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.groups_site import TwoGroupSite

from sparkctl.errors import EXIT_OK, EXIT_UNHEALTHY, EXIT_USAGE


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TwoGroupSite:
    return TwoGroupSite(tmp_path, monkeypatch)


def _limits(site: TwoGroupSite, book: str) -> list[str | None]:
    return [p.limit for p in site.plans if p.playbook == book]


def test_up_brings_each_group_up_in_turn_on_its_own_nodes(run_cli: Any, site: TwoGroupSite) -> None:
    res = run_cli("-i", str(site.inventory), "--json", "up")
    assert res.code == EXIT_OK, res.out + res.err
    assert _limits(site, "up.yml") == ["spark-0,spark-1", "spark-2,spark-3"]
    doc = json.loads(res.out)
    assert doc["result"] == "ready" and sorted(doc["groups"]) == ["a", "b"]
    assert doc["groups"]["b"]["cluster"] == f"{site.cluster.name}-b"


def test_up_group_starts_only_the_named_group(run_cli: Any, site: TwoGroupSite) -> None:
    res = run_cli("-i", str(site.inventory), "up", "--group", "b")
    assert res.code == EXIT_OK, res.out + res.err
    assert _limits(site, "up.yml") == ["spark-2,spark-3"]
    assert "group b" in res.out


def test_unknown_group_is_bad_input_naming_the_groups(run_cli: Any, site: TwoGroupSite) -> None:
    res = run_cli("-i", str(site.inventory), "status", "--group", "c")
    assert res.code == EXIT_USAGE
    assert "--group c" in res.err and "a, b" in res.err
    assert site.plans == []


def test_status_shows_each_group_and_the_site_verdict(run_cli: Any, site: TwoGroupSite) -> None:
    assert run_cli("-i", str(site.inventory), "up").code == EXIT_OK
    res = run_cli("-i", str(site.inventory), "status", "--json")
    assert res.code == EXIT_OK, res.out + res.err
    doc = json.loads(res.out)
    assert doc["verdict"] == "ready"
    assert {name: g["verdict"] for name, g in doc["groups"].items()} == {"a": "ready", "b": "ready"}
    assert [n["name"] for n in doc["groups"]["b"]["nodes"]] == ["spark-2", "spark-3"]
    assert doc["groups"]["b"]["head"]["url"].startswith("http://10.250.0.12:")

    # Group b's rank 0 stops answering /ready: b is not ready, a still is, the site is not.
    site.api.ready_at["10.250.0.12"] = False
    res = run_cli("-i", str(site.inventory), "status")
    assert res.code == EXIT_UNHEALTHY, res.out + res.err
    flat = " ".join(res.out.split())
    assert "group a: ready" in flat and "group b: ready" not in flat
    assert "site:" in flat and "(1 of 2 groups ready)" in flat
    # --group a alone is a one-group status: ready, exit 0.
    res = run_cli("-i", str(site.inventory), "status", "--group", "a", "--json")
    assert res.code == EXIT_OK, res.out + res.err
    assert json.loads(res.out)["verdict"] == "ready"


def test_down_group_stops_only_that_groups_nodes(run_cli: Any, site: TwoGroupSite) -> None:
    assert run_cli("-i", str(site.inventory), "up").code == EXIT_OK
    res = run_cli("-i", str(site.inventory), "--json", "down", "--group", "a", "--full")
    assert res.code == EXIT_OK, res.out + res.err
    assert _limits(site, "down.yml") == ["spark-0,spark-1"]
    assert list(json.loads(res.out)["groups"]) == ["a"]


def test_admin_down_and_up_pause_and_resume_each_groups_supervisor(run_cli: Any, site: TwoGroupSite) -> None:
    from sparkctl.serve import events

    a, b = (f"{site.cluster.name}-{g}" for g in ("a", "b"))
    assert run_cli("-i", str(site.inventory), "up").code == EXIT_OK
    assert events.paused(a) is None and events.paused(b) is None
    # `down --group b` pauses group b's healing (and the site's), not group a's.
    assert run_cli("-i", str(site.inventory), "down", "--group", "b").code == EXIT_OK
    assert events.paused(b) is not None and events.paused(a) is None
    assert run_cli("-i", str(site.inventory), "up", "--group", "b").code == EXIT_OK
    assert events.paused(b) is None
