"""`down`: stop every rank — rank 0 first, grace period, forced shutdown, SIGKILL backstop.

Over SSH when every node answers (``serve.faststop``: the spark_rank role's stop steps in one round),
else playbooks/down.yml, which reports every node; nothing at all when every rank unit is inactive.
``stop_ranks`` is also how `up` stops running ranks before a start and every rank after a failed one.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.ansible import failures as failure_lines
from sparkctl.ansible.plan import for_down
from sparkctl.errors import EXIT_FAILED, InputError, SparkctlError
from sparkctl.serve import faststop, probe
from sparkctl.serve import groups as serve_groups
from sparkctl.serve.probe import FleetLike
from sparkctl.serve.tools import Output, Tools

if TYPE_CHECKING:
    from sparkctl.model import Cluster


@dataclass
class Stopped:
    """How every rank was stopped: over SSH, or by playbooks/down.yml where that could not be done."""

    path: str                      # "ssh" | "playbook"
    ok: bool
    stopped: bool                  # a rank unit was not inactive before
    failed_hosts: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # one line per node, rank order (ansible.failures)
    artifact_dir: Path | None = None
    exit_code: int = EXIT_FAILED  # EXIT_UNREACHABLE when a node did not answer

    def error(self, message: str) -> SparkctlError:
        """The error of a stop that failed: each node's line once, the nodes named."""
        return SparkctlError(message, hint=f"artifacts: {self.artifact_dir}", exit_code=self.exit_code,
                             details=self.failures, nodes=self.failed_hosts)


def stop_ranks(cluster: Cluster, doc: dict[str, Any], fleet: FleetLike, tools: Tools, out: Output,
               grace_s: int | None = None, over_ssh: bool = True, run_dir: Path | None = None,
               limit: str | None = None, outsiders: Collection[str] = ()) -> Stopped:
    """Stop every rank: the spark_rank role's stop steps over SSH in one round (serve/faststop.py);
    when a node does not answer or its stop fails (or ``over_ssh`` is False), playbooks/down.yml,
    which reports every node (its records in ``run_dir`` when the verb has one). ``limit``: one
    serving group's nodes (``serve.groups.Target.limit``), the playbook's --limit. ``outsiders``:
    nodes whose rank left the group (``faststop.scripts``), stopped without a wait over SSH."""
    if over_ssh:
        try:
            done = faststop.stop(doc, fleet, grace_s, outsiders)
            return Stopped("ssh", True, any(what != "inactive" for what in done.values()))
        except SparkctlError as exc:
            out.falling_back(f"{exc} ({'; '.join(exc.details)})")
    the_plan = for_down(cluster, grace_s)
    if limit is not None:
        the_plan = dataclasses.replace(the_plan, limit=limit)
    result = tools.execute(the_plan, out.playbook_event, run_dir)
    failed = failure_lines.for_cluster(result.failures, cluster)
    return Stopped("playbook", result.ok, result.changed_total > 0, [nf.host for nf in failed],
                   [nf.line() for nf in failed], result.artifact_dir,
                   failure_lines.exit_code(result.failures))


def stop_after_failure(cluster: Cluster, doc: dict[str, Any], tools: Tools, out: Output,
                       run_dir: Path | None = None, limit: str | None = None) -> str:
    """Stop every rank after a failed start; say what was really stopped (never assume it). Its own
    SSH connections: the start's may be in the middle of what was interrupted. No grace period: the
    group never served, so rank 0 has nothing to drain and no worker waits for its broadcast."""
    fleet = None
    try:
        fleet = tools.fleet(cluster)
        stop = stop_ranks(cluster, doc, fleet, tools, out, grace_s=0, run_dir=run_dir, limit=limit)
    except BaseException as exc:  # even a second Ctrl-C or a runner crash must be reported
        return f"stopping the ranks failed too ({type(exc).__name__}: {exc}); run `sparkctl down`"
    finally:
        if fleet is not None:
            fleet.close()
    if stop.ok:
        return f"all {len(cluster.nodes)} ranks were stopped"
    where = ", ".join(stop.failed_hosts) or "the controller"
    return (f"stopping the ranks FAILED on {where} (ranks there may still run; run `sparkctl down`); "
            f"artifacts: {stop.artifact_dir}")


