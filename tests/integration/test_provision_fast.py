"""A no-op `sparkctl provision` on the lab runs no playbook at all (one SSH round repeats spark_applied's
read on every node and the switch's port MTUs, 0 changed) and still catches drift: a rendered file
edited by hand, a fabric MTU changed with `ip link` on a node or on the switch runs the playbook,
which re-applies that role on that node only and reports the change; the run after it is a fast
no-op again.

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
    assert doc["path"]["path"] == "playbook"
    assert any(r.startswith(f"{role} on {node}: file {path}") for r in doc["path"]["reasons"]), doc["path"]
    verdict = doc["applied"][node][role]
    assert verdict["run"] is True
    assert any(path in reason and "changed since it was applied" in reason for reason in verdict["reasons"])
    assert node in _changed(doc), doc["hosts"]
    if role == "firewall":  # a per-node role: only the drifted node ran it
        assert _ran(doc) == {node: ["firewall"]}
    assert lab.ssh(node, f"sha256sum {path}").stdout.split()[0] == before
    _fast_no_op(_provision(lab))


def test_an_mtu_changed_with_ip_link_is_noticed_and_repaired(lab: Any, provisioned: dict[str, Any]) -> None:
    node, netdev = "spark-1", "enp1s0f0np0"
    mtu = lab.ssh(node, f"cat /sys/class/net/{netdev}/mtu").stdout.strip()
    lab.ssh(node, f"ip link set dev {netdev} mtu 1500")
    doc = _provision(lab)
    assert doc["path"]["path"] == "playbook"
    assert any(r.startswith(f"fabric on {node}: link {netdev}") for r in doc["path"]["reasons"]), doc["path"]
    assert doc["applied"][node]["fabric"]["run"] is True
    assert node in _changed(doc), doc["hosts"]
    assert lab.ssh(node, f"cat /sys/class/net/{netdev}/mtu").stdout.strip() == mtu
    _fast_no_op(_provision(lab))


def test_a_switch_port_mtu_changed_by_hand_is_noticed_and_repaired(
    lab: Any, provisioned: dict[str, Any]
) -> None:
    port = "s2a"
    mtu = lab.ssh(SWITCH, f"cat /sys/class/net/{port}/mtu").stdout.strip()
    lab.ssh(SWITCH, f"ip link set dev {port} mtu 1500")
    doc = _provision(lab)
    assert doc["path"]["path"] == "playbook"
    assert f"{SWITCH}: port {port} has MTU 1500, the inventory says {mtu}" in doc["path"]["reasons"]
    assert SWITCH in _changed(doc), doc["hosts"]
    assert lab.ssh(SWITCH, f"cat /sys/class/net/{port}/mtu").stdout.strip() == mtu
    _fast_no_op(_provision(lab))


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
