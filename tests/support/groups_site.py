"""A lab-shaped site of two serving groups for the serving verbs: ``support.serve_site.Site`` with
its four nodes split into group a (spark-0, spark-1) and group b (spark-2, spark-3), each TP2 with
its own rank 0, rendezvous and API; the fake API answers both heads with each group's own
/server_info."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sparkctl.cli import common
from sparkctl.model import load_inventory
from sparkctl.render import plan_document
from support import gates_fakes as fakes
from support.runner import Outcome
from support.serve_site import Site

GROUPS = {"a": ["spark-0", "spark-1"], "b": ["spark-2", "spark-3"]}
TP2 = {"args": {"--tp-size": 2, "--ep-size": 2}}


class GroupsApi(fakes.FakeApi):
    """``FakeApi`` with one head per group: ``ready`` per head address, each head's own /server_info."""

    def __init__(self, cluster: Any, doc: dict[str, Any]):
        super().__init__(cluster, doc)
        heads = [e for e in doc["nodes"] if e["rank"] == 0]
        self.heads = {e["mgmt"]: self._info(e["rank_launch"]["argv"]) for e in heads}
        self.ready_at = {addr: True for addr in self.heads}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if host in self.heads and request.url.path != "/health" and self.health.get(host, False):
            self.head, self.server_info, self.ready = host, self.heads[host], self.ready_at[host]
        return super().__call__(request)


class TwoGroupSite(Site):
    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch):
        super().__init__(tmp, monkeypatch)
        gv = next(self.inventory.glob("group_vars/all/*.yml"))
        doc = yaml.safe_load(gv.read_text())
        doc["sparkctl_groups"] = [{"name": name, "nodes": nodes, "profile_overrides": TP2}
                                  for name, nodes in GROUPS.items()]
        gv.write_text(yaml.safe_dump(doc))
        self.cluster = load_inventory(self.inventory)
        self.doc = plan_document(self.cluster)
        self.api = GroupsApi(self.cluster, self.doc)
        self.tools = dataclasses.replace(self.tools, http=self.api.client)
        monkeypatch.setattr(common, "tools", lambda: self.tools)

    def _limited(self, out: Outcome) -> list[str]:
        """The nodes a playbook run reaches: its --limit's, else every node."""
        return out.plan.limit.split(",") if out.plan.limit else list(self.nodes.state)

    def _up(self, out: Outcome) -> None:
        if out.failures:
            return
        for name in self._limited(out):
            self.nodes.state[name].unit = "active"
        out.changed = 1

    def _down(self, out: Outcome) -> None:
        if out.failures:
            return
        reached = [self.nodes.state[n] for n in self._limited(out)]
        out.changed = int(any(st.unit != "inactive" for st in reached))
        for st in reached:
            st.unit = "inactive"
