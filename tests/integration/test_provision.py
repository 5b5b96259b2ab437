"""`sparkctl provision` and `sparkctl check fabric` on the lab: real playbooks over real SSH.

Order matters inside this module (first run, then idempotence, then the failure scenarios), so the
tests share one provisioned lab; each scenario undoes its chaos on exit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.model import load_inventory
from sparkctl.render import fabric, monitoring

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError as exc:
        tail = f"{proc.stdout[-2000:]}\n{proc.stderr}"
        raise AssertionError(f"no JSON on stdout (exit {proc.returncode}): {tail}") from exc
    return doc


EXPORTER = monitoring.EXPORTER_UNIT_NAME  # the unit the product installs


@pytest.fixture(scope="module")
def exporter_before(lab: Any) -> dict[str, tuple[str, str]]:
    """Each node's exporter before the module's first provision: running or not, and the node's clock."""
    found = {}
    running = f"systemctl is-active --quiet {EXPORTER} && echo running || echo stopped"
    for node in NODES:
        probe = lab.ssh(node, f"{running}; date +%s")
        state, clock = probe.stdout.split()
        found[node] = (state, clock)
    return found


@pytest.fixture(scope="module")
def provisioned(lab: Any, exporter_before: dict[str, tuple[str, str]]) -> dict[str, Any]:
    lab.heal()
    proc = lab.run_sparkctl("provision", json_out=True, timeout=900)
    doc = _json(proc)
    assert proc.returncode == 0, (doc.get("failures"), proc.stderr[-3000:])
    return doc


def test_provision_passes(provisioned: dict[str, Any]) -> None:
    assert provisioned["ok"] is True
    assert set(NODES) <= set(provisioned["hosts"])
    for host in NODES:
        assert provisioned["hosts"][host]["failed"] == 0
        assert provisioned["hosts"][host]["unreachable"] == 0


def test_an_exporter_that_was_not_running_is_started_once(
    lab: Any, provisioned: dict[str, Any], exporter_before: dict[str, tuple[str, str]]
) -> None:
    """The role writes the exporter's files before it starts the unit, so a node whose exporter was not
    running (a fresh node) gets one start from them and no restart by the role's handler."""
    fresh = {node: clock for node, (state, clock) in exporter_before.items() if state != "running"}
    if not fresh:
        pytest.skip("every node's exporter was running before this module's provision (a kept lab)")
    for node, clock in fresh.items():
        log = lab.ssh(node, f"journalctl -u {EXPORTER} --since @{clock} -o cat --no-pager").stdout
        starts = [line for line in log.splitlines() if line.startswith("Started ")]
        assert len(starts) == 1 and "Stopping " not in log, f"{node}:\n{log}"


def test_second_run_changes_nothing(lab: Any, provisioned: dict[str, Any]) -> None:
    proc = lab.run_sparkctl("provision", json_out=True, timeout=900)
    doc = _json(proc)
    assert proc.returncode == 0, doc.get("failures")
    changed = {h: s["changed"] for h, s in doc["hosts"].items()}
    assert all(n == 0 for n in changed.values()), changed


def test_nodes_are_configured(lab: Any, provisioned: dict[str, Any]) -> None:
    out = lab.ssh("spark-2", "ip -o -4 addr show dev enp1s0f0np0; ip -o link show dev enP2p1s0f0np0").stdout
    assert "10.251.0.12/24" in out and "mtu 9000" in out
    assert "table inet sparkctl" in lab.ssh("spark-1", "nft list tables").stdout
    sim = lab.ssh("spark-0", "sparkctl-sim-rank --help", check=False)
    assert sim.returncode == 0 and "SGLang" in sim.stdout, sim.stderr
    # the mesh: node to node over the fabric name, host key pinned (no prompt, BatchMode)
    hop = lab.ssh("spark-0", "ssh -o BatchMode=yes spark-3-fab-a hostname", check=False)
    assert hop.stdout.strip() == "spark-3", hop.stderr


