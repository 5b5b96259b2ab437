"""A no-op `sparkctl provision` on the lab runs no playbook at all (one SSH round repeats spark_applied's
read on every node and the switch's port MTUs, 0 changed) and still catches drift: a rendered file
edited by hand, a fabric MTU changed with `ip link` on a node or on the switch runs the playbook,
which re-applies that role on that node only and reports the change (the four drifts are made at once
and repaired by one run); the run after it is a fast no-op again.

The seconds are bench/provision_noop.py's to measure (medians of interleaved repeats against --full);
here a fast no-op is one that ran no playbook, whatever the machine's load."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.integration

SWITCH = "lab-switch"


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


def _fast_no_op(doc: dict[str, Any]) -> None:
    assert doc["path"]["path"] == "fast", doc["path"]["reasons"]
    assert doc["playbook"] is None
    assert _changed(doc) == {} and _ran(doc) == {}


@pytest.fixture(scope="module")
def provisioned(lab: Any) -> dict[str, Any]:
    lab.heal()
    # whatever the nodes held before: afterwards every role is recorded, and the controller keeps
    # what this whole run decided from
    return _provision(lab, "--full")


def test_a_no_op_provision_runs_no_playbook_and_changes_nothing(
    lab: Any, provisioned: dict[str, Any]
) -> None:
    doc = _provision(lab)
    _fast_no_op(doc)
    assert set(doc["applied"]) == {"spark-0", "spark-1", "spark-2", "spark-3"}
    assert set(doc["hosts"]) == {"spark-0", "spark-1", "spark-2", "spark-3", SWITCH}


def test_full_runs_every_role_and_still_changes_nothing(lab: Any, provisioned: dict[str, Any]) -> None:
    doc = _provision(lab, "--full")
    assert _changed(doc) == {}
    assert all(set(roles) >= {"base", "fabric", "firewall"} for roles in _ran(doc).values())


def test_drift_anywhere_is_noticed_and_repaired_where_it_is(lab: Any, provisioned: dict[str, Any]) -> None:
    """Four drifts at once — a rendered file edited by hand on two nodes (a per-node role and the base
    role), a fabric MTU changed with `ip link` on a node and a port MTU changed on the switch: one
    playbook run names each, re-applies each per-node role on the node that drifted only, changes
    nothing elsewhere, and the run after it is a fast no-op again."""
    files = {("spark-2", "firewall"): "/etc/sparkctl/firewall.nft",
             ("spark-1", "base"): "/etc/sysctl.d/60-sparkctl.conf"}
    before = {key: lab.ssh(key[0], f"sha256sum {path}").stdout.split()[0] for key, path in files.items()}
    for (where, _), path in files.items():
        lab.ssh(where, f"printf '# edited by hand\\n' >> {path}")
    node, netdev = "spark-1", "enp1s0f0np0"
    mtu = lab.ssh(node, f"cat /sys/class/net/{netdev}/mtu").stdout.strip()
    lab.ssh(node, f"ip link set dev {netdev} mtu 1500")
    port = "s2a"
    port_mtu = lab.ssh(SWITCH, f"cat /sys/class/net/{port}/mtu").stdout.strip()
    lab.ssh(SWITCH, f"ip link set dev {port} mtu 1500")

    doc = _provision(lab)
    assert doc["path"]["path"] == "playbook"
    reasons = doc["path"]["reasons"]
    for (where, role), path in files.items():
        assert any(r.startswith(f"{role} on {where}: file {path}") for r in reasons), reasons
        verdict = doc["applied"][where][role]
        assert verdict["run"] is True
        assert any(path in r and "changed since it was applied" in r for r in verdict["reasons"]), verdict
        assert lab.ssh(where, f"sha256sum {path}").stdout.split()[0] == before[(where, role)]
    assert any(r.startswith(f"fabric on {node}: link {netdev}") for r in reasons), reasons
    assert doc["applied"][node]["fabric"]["run"] is True
    assert lab.ssh(node, f"cat /sys/class/net/{netdev}/mtu").stdout.strip() == mtu
    assert f"{SWITCH}: port {port} has MTU 1500, the inventory says {port_mtu}" in reasons
    assert lab.ssh(SWITCH, f"cat /sys/class/net/{port}/mtu").stdout.strip() == port_mtu
    assert set(_changed(doc)) == {"spark-1", "spark-2", SWITCH}, doc["hosts"]
    # The per-node roles re-applied on the node that drifted only; base (due on spark-1) runs on every
    # node, changing nothing where nothing drifted.
    ran = {host: set(roles) - {"base"} for host, roles in _ran(doc).items()}
    assert ran == {"spark-0": set(), "spark-1": {"fabric"}, "spark-2": {"firewall"}, "spark-3": set()}, ran
    _fast_no_op(_provision(lab))


def test_check_mode_reports_drift_without_repairing_it(lab: Any, provisioned: dict[str, Any]) -> None:
    """Every role in check mode (--full): only the drifted node would change — check mode reports
    what the real run would do, also where a container keeps kernel settings read-only."""
    path = "/etc/sparkctl/firewall.nft"
    lab.ssh("spark-3", f"printf '# edited by hand\\n' >> {path}")
    try:
        doc = _provision(lab, "--check", "--full")
        assert doc["applied"]["spark-3"]["firewall"]["run"] is True
        assert set(_changed(doc)) == {"spark-3"}, _changed(doc)
        assert "edited by hand" in lab.ssh("spark-3", f"tail -n1 {path}").stdout
    finally:
        repaired = _provision(lab)
    assert "spark-3" in _changed(repaired)
