"""A no-op `sparkctl provision` on the lab takes the fast path (one read per node, every role up to
date, 0 changed) and still catches drift: a rendered file edited by hand on one node runs that
node's role again, which reports the change; the run after it is a fast no-op again.

The seconds are bench/provision_noop.py's to measure (medians of interleaved repeats against --full);
here a fast no-op is one that runs only a handful of tasks per node, whatever the machine's load."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.integration

# Tasks that reach a node in a no-op run: preflight, the one spark_applied read, the decisions and
# the report (23 on the lab, 27 on the head). One role that runs again makes 43-48; --full, 88-93.
FAST_TASKS = 30


def _provision(lab: Any, *extra: str) -> dict[str, Any]:
    proc = lab.run_sparkctl("provision", *extra, json_out=True, timeout=900)
    doc: dict[str, Any] = json.loads(proc.stdout)
    assert proc.returncode == 0, (doc.get("failures"), proc.stderr[-3000:])
    return doc


def _changed(doc: dict[str, Any]) -> dict[str, int]:
    return {h: s["changed"] for h, s in doc["hosts"].items() if s["changed"]}


def _ran(doc: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for host, roles in doc["applied"].items():
        for role, verdict in roles.items():
            if verdict["run"]:
                out.setdefault(host, []).append(role)
    return out


@pytest.fixture(scope="module")
def provisioned(lab: Any) -> dict[str, Any]:
    lab.heal()
    return _provision(lab)  # whatever the nodes held before: afterwards every role is recorded


def test_a_no_op_provision_is_fast_and_changes_nothing(lab: Any, provisioned: dict[str, Any]) -> None:
    doc = _provision(lab)
    assert _changed(doc) == {}
    assert _ran(doc) == {}, "every role should be up to date on every node"
    assert set(doc["applied"]) == {"spark-0", "spark-1", "spark-2", "spark-3"}
    tasks = {h: s["ok"] for h, s in doc["hosts"].items() if h.startswith("spark-")}
    assert max(tasks.values()) <= FAST_TASKS, f"a no-op provision ran {tasks} tasks per node"


def test_full_runs_every_role_and_still_changes_nothing(lab: Any, provisioned: dict[str, Any]) -> None:
    doc = _provision(lab, "--full")
    assert _changed(doc) == {}
    assert all(set(roles) >= {"base", "fabric", "firewall"} for roles in _ran(doc).values())


@pytest.mark.parametrize(
    ("node", "path", "role"),
    [
        ("spark-2", "/etc/sparkctl/firewall.nft", "firewall"),
        ("spark-1", "/etc/sysctl.d/60-sparkctl.conf", "base"),
    ],
)
def test_a_file_edited_by_hand_is_noticed_and_repaired(
    lab: Any, provisioned: dict[str, Any], node: str, path: str, role: str
) -> None:
    before = lab.ssh(node, f"sha256sum {path}").stdout.split()[0]
    lab.ssh(node, f"printf '# edited by hand\\n' >> {path}")
    doc = _provision(lab)
    verdict = doc["applied"][node][role]
    assert verdict["run"] is True
    assert any(path in reason and "changed since it was applied" in reason for reason in verdict["reasons"])
    assert node in _changed(doc), doc["hosts"]
    if role == "firewall":  # a per-node role: only the drifted node ran it
        assert _ran(doc) == {node: ["firewall"]}
    assert lab.ssh(node, f"sha256sum {path}").stdout.split()[0] == before
    again = _provision(lab)
    assert _changed(again) == {} and _ran(again) == {}


def test_check_mode_reports_drift_without_repairing_it(lab: Any, provisioned: dict[str, Any]) -> None:
    path = "/etc/sparkctl/firewall.nft"
    lab.ssh("spark-3", f"printf '# edited by hand\\n' >> {path}")
    try:
        doc = _provision(lab, "--check")
        assert doc["applied"]["spark-3"]["firewall"]["run"] is True
        assert "spark-3" in _changed(doc)
        assert "edited by hand" in lab.ssh("spark-3", f"tail -n1 {path}").stdout
    finally:
        repaired = _provision(lab)
    assert "spark-3" in _changed(repaired)