@pytest.fixture(scope="module")
def fabric_checked(lab: Any, provisioned: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """One `check fabric` of the provisioned lab (its exit code and document), read by two tests."""
    proc = lab.run_sparkctl("check", "fabric", json_out=True, timeout=300)
    return proc.returncode, _json(proc)


def test_check_fabric_passes(fabric_checked: tuple[int, dict[str, Any]]) -> None:
    rc, doc = fabric_checked
    assert rc == 0, doc["problems"]
    assert len(doc["pairs"]) == 24 and all(p["ok"] for p in doc["pairs"])
    assert any(s.startswith("ib_write_bw per pair: skipped: no RDMA device") for s in doc["skipped"])
    assert not any(s.endswith(": ok") for s in doc["skipped"])


def test_check_fabric_pings_the_rendered_matrix(lab: Any, fabric_checked: tuple[int, dict[str, Any]]) -> None:
    """The probe sends the pings sparkctl renders (sparkctl_cluster.fabric_check): on the switched lab
    every ordered pair over every half, each ping labelled with the peer's port and the half's subnet."""
    rc, doc = fabric_checked
    assert rc == 0, doc["problems"]
    assert doc["absent"] == []
    matrix = fabric.check_matrix(load_inventory(lab.inventory))
    sent = sorted((p["src"], p["dst"], p["netdev"], p["dst_netdev"], p["subnet"]) for p in doc["pairs"])
    wanted = sorted((src, p["peer"], p["netdev"], p["dst_netdev"], p["subnet"])
                    for src, pings in matrix["pings"].items() for p in pings)
    assert sent == wanted and len(sent) == 24


def test_check_fabric_names_a_switch_port_at_mtu_1500(lab: Any, provisioned: dict[str, Any]) -> None:
    with lab.port_mtu("s2a", 1500):
        proc = lab.run_sparkctl("check", "fabric", json_out=True, timeout=300)
    doc = _json(proc)
    assert proc.returncode == 1
    text = "\n".join(doc["problems"])
    assert "switch port s2a (spark-2 enp1s0f0np0): MTU 1500" in text
    # a failing ordered pair, named and classed: small pings pass, jumbo ones do not
    assert "MTU broken: jumbo ping" in text and "-> spark-2 10.251.0.12: 0/15 replies" in text
    assert "likely culprit: spark-2 enp1s0f0np0 (switch port s2a)" in text
    assert "spark-2" in proc.stderr and "s2a" in proc.stderr
    failing = {(p["src"], p["dst"]) for p in doc["pairs"] if not p["ok"]}
    assert failing == {(a, b) for a in NODES for b in NODES if a != b and "spark-2" in (a, b)}


def test_check_diff_shows_an_inventory_edit_and_changes_nothing(
    lab: Any, provisioned: dict[str, Any], tmp_path: Path
) -> None:
    site = tmp_path / "lab-edited"
    shutil.copytree(lab.inventory, site)
    conf = site / "group_vars" / "all" / "sparkctl.yml"
    doc = yaml.safe_load(conf.read_text())
    doc["sparkctl_api_allow"] = [*doc["sparkctl_api_allow"], "192.0.2.0/24"]
    conf.write_text(yaml.safe_dump(doc, sort_keys=False))
    before = lab.ssh("spark-1", "sha256sum /etc/sparkctl/firewall.nft").stdout
    proc = subprocess.run(
        [sys.executable, "-m", "sparkctl", "-i", str(site), "provision", "--check", "--diff",
         "--tags", "firewall"],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "192.0.2.0/24" in proc.stdout  # the diff of the ruleset
    assert "would change" in proc.stdout
    assert lab.ssh("spark-1", "sha256sum /etc/sparkctl/firewall.nft").stdout == before


def test_powered_off_node_fails_naming_it(lab: Any, provisioned: dict[str, Any]) -> None:
    sums = "sha256sum /etc/netplan/40-sparkctl-fabric.yaml /etc/sparkctl/firewall.nft"
    states = {n: lab.ssh(n, sums).stdout for n in NODES if n != "spark-3"}
    with lab.powered_off("spark-3"):
        proc = lab.run_sparkctl("provision", json_out=True, timeout=900)
    doc = _json(proc)
    assert proc.returncode == 1
    assert "spark-3" in proc.stderr
    assert any(f["host"] == "spark-3" and f["unreachable"] for f in doc["failures"])
    for n in ("spark-0", "spark-1", "spark-2"):
        assert doc["hosts"][n]["changed"] == 0, doc["hosts"][n]
        assert lab.ssh(n, sums).stdout == states[n]


# The causes a switched-off node shows through the real SSH and Mitogen (the machine is gone: its
# address times out or has no route, depending on the kernel's neighbour state).
_OFF_CAUSES = ("connection timed out", "no route to the node", "connection refused")


def test_a_node_that_does_not_answer_is_named_the_same_by_every_verb(
        lab: Any, provisioned: dict[str, Any]) -> None:
    """One exit code (1) for a node that does not answer; one line naming it with the cause in words,
    printed once; no Mitogen wrapper; no level or RDMA conclusion drawn from it. spark-3's management
    link is cut (its power is test_powered_off_node_fails_naming_it's)."""
    with lab.link_down("spark-3", mgmt=True):
        for verb in (["preflight"], ["check", "fabric"], ["status"], ["logs", "-n", "1"], ["provision"]):
            proc = lab.run_sparkctl(*verb, timeout=900)
            said = " ".join((proc.stdout + proc.stderr).replace("│", " ").split())
            assert proc.returncode == 1, (verb, said[-3000:])
            assert "spark-3 (" in said and "unreachable" in said, (verb, said[-3000:])
            assert any(cause in said for cause in _OFF_CAUSES), (verb, said[-3000:])
            assert "EOF on stream" not in said, (verb, said[-3000:])
            if verb in (["preflight"], ["provision"]):
                line = next(ln for ln in said.split("• ") if ln.startswith("spark-3 ("))
                assert said.count(line.split(" — ")[0]) == 1, (verb, said[-3000:])  # printed once
            if verb == ["preflight"]:
                assert "one level" not in said and "identity differs" not in said, said[-3000:]
            if verb == ["check", "fabric"]:
                assert "absent on every node" not in said and "likely culprit: spark-3" not in said


def test_a_relative_known_hosts_is_read_from_the_inventory_directory(
    lab: Any, provisioned: dict[str, Any], tmp_path: Path
) -> None:
    """A site whose known_hosts is named relatively validates and reaches its nodes from any
    directory; `validate` names the file when it is missing."""
    lab.heal()
    site = tmp_path / "site"
    shutil.copytree(lab.inventory, site)
    hosts = yaml.safe_load((site / "hosts.yml").read_text())
    pinned = site / "pinned_hosts"
    args = hosts["all"]["vars"]["ansible_ssh_common_args"].split()
    for i, word in enumerate(args):
        if word.startswith("UserKnownHostsFile="):
            shutil.copy(word.split("=", 1)[1], pinned)
            args[i] = "UserKnownHostsFile=pinned_hosts"
    hosts["all"]["vars"]["ansible_ssh_common_args"] = " ".join(args)
    (site / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    def sparkctl(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sparkctl", "-i", str(site), *argv], capture_output=True,
                              text=True, cwd="/", env=env, timeout=900)

    assert sparkctl("validate").returncode == 0
    status = sparkctl("--json", "status")  # the nodes answer over SSH (the ranks are not up: 3)
    assert status.returncode in (0, 3), status.stderr[-3000:]
    assert all(n["reachable"] for n in json.loads(status.stdout)["nodes"]), status.stdout[-3000:]
    assert sparkctl("preflight").returncode == 0  # Ansible, too, reads the inventory's file
    pinned.unlink()
    proc = sparkctl("--json", "validate")
    assert proc.returncode == 2
    (line,) = json.loads(proc.stdout)["errors"]
    assert f"UserKnownHostsFile {site}/pinned_hosts" in line and "does not exist" in line


def test_a_changed_host_key_is_named_as_a_mismatch(lab: Any, provisioned: dict[str, Any],
                                                   tmp_path: Path) -> None:
    """A site whose pinned key for spark-2 is not the one spark-2 offers: sparkctl's own SSH and
    Ansible both stop at it and say so in words, naming the node and what to check."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    lab.heal()
    site = tmp_path / "site"
    shutil.copytree(lab.inventory, site)
    hosts = yaml.safe_load((site / "hosts.yml").read_text())
    args = hosts["all"]["vars"]["ansible_ssh_common_args"].split()
    lines: list[str] = []
    for i, word in enumerate(args):
        if word.startswith("UserKnownHostsFile="):
            args[i] = "UserKnownHostsFile=pinned_hosts"
            lines = Path(word.split("=", 1)[1]).read_text().splitlines()
    # Another key of the type the node offers (ed25519): of another type, ssh would report no key
    # of that type known for the host (an unknown key), not a changed one.
    other = Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    spark2 = [ln for ln in lines if ln.split(" ", 1)[0].split(",")[0] == "spark-2"]
    assert spark2, lines
    changed = [ln if ln not in spark2 else f"{ln.split(' ', 1)[0]} {other}"
               for ln in lines]
    (site / "pinned_hosts").write_text("\n".join(changed) + "\n")
    hosts["all"]["vars"]["ansible_ssh_common_args"] = " ".join(args)
    (site / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    for verb in (["status"], ["preflight"]):
        proc = subprocess.run([sys.executable, "-m", "sparkctl", "-i", str(site), *verb], capture_output=True,
                              text=True, cwd=REPO, timeout=900)
        said = " ".join((proc.stdout + proc.stderr).replace("│", " ").split())
        assert proc.returncode == 1, (verb, said[-3000:])
        assert "spark-2" in said and "host key mismatch" in said, (verb, said[-3000:])
        assert "EOF on stream" not in said, (verb, said[-3000:])


def test_manual_ansible_playbook_works(lab: Any, provisioned: dict[str, Any]) -> None:
    lab.heal()
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [str(bin_dir / "ansible-playbook"), "-i", str(lab.inventory), "playbooks/provision.yml"],
        capture_output=True, text=True, timeout=900, cwd=REPO, env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    recap = proc.stdout[proc.stdout.rindex("PLAY RECAP"):]
    # Which tasks changed what, for the message (TASK header, then `changed: [host]`).
    task, changed = "", []
    for ln in proc.stdout.splitlines():
        if ln.startswith("TASK ["):
            task = ln
        elif ln.startswith("changed: ["):
            changed.append(f"{task} {ln}")
    for n in NODES:
        line = next(ln for ln in recap.splitlines() if ln.startswith(n))
        assert "changed=0" in line and "failed=0" in line and "unreachable=0" in line, (line, changed)
