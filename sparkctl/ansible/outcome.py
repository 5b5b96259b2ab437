"""What a run says beyond pass/fail: each node's identity and the fields that differ across nodes
(preflight.yml), where a rolling upgrade stopped (upgrade.yml), what spark_applied decided
(provision.yml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkctl.ansible import results, runner


def identities(result: runner.RunResult) -> dict[str, dict[str, str]]:
    """{node: {field: value}} from the ``sparkctl_identity`` module's return value (its ``identity``
    key), whatever the task that ran it is called."""
    out: dict[str, dict[str, str]] = {}
    for per_host in result.results.values():
        for host, res in per_host.items():
            ident = res.get("identity")
            if isinstance(ident, dict) and "missing_netdevs" in res:
                out[host] = {str(k): str(v) for k, v in ident.items()}
    return out


def mismatched(ids: dict[str, dict[str, str]]) -> list[str]:
    """The identity fields whose value is not the same on every node that answered."""
    fields = list(dict.fromkeys(f for ident in ids.values() for f in ident))
    return [f for f in fields if len({ident.get(f) for ident in ids.values()}) > 1]


@dataclass
class Rolling:
    """A rolling upgrade's run: each upgraded node's report, the node it stopped at (if a node), the
    nodes after it that it never reached, and the first failure."""

    done: dict[str, dict[str, Any]]
    failed_node: str | None
    untouched: list[str] = field(default_factory=list)
    first: runner.Failure | None = None

    def why(self, result: runner.RunResult) -> str:
        return self.first.msg if self.first is not None else f"rc {result.rc}"


def rolling(result: runner.RunResult, nodes: list[str]) -> Rolling:
    """Read upgrade.yml's run over ``nodes`` (upgraded one at a time, in name order)."""
    done = results.per_host(result, results.UPGRADE)
    first = next((f for f in result.failures if f.host), result.failures[0] if result.failures else None)
    failed_node = first.host if first is not None and first.host in nodes else None
    after = sorted(nodes)
    untouched = ([n for n in after[after.index(failed_node) + 1:] if n not in done]
                 if failed_node else [])
    return Rolling(done, failed_node, untouched, first)


def applied_lines(applied: dict[str, Any]) -> list[str]:
    """What spark_applied decided: how many roles were up to date, and each one that ran with why.
    Roles that ran for the same reasons on the same nodes share a line (a first run on four nodes:
    one line, not 24); "every node" where that is all of them."""
    hosts = sorted(applied)
    by_reason: dict[tuple[str, str], list[str]] = {}  # (reasons, role) -> hosts, in order
    fresh = total = 0
    for host in hosts:
        roles = applied[host] if isinstance(applied[host], dict) else {}
        for role, verdict in roles.items():
            total += 1
            if not verdict.get("run"):
                fresh += 1
                continue
            reasons = verdict.get("reasons") or []
            why = "; ".join(reasons[:3]) + ("; …" if len(reasons) > 3 else "")
            by_reason.setdefault((why, role), []).append(host)
    if not total:
        return []
    # Then the roles of one reason that ran on the same nodes, in the order they first appear.
    merged: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (why, role), ran_on in by_reason.items():
        merged.setdefault((why, tuple(ran_on)), []).append(role)
    due = []
    for (why, on), roles in merged.items():
        where = "every node" if len(on) == len(hosts) > 1 else ", ".join(on)
        due.append(f"  {', '.join(roles)} on {where}: {why}")
    return [f"up to date (skipped after one read per node): {fresh} of {total} role runs", *due]
