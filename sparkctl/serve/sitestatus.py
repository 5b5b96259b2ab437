"""`status` of a site of several serving groups: each group probed as a one-group site (its nodes,
its rank 0's API, its verdict), the router in front of them when the view covers the whole site, and
the site's verdict over them (ready only when every group is and the router routes to each).

The CLI prints what ``SiteStatus.take`` returns; the probing, the verdict and the JSON document live
here, with the collaborators (``tools.Tools``: SSH fleet, HTTP client) handed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkctl.serve import groups as serve_groups
from sparkctl.serve import router_status, verdict
from sparkctl.serve.tools import api_key_or_none

if TYPE_CHECKING:
    import httpx

    from sparkctl.model import Cluster
    from sparkctl.serve.groups import Target
    from sparkctl.serve.tools import Tools


@dataclass
class SiteSnapshot:
    """One round: each group's snapshot (by group name) and the router's row (None: no router, or a
    view that does not cover the site)."""

    groups: dict[str, verdict.Snapshot]
    router: router_status.RouterFacts | None

    @property
    def verdict(self) -> str:
        """The worst group's verdict; degraded when every group is ready but the router is not."""
        overall = serve_groups.overall(s.verdict for s in self.groups.values())
        if overall == verdict.READY and self.router is not None and self.router.reasons():
            return verdict.DEGRADED
        return overall

    @property
    def unreachable(self) -> bool:
        """Whether a node of any group did not answer."""
        return any(not f.reachable for s in self.groups.values() for f in s.nodes.values())

    def as_dict(self, name: str) -> dict[str, Any]:
        doc: dict[str, Any] = {"cluster": name, "verdict": self.verdict,
                               "groups": {group: s.as_dict() for group, s in self.groups.items()}}
        if self.router is not None:
            doc["router"] = self.router.as_dict()
        return doc


class SiteStatus:
    """Probes the groups of ``found`` (``serve.groups.targets``) and, where the site's document
    ``site_doc`` covers them all, the router named there; one HTTP client for its whole life."""

    def __init__(self, found: Sequence[Target], site: Cluster, site_doc: dict[str, Any], tools: Tools,
                 http: httpx.Client) -> None:
        self.found = list(found)
        self.site = site
        self.site_doc = site_doc
        self.tools = tools
        self.http = http

    def take(self) -> SiteSnapshot:
        return SiteSnapshot(self._groups(), self._router())

    def _groups(self) -> dict[str, verdict.Snapshot]:
        snaps = {}
        for t in self.found:
            fleet = self.tools.fleet(t.cluster)
            try:
                key = api_key_or_none(t.cluster)
                snaps[t.group] = verdict.snapshot(t.cluster, t.doc, fleet, self.http, key)
            finally:
                fleet.close()
        return snaps

    def _router(self) -> router_status.RouterFacts | None:
        if not router_status.covers(self.site_doc):
            return None
        fleet = self.tools.fleet(self.site)
        try:
            return router_status.probe(self.site_doc, fleet, self.http, api_key_or_none(self.site))
        finally:
            fleet.close()


__all__ = ["SiteSnapshot", "SiteStatus"]
