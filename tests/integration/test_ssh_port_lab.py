"""A node whose sshd listens on another port than 22 is provisioned on that port, and its firewall
opens exactly the port Ansible connects on.

The inventory names the port as ``ansible_ssh_port`` (what the issue found: it validated, Ansible
connected on it and the firewall opened 22, so provision's armed revert fired). spark-2's sshd also
listens on 2222 for this module; the inventory, the pinned host key and the node are put back
afterwards, so the modules after this one find the lab as before.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

TARGET = "spark-2"
PORT = 2222
DROPIN = "/etc/ssh/sshd_config.d/90-sparkctl-test-port.conf"


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError as exc:
        tail = f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        raise AssertionError(f"no JSON (exit {proc.returncode}): {tail}") from exc
    return doc


def _ssh(lab: Any, port: int, command: str) -> subprocess.CompletedProcess[str]:
    """ssh to the target on ``port`` with the lab's ssh_config (its pinned known_hosts)."""
    argv = ["ssh", "-F", str(lab.ssh_config), "-p", str(port), "-o", "ConnectTimeout=5", TARGET, command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def _live_ssh_ports(table: str) -> list[str]:
    """`nft list table` drops the comments: the SSH rule is the first admin_sources rule (the
    exporter's comes after it); the list also holds the other ports opened to the admin sources."""
    return re.findall(r"ip saddr @admin_sources tcp dport (\d+) accept", table)


def _ssh_rule_ports(ruleset: str) -> list[str]:
    """The port(s) the ruleset opens to SSH (the rule under its "# SSH" comment)."""
    return re.findall(r"# SSH [^\n]*\n\s*ip saddr @admin_sources tcp dport (\d+) accept", ruleset)


@pytest.fixture(scope="module")
def on_2222(lab: Any) -> Iterator[Any]:
    lab.heal()
    hosts: Path = lab.inventory / "hosts.yml"
    hosts_before, known_before = hosts.read_text(), lab.known_hosts.read_text()
    address = lab.mgmt_ip(TARGET)
    # sshd listens on 2222 too (22 stays for the lab's own tools and the node-to-node mesh)
    main_ports = lab.exec(TARGET, "sh", "-c", r"grep -Ei '^\s*Port\s' /etc/ssh/sshd_config || true").stdout
    ports = [PORT] + ([] if main_ports.strip() else [22])
    conf = "".join(f"Port {p}\\n" for p in ports)
    lab.exec(TARGET, "sh", "-c", f"printf '{conf}' > {DROPIN} && sshd -t && systemctl restart ssh")
    # A node whose sshd moved to 2222 before it was provisioned: no sparkctl table yet (a table an
    # earlier provision loaded opens 22 only, and would keep the controller out on 2222).
    lab.exec(TARGET, "sh", "-c", "nft delete table inet sparkctl || true")
    doc = yaml.safe_load(hosts_before)
    doc["all"]["children"]["sparks"]["hosts"][TARGET]["ansible_ssh_port"] = PORT
    hosts.write_text(yaml.safe_dump(doc, sort_keys=False))
    # ssh and paramiko look a host key on another port up as [address]:port
    key = next(line for line in known_before.splitlines() if line.startswith(f"{TARGET},")).split(None, 1)[1]
    lab.known_hosts.write_text(known_before + f"[{address}]:{PORT} {key}\n")
    try:
        yield lab
    finally:
        # The table opens 2222 only: take it away first, so the controller gets back in on 22.
        lab.exec(TARGET, "sh", "-c", f"nft delete table inet sparkctl; rm -f {DROPIN}; systemctl restart ssh",
                 check=False)
        hosts.write_text(hosts_before)
        lab.known_hosts.write_text(known_before)
        t0 = time.monotonic()
        proc = lab.run_sparkctl("provision", "--limit", TARGET, timeout=900)
        print(f"\n[ssh-port] restoring provision --limit {TARGET}: {time.monotonic() - t0:.1f}s")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        live = _live_ssh_ports(lab.exec(TARGET, "nft", "list", "table", "inet", "sparkctl").stdout)
        assert live[0] == "22" and str(PORT) not in live, live
        assert lab.ssh(TARGET, "true", check=False).returncode == 0


def test_plan_opens_the_port_ansible_connects_on(on_2222: Any) -> None:
    doc = _json(on_2222.run_sparkctl("plan", json_out=True, timeout=120))
    entry = next(n for n in doc["nodes"] if n["name"] == TARGET)
    assert entry["ssh_port"] == PORT
    nft = next(text for path, text in entry["files"].items() if path.endswith(".nft"))
    assert _ssh_rule_ports(nft) == [str(PORT)]
    others = [n for n in doc["nodes"] if n["name"] != TARGET]
    assert all(n["ssh_port"] == 22 for n in others)


def test_provision_on_the_port_keeps_the_node_reachable(on_2222: Any) -> None:
    lab = on_2222
    t0 = time.monotonic()
    proc = lab.run_sparkctl("provision", json_out=True, timeout=900)
    print(f"\n[ssh-port] provision with {TARGET} on {PORT}: {time.monotonic() - t0:.1f}s")
    doc = _json(proc)
    assert proc.returncode == 0, (doc.get("failures"), proc.stderr[-3000:])
    assert doc["hosts"][TARGET]["failed"] == 0 and doc["hosts"][TARGET]["unreachable"] == 0
    table = lab.exec(TARGET, "nft", "list", "table", "inet", "sparkctl").stdout
    live = _live_ssh_ports(table)
    assert live[0] == str(PORT) and "22" not in live, table
    # no revert fired: the loader unit is enabled and the revert timer is gone
    enabled = lab.exec(TARGET, "systemctl", "is-enabled", "sparkctl-firewall.service").stdout.strip()
    assert enabled == "enabled"
    timer = lab.exec(TARGET, "systemctl", "is-active", "sparkctl-firewall-revert.timer", check=False)
    assert timer.stdout.strip() != "active"
    # reachable on the port it was provisioned on, through sparkctl's own SSH too (the model's port)
    assert _ssh(lab, PORT, "hostname").stdout.strip() == TARGET
    from sparkctl.model import load_inventory
    from sparkctl.ssh.fleet import Fleet, targets_for

    targets = [t for t in targets_for(load_inventory(lab.inventory)) if t.name == TARGET]
    assert targets[0].port == PORT
    with Fleet(targets) as fleet:
        res = fleet.run("hostname\n", timeout=30)[TARGET]
    assert res.ok and res.stdout.strip() == TARGET, res.error
    # and the firewall lets SSH in from the management side only there: 22 is dropped now
    assert _ssh(lab, 22, "true").returncode == 255


def test_a_second_provision_changes_nothing(on_2222: Any) -> None:
    lab = on_2222
    t0 = time.monotonic()
    proc = lab.run_sparkctl("provision", json_out=True, timeout=900)
    print(f"\n[ssh-port] second provision: {time.monotonic() - t0:.1f}s")
    doc = _json(proc)
    assert proc.returncode == 0, doc.get("failures")
    changed = {h: s["changed"] for h, s in doc["hosts"].items()}
    assert all(n == 0 for n in changed.values()), changed
    assert _ssh(lab, PORT, "true").returncode == 0
