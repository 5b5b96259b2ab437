"""`status` with SGLang's gateway in front of the groups (sparkctl_router): a router row (its unit
on its node over SSH, its /health, the workers it lists against each group's rank 0), in the JSON
and the table; a router that is down or misses a group keeps the site from ready (exit 3); a
status of one group named by --group leaves the router out."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from support.groups_site import TwoGroupSite

from sparkctl.cli import common
from sparkctl.errors import EXIT_OK, EXIT_UNHEALTHY
from sparkctl.model import load_inventory
from sparkctl.render import plan_document
from sparkctl.serve import router_status

PORT = 8889


class RouterApi:
    """The gateway's own answers on its port (``workers``: the URLs it lists; None: it answers
    neither worker listing), every other request to the site's fake API."""

    def __init__(self, site: TwoGroupSite, node_ip: str):
        self.site = site
        self.node_ip = node_ip
        self.workers: list[str] | None = [w["url"] for w in site.doc["router"]["workers"]]
        self.old_style = False  # answer /list_workers ({"urls": …}) as the earlier releases do

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.host != self.node_ip or request.url.port != PORT:
            return self.site.api(request)
        path = request.url.path
        if path == "/health":
            return httpx.Response(200, text="ok")
        if path == "/workers" and not self.old_style and self.workers is not None:
            listed = [{"url": u, "is_healthy": True} for u in self.workers]
            return httpx.Response(200, json={"workers": listed, "total": len(listed)})
        if path == "/list_workers" and self.old_style and self.workers is not None:
            return httpx.Response(200, json={"urls": self.workers})
        return httpx.Response(404)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[TwoGroupSite, RouterApi]:
    s = TwoGroupSite(tmp_path, monkeypatch)
    gv = next(s.inventory.glob("group_vars/all/*.yml"))
    doc = yaml.safe_load(gv.read_text())
    doc["sparkctl_router"] = {"node": "spark-1", "port": PORT, "metrics_port": 29000, "policy": "round_robin"}
    gv.write_text(yaml.safe_dump(doc))
    s.cluster = load_inventory(s.inventory)
    s.doc = plan_document(s.cluster)
    api = RouterApi(s, str(s.cluster.node("spark-1").mgmt_ip))
    s.tools = dataclasses.replace(s.tools, http=lambda: httpx.Client(transport=httpx.MockTransport(api)))
    monkeypatch.setattr(common, "tools", lambda: s.tools)
    return s, api


def _up(run_cli: Any, s: TwoGroupSite) -> None:
    assert run_cli("-i", str(s.inventory), "up").code == EXIT_OK
    s.nodes.state["spark-1"].router = "active"


def test_status_shows_the_router_routing_to_both_groups(
        run_cli: Any, site: tuple[TwoGroupSite, RouterApi]) -> None:
    s, _ = site
    _up(run_cli, s)
    res = run_cli("-i", str(s.inventory), "status", "--json")
    assert res.code == EXIT_OK, res.out + res.err
    doc = json.loads(res.out)
    router = doc["router"]
    api = s.cluster.ports.api
    heads = {g.name: f"http://{s.cluster.node(g.head).mgmt_ip}:{api}" for g in s.cluster.groups}
    assert (router["node"], router["policy"], router["unit"], router["health"]) == (
        "spark-1", "round_robin", "active", 200)
    assert router["expected"] == heads and router["missing"] == [] and router["reasons"] == []
    assert ("spark-1", "router") in s.nodes.calls  # the unit read over SSH on the router node only
    assert not any(call == "router" for node, call in s.nodes.calls if node != "spark-1")
    res = run_cli("-i", str(s.inventory), "status")
    flat = " ".join(res.out.split())
    front = s.cluster.node("spark-1").mgmt_ip
    assert f"router http://{front}:{PORT} on spark-1 (round_robin): active" in flat
    assert "routes to 2 of 2 groups" in flat and "site: ready" in flat


def test_a_router_missing_a_group_keeps_the_site_from_ready(
        run_cli: Any, site: tuple[TwoGroupSite, RouterApi]) -> None:
    s, api = site
    _up(run_cli, s)
    assert api.workers is not None
    api.workers = api.workers[:1]
    api.old_style = True  # the earlier release's /list_workers is read too
    res = run_cli("-i", str(s.inventory), "status", "--json")
    assert res.code == EXIT_UNHEALTHY, res.out + res.err
    doc = json.loads(res.out)
    assert doc["verdict"] == "degraded"
    assert {g: v["verdict"] for g, v in doc["groups"].items()} == {"a": "ready", "b": "ready"}
    assert doc["router"]["missing"] == ["b"]
    assert any("does not list group b's rank 0" in r for r in doc["router"]["reasons"])


def test_a_stopped_router_is_named_with_its_state(run_cli: Any, site: tuple[TwoGroupSite, RouterApi]) -> None:
    s, _ = site
    _up(run_cli, s)
    s.nodes.state["spark-1"].router = "failed"
    res = run_cli("-i", str(s.inventory), "status")
    assert res.code == EXIT_UNHEALTHY, res.out + res.err
    flat = " ".join(res.out.split())
    assert "router on spark-1: unit not running (failed/dead, result exit-code)" in flat


def test_one_group_named_leaves_the_router_out(run_cli: Any, site: tuple[TwoGroupSite, RouterApi]) -> None:
    s, _ = site
    _up(run_cli, s)
    s.nodes.state["spark-1"].router = "failed"
    res = run_cli("-i", str(s.inventory), "status", "--group", "b", "--json")
    assert res.code == EXIT_OK, res.out + res.err
    assert "router" not in json.loads(res.out)


@pytest.mark.parametrize(("body", "urls"), [
    ({"workers": [{"url": "http://a:1"}, {"url": "http://b:1", "is_healthy": False}]}, ["http://a:1", "http://b:1"]),
    ({"urls": ["http://a:1"]}, ["http://a:1"]),
    ({"something": "else"}, None),
    (["http://a:1"], None),
])
def test_both_worker_listings_are_read(body: Any, urls: list[str] | None) -> None:
    assert router_status.worker_urls(body) == urls


def test_one_group_behind_a_router_shows_it_under_the_groups_table(
        run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from support.serve_site import Site

    s = Site(tmp_path, monkeypatch)
    gv = next(s.inventory.glob("group_vars/all/*.yml"))
    doc = yaml.safe_load(gv.read_text())
    doc["sparkctl_router"] = {"node": "spark-3", "port": PORT, "metrics_port": 29000}
    gv.write_text(yaml.safe_dump(doc))
    assert run_cli("-i", str(s.inventory), "up").code == EXIT_OK
    res = run_cli("-i", str(s.inventory), "status", "--json")
    # The router is not running: the one group is ready, the site through its router is not.
    assert res.code == EXIT_UNHEALTHY, res.out + res.err
    out = json.loads(res.out)
    assert out["verdict"] == "degraded" and out["router"]["node"] == "spark-3"
    assert any(r.startswith("router on spark-3: unit not running (inactive/dead)") for r in out["reasons"])
