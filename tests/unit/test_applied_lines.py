"""What `provision` prints about the roles spark_applied let run: one line per reason and set of nodes
(a first run on four nodes printed 24 lines, each "never recorded on this node")."""

from __future__ import annotations

from typing import Any

from sparkctl.ansible.outcome import applied_lines

ROLES = ("base", "fabric", "qos", "runtime", "exporter", "firewall")
NEVER = {"run": True, "reasons": ["never recorded on this node"]}
FRESH = {"run": False, "reasons": []}


def _site(verdict: dict[str, Any]) -> dict[str, Any]:
    return {f"spark-{i}": dict.fromkeys(ROLES, verdict) for i in range(4)}


def test_a_first_run_on_four_nodes_is_one_line() -> None:
    assert applied_lines(_site(NEVER)) == [
        "up to date (skipped after one read per node): 0 of 24 role runs",
        "  base, fabric, qos, runtime, exporter, firewall on every node: never recorded on this node",
    ]


def test_reasons_and_node_sets_that_differ_keep_their_own_lines() -> None:
    site = _site(NEVER)
    site["spark-1"] = dict.fromkeys(ROLES, FRESH)
    site["spark-2"]["firewall"] = {"run": True, "reasons": ["file /etc/sparkctl/firewall.nft: changed "
                                                            "since it was applied"]}
    assert applied_lines(site) == [
        "up to date (skipped after one read per node): 6 of 24 role runs",
        "  base, fabric, qos, runtime, exporter on spark-0, spark-2, spark-3: never recorded on this node",
        "  firewall on spark-0, spark-3: never recorded on this node",
        "  firewall on spark-2: file /etc/sparkctl/firewall.nft: changed since it was applied",
    ]


def test_more_than_three_reasons_are_cut_and_nothing_due_says_only_the_count() -> None:
    many = {"run": True, "reasons": [f"file /etc/f{i}: changed" for i in range(5)]}
    lines = applied_lines({"spark-0": {"base": many, "fabric": FRESH}})
    assert lines[1] == ("  base on spark-0: file /etc/f0: changed; file /etc/f1: changed; "
                        "file /etc/f2: changed; …")
    assert applied_lines(_site(FRESH)) == ["up to date (skipped after one read per node): 24 of 24 role runs"]
    assert applied_lines({}) == []
