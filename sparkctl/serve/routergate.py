"""`up`'s last gate on a site of several serving groups behind the router: the router lists every
group's rank 0 as a worker.

`up` starts the groups one after the other, each limited to its own nodes, and the router starts
with the group that holds its node, before the later groups are up. The gateway registers a worker
that did not answer at its start only on a later health check, so for a while it routes every
request to the groups that were up when it started. After the last group is ready, an `up` that
covered every group waits, polling the router's row as `status` reads it
(``serve.router_status.probe``: its unit, /health, the workers it lists), until the router lists
every group's rank 0, and fails naming the router and the groups it still misses when it does not
within ``GATE_S``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkctl.errors import EXIT_FAILED, SparkctlError
from sparkctl.serve import bootwatch, router_status
from sparkctl.serve.tools import api_key_or_none

if TYPE_CHECKING:
    from sparkctl.model import Cluster
    from sparkctl.serve.probe import FleetLike
    from sparkctl.serve.tools import Tools

# The bound: the gateway's worker health checks run every few seconds to a minute (its own
# defaults), and a worker it missed at its start is registered on one of them.
GATE_S = 180.0
POLL_S = 3.0
# Lines of the router's journal shown when it is not running at the bound.
JOURNAL_LINES = 15


def applies(site: Cluster, site_doc: dict[str, Any], groups: list[str]) -> bool:
    """Whether an `up` of ``groups`` (by name) passes through the gate: the site has several groups
    and a router, and the `up` covered every group (an `up --group a` does not wait for b)."""
    return (site.router is not None and len(site.groups) > 1
            and set(groups) == {g.name for g in site.groups} and router_status.covers(site_doc))


@dataclass
class RouterGate:
    """The wait for ``site``'s router (``site_doc``: the site's plan document, whose ``router``
    entry names its node, URL and the groups' rank-0 URLs) with ``tools``' SSH fleet and HTTP
    client; ``sleep`` and ``clock`` are time's own unless a test hands in its own."""

    site: Cluster
    site_doc: dict[str, Any]
    tools: Tools
    bound_s: float = GATE_S
    poll_s: float = POLL_S
    sleep: Callable[[float], None] = field(default=time.sleep)
    clock: Callable[[], float] = field(default=time.monotonic)

    def wait(self) -> dict[str, Any]:
        """Poll until the router lists every group's rank 0; the gate's record (its seconds, the
        rounds it took, the workers listed). SparkctlError (exit 1) naming the router and the missing
        groups when it does not within ``bound_s``; the groups are left serving."""
        started = self.clock()
        fleet = self.tools.fleet(self.site)
        http = self.tools.http()
        key = api_key_or_none(self.site)
        rounds = 0
        try:
            while True:
                rounds += 1
                facts = router_status.probe(self.site_doc, fleet, http, key)
                assert facts is not None, "the gate runs only on a site whose plan names a router"
                waited = self.clock() - started
                if facts.workers is not None and not facts.missing:
                    return {"gate": "router", "seconds": round(waited, 2), "rounds": rounds,
                            "node": facts.node, "url": facts.url, "workers": facts.expected}
                if waited >= self.bound_s:
                    raise self._failure(facts, waited, self._journal(fleet, facts))
                self.sleep(self.poll_s)
        finally:
            fleet.close()
            http.close()

    def _journal(self, fleet: FleetLike, facts: router_status.RouterFacts) -> list[str]:
        """The last lines of the router unit's journal when the unit is not running (why it exited:
        a port taken, a wheel that does not import, a refused argument), as the failure's details."""
        if not facts.reachable or facts.active == "active":
            return []
        text, _ = bootwatch.read_journal(fleet, self.site_doc["router"]["unit"], facts.node, JOURNAL_LINES)
        if text is None:
            return []
        return bootwatch.tail_details(f"log tail of the router on {facts.node}:", text, JOURNAL_LINES)

    def _failure(self, facts: router_status.RouterFacts, waited: float,
                 journal: list[str]) -> SparkctlError:
        missing = facts.missing if facts.workers is not None else list(facts.expected)
        which = ", ".join(f"group {g} ({facts.expected[g]})" for g in missing)
        return SparkctlError(
            f"the router on {facts.node} ({facts.url}) does not route to {which} "
            f"{waited:.0f} s after the last group was ready",
            hint=(f"the groups are up and each serves on its own rank 0; check the router "
                  f"(`sparkctl status`, `journalctl -u {self.site_doc['router']['unit']}` on "
                  f"{facts.node}) and the missing groups' rank 0, then run `sparkctl up` again "
                  "(it waits for the router again)"),
            details=(facts.reasons() or [f"router on {facts.node}: lists no worker it could be asked for"])
            + journal,
            exit_code=EXIT_FAILED,
        )


__all__ = ["GATE_S", "POLL_S", "RouterGate", "applies"]