def every_node_answered(facts: Mapping[str, probe.NodeFacts]) -> bool:
    """True when every node answered the probe: then `down` stops the ranks over SSH
    (sparkctl.serve.faststop); a node that did not answer is the playbook's to report."""
    return bool(facts) and all(f.reachable and not f.error for f in facts.values())


def nothing_to_stop(facts: Mapping[str, probe.NodeFacts]) -> bool:
    """True when `down` has nothing to do on any node: every node answered and its rank unit is
    inactive. A failed unit (the playbook clears its failed state), a unit still starting or
    stopping, or a node that did not answer (the playbook reports it) goes to the playbook."""
    return bool(facts) and all(f.reachable and not f.error and f.active == "inactive" for f in facts.values())


@dataclass
class DownResult:
    path: str                      # "fast" (nothing to stop) | "ssh" | "playbook"
    stopped: bool
    facts: Mapping[str, probe.NodeFacts]
    checked_s: float               # the first probe's seconds
    seconds: float

    def as_dict(self, cluster_name: str) -> dict[str, Any]:
        return {"cluster": cluster_name, "result": "down", "stopped": self.stopped, "path": self.path,
                "nodes": {n: f.active if f.reachable else f"unreachable: {f.error}"
                          for n, f in self.facts.items()}}


class Down:
    """Stop every rank of ``cluster``; ``full`` runs the playbook even when every node answers."""

    def __init__(self, cluster: Cluster, doc: dict[str, Any], tools: Tools, out: Output,
                 grace_s: int | None = None, full: bool = False, limit: str | None = None):
        if grace_s is not None and grace_s < 0:
            raise InputError("--grace must be >= 0")
        self.cluster, self.doc, self.tools, self.out = cluster, doc, tools, out
        self.grace_s, self.full, self.limit = grace_s, full, limit

    def run(self) -> DownResult:
        cluster, doc = self.cluster, self.doc
        fleet = self.tools.fleet(cluster)
        try:
            t0 = time.monotonic()
            facts = None if self.full else probe.collect(cluster, doc, fleet, "watch", timeout=10)
            checked_s = time.monotonic() - t0
            stopped = False
            if facts is not None and nothing_to_stop(facts):
                path = "fast"
            else:
                result = stop_ranks(cluster, doc, fleet, self.tools, self.out, self.grace_s,
                                    over_ssh=facts is not None and every_node_answered(facts),
                                    limit=self.limit)
                if not result.ok:
                    raise result.error("stopping the ranks failed")
                stopped, path = result.stopped, result.path
                facts = probe.collect(cluster, doc, fleet, "watch", timeout=10)
        finally:
            fleet.close()
        running = [f"{f.name}: {f.active}" for f in facts.values() if f.reachable and f.active != "inactive"]
        if running:
            raise SparkctlError("ranks still running after down", details=running)
        return DownResult(path, stopped, facts, checked_s, time.monotonic() - t0)


def down_groups(cluster: Cluster, tools: Tools, out: Output, names: Iterable[str] | None = None,
                grace_s: int | None = None, full: bool = False
                ) -> Iterator[tuple[serve_groups.Target, bool, DownResult]]:
    """`down` of each serving group ``names`` picks (default all; a site of one group is one target,
    the site itself), one after the other in the site's order, rank 0 first in each: (its target,
    whether the site reports per group, its result) as each is stopped."""
    from sparkctl.render import plan_document

    found = serve_groups.targets(cluster, plan_document(cluster), names)
    per_group = serve_groups.several(found)
    for t in found:
        yield t, per_group, Down(t.cluster, t.doc, tools, out, grace_s, full, limit=t.limit).run()
