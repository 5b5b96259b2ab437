"""Day one on the lab: from the four management addresses and root's password to a serving site.

The module's site is made by exactly the command lines `make demo` runs (``sparkctl_lab.dayone``):
`sparkctl bootstrap` logs in as root with the lab's password file, takes the host keys the lab
recorded as vouched for and pins them in the site's known_hosts, and makes the operator with a key
generated for the run and passwordless sudo; `sparkctl init --yes` then logs in as that operator,
discovers the nodes over SSH and writes a site whose nodes, fabric, switch cabling, profile and
runtime equal the lab's own inventory. That site validates, provisions, stages, comes up ready and
goes down, as the operator through sudo. A re-run with nothing changed writes nothing; with a change
and no --yes it changes nothing and exits 2.

test_bootstrap_then_key_login holds bootstrap itself to its word (key login, sudo, a second run
changes nothing, the password in no output); test_init_after_bootstrap_logs_in_as_the_operator
takes bootstrap's pins from a known_hosts outside the site and the switch's key on first use.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from sparkctl_lab.dayone import OPERATOR, DayOne, lab_defaults, site_commands

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

COMPARED = ("profile", "runtime", "kit", "checkpoint", "mgmt", "fabric", "ports", "api_allow", "paths",
            "supervisor")


def _ok(proc: Any, what: str) -> None:
    tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{what} exited {proc.returncode}\n{tail}"


def _remove_operator(lab: Lab) -> None:
    for node in lab.nodes:
        lab.exec(node, "sh", "-c", f"rm -f /etc/sudoers.d/90-sparkctl-{OPERATOR}; "
                 f"if id -u {OPERATOR} >/dev/null 2>&1; then userdel -r {OPERATOR} 2>/dev/null; fi; true")


class DayOneRun:
    def __init__(self, lab: Lab, day: DayOne):
        self.lab, self.day = lab, day
        self.bootstrap_argv, self.init_argv = site_commands(day)

    @property
    def site(self) -> Path:
        return self.day.site

    def sparkctl(self, *args: str, json_out: bool = False, timeout: float = 1800) -> Any:
        # run_sparkctl puts `-i <lab inventory>` first; a later -i (ours) wins.
        return self.lab.run_sparkctl("-i", str(self.site), *(["--json"] if json_out else []), *args,
                                     timeout=timeout)

    def bootstrap(self) -> Any:
        return self.lab.run_sparkctl(*self.bootstrap_argv, json_out=True, timeout=300)

    def init(self, *extra: str, yes: bool = True) -> Any:
        argv = self.init_argv if yes else [a for a in self.init_argv if a != "--yes"]
        return self.lab.run_sparkctl(*argv, *extra, timeout=300)


@pytest.fixture(scope="module")
def day_one(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DayOneRun]:
    base = tmp_path_factory.mktemp("day-one")
    _remove_operator(lab)  # a fresh box: no operator yet
    handle = DayOneRun(lab, DayOne(inventory=lab.inventory, site=base / "site", workdir=base / "work"))
    yield handle
    lab.heal()
    lab.run_sparkctl("down")  # the lab's own inventory (root): the same units, whoever started them
    _remove_operator(lab)
    shutil.rmtree(base, ignore_errors=True)


def test_bootstrap_then_init_write_the_lab_site_and_it_validates(day_one: DayOneRun) -> None:
    lab = day_one.lab
    password = day_one.day.password_file.read_text().strip()
    assert not any(password in a for a in day_one.bootstrap_argv)
    boot = day_one.bootstrap()
    _ok(boot, "bootstrap")
    assert password not in boot.stdout + boot.stderr
    nodes = json.loads(boot.stdout)["nodes"]
    assert [(n["status"], n["host_key"], n["sudo"]) for n in nodes] == [
        ("changed", f"from {lab.known_hosts}", True)] * len(lab.nodes)

    proc = day_one.init("--json")
    _ok(proc, "init")
    doc = json.loads(proc.stdout)
    assert sorted(doc["written"]) == ["group_vars/all/sparkctl.yml", "hosts.yml", "known_hosts"]
    hows = {h["host"]: h["how"] for h in doc["host_keys"]}
    from sparkctl_lab import topology

    assert hows == {**{n: "pinned" for n in lab.nodes}, topology.SWITCH_NAME: f"from {lab.known_hosts}"}
    assert [n["name"] for n in doc["nodes"]] == lab.nodes
    _ok(day_one.sparkctl("validate"), "validate")

    from sparkctl.model import load_inventory

    ours, theirs = load_inventory(day_one.site), load_inventory(lab.inventory)
    assert (ours.name, ours.ssh_user) == (theirs.name, OPERATOR)
    for attr in COMPARED:
        mine, labs = getattr(ours, attr), getattr(theirs, attr)
        assert (mine.name if attr == "profile" else mine) == (labs.name if attr == "profile" else labs), attr
    assert [(n.name, n.rank, n.mgmt_ip, n.fabric_ports) for n in ours.nodes] == [
        (n.name, n.rank, n.mgmt_ip, n.fabric_ports) for n in theirs.nodes]
    assert ours.switch is not None and theirs.switch is not None
    assert (ours.switch.name, ours.switch.host, ours.switch.type, ours.switch.ports) == (
        theirs.switch.name, theirs.switch.host, theirs.switch.type, theirs.switch.ports)
    assert ours.secrets["api_key"].resolve() == theirs.secrets["api_key"].resolve()


def test_a_rerun_writes_nothing_and_a_change_needs_yes(day_one: DayOneRun) -> None:
    before = {p: p.read_bytes() for p in day_one.site.rglob("*") if p.is_file()}
    proc = day_one.init("--json", yes=False)
    _ok(proc, "init again")
    assert json.loads(proc.stdout)["written"] == []
    proc = day_one.init("--nvme-mount", "/srv", yes=False)  # another NVMe mount: paths and sizes change
    assert proc.returncode == 2, proc.stderr
    assert "refusing without a confirmation" in proc.stderr and "+  nvme_mount: /srv" in proc.stderr
    assert {p: p.read_bytes() for p in day_one.site.rglob("*") if p.is_file()} == before


def test_the_init_site_provisions_stages_and_serves(day_one: DayOneRun) -> None:
    _ok(day_one.sparkctl("provision", timeout=1800), "provision")
    _ok(day_one.sparkctl("stage", "all", timeout=1800), "stage all")
    up = day_one.sparkctl("up", "--yes", json_out=True)
    _ok(up, "up")
    assert json.loads(up.stdout)["result"] == "ready"
    status = day_one.sparkctl("status", json_out=True)
    _ok(status, "status")
    snap = json.loads(status.stdout)
    assert snap["verdict"] == "ready" and snap["reasons"] == []
    _ok(day_one.sparkctl("down"), "down")


# --- sparkctl bootstrap: first contact by password, then by key ------------------------------------

def test_bootstrap_then_key_login(lab: Lab, tmp_path: Path) -> None:
    """The lab's Sparks as fresh boxes (root and the lab's password, `sparkctl lab password`):
    bootstrap makes the operator with a new key and passwordless sudo on all four, pins their host
    keys (vouched for by the lab's known_hosts), and plain ssh then logs in by that key and runs
    `sudo -n true`. A second run changes nothing on any node; --require-gpu-runtime fails every node
    on the NVIDIA toolkit the lab does not have; the password is in no output."""
    import subprocess

    from sparkctl_lab import state

    password_file = state.root_password_file()
    password = password_file.read_text().strip()
    key, known = tmp_path / "id_ed25519", tmp_path / "known_hosts"
    addresses = [lab.mgmt_ip(n) for n in lab.nodes]
    argv = ["bootstrap", *addresses, "--login", "root", "--password-file", str(password_file),
            "--operator", OPERATOR, "--key", str(key), "--known-hosts", str(known),
            "--host-keys", str(lab.known_hosts), "--yes"]
    _remove_operator(lab)
    try:
        first = lab.run_sparkctl(*argv, "--generate-key", json_out=True, timeout=300)
        _ok(first, "bootstrap")
        doc = json.loads(first.stdout)
        assert [n["address"] for n in doc["nodes"]] == [f"{a}:22" for a in addresses]
        for node in doc["nodes"]:
            assert node["status"] == "changed", node
            assert node["steps"] == {"user": "changed", "authorized_keys": "changed", "sudoers": "changed"}
            assert node["host_key"] == f"from {lab.known_hosts}" and node["sudo"] is True
            assert node["docker"] == "running" and node["gpu_runtime"] == "missing"
        assert sorted(line.split()[0] for line in known.read_text().splitlines()) == sorted(addresses)

        for address in addresses:  # OpenSSH itself, with the pinned file and the new key only
            proc = subprocess.run(
                ["ssh", "-F", "/dev/null", "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                 "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
                 "-o", "ConnectTimeout=30", f"{OPERATOR}@{address}", "sudo -n true && id -un"],
                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
            assert (proc.returncode, proc.stdout.strip()) == (0, OPERATOR), proc.stderr

        again = lab.run_sparkctl(*argv, json_out=True, timeout=300)
        _ok(again, "bootstrap again")
        for node in json.loads(again.stdout)["nodes"]:
            assert node["status"] == "ok" and set(node["steps"].values()) == {"ok"}, node
            assert node["host_key"] == "pinned"
        human = lab.run_sparkctl(*argv, timeout=300)
        _ok(human, "bootstrap, the table")
        assert "0 changed, 4 unchanged, 0 failed" in " ".join(human.stdout.split())

        strict = lab.run_sparkctl(*argv, "--require-gpu-runtime", json_out=True, timeout=300)
        assert strict.returncode == 1, strict.stderr
        details = json.loads(strict.stdout)["error"]["details"]
        assert len(details) == 4 and all("NVIDIA container toolkit missing" in d for d in details)
        for proc in (first, again, human, strict):
            assert password not in proc.stdout + proc.stderr
    finally:
        _remove_operator(lab)


def test_init_after_bootstrap_logs_in_as_the_operator(lab: Lab, tmp_path: Path) -> None:
    """bootstrap's operator, key and known_hosts are all init needs: it logs in as the operator
    (no root), takes every host key as already pinned in bootstrap's file, and writes a site that
    validates, whose ansible_user is the operator with become and whose known_hosts is that file."""
    from sparkctl_lab import state, topology

    key, known = tmp_path / "id_ed25519", tmp_path / "known_hosts"
    addresses = [lab.mgmt_ip(n) for n in lab.nodes]
    _remove_operator(lab)
    try:
        _ok(lab.run_sparkctl("bootstrap", *addresses, "--login", "root", "--password-file",
                             str(state.root_password_file()), "--operator", OPERATOR, "--key", str(key),
                             "--known-hosts", str(known), "--host-keys", str(lab.known_hosts), "--yes",
                             "--generate-key", timeout=300), "bootstrap")
        (tmp_path / "lab-defaults.yml").write_text(
            yaml.safe_dump(lab_defaults(lab.inventory), sort_keys=False))
        site = tmp_path / "site"
        init = lab.run_sparkctl(
            "init", str(site), *(a for n in addresses for a in ("--node", n)), "--user", OPERATOR,
            "--key", str(key), "--known-hosts", str(known), "--trust-on-first-use",
            "--switch", lab.mgmt_ip(topology.SWITCH_NAME), "--switch-kind", "linux",
            "--switch-name", topology.SWITCH_NAME,
            *(a for n in lab.nodes for a in ("--switch-port", f"{n}=" + ",".join(
                topology.switch_port(n, h) for h in topology.HALVES))),
            *(a for h in topology.HALVES for a in ("--fabric", f"{h.netdev}={h.hca}")),
            *(a for h in topology.HALVES for a in ("--fabric-subnet", str(h.subnet))),
            "--profile", "lab", "--from", str(tmp_path / "lab-defaults.yml"), "--yes",
            json_out=True, timeout=300)
        _ok(init, "init as the operator")
        doc = json.loads(init.stdout)
        hows = {h["name"]: h["how"] for h in doc["host_keys"]}
        assert all(hows[a] == "pinned" for a in addresses), hows  # bootstrap's pins, read as they are
        assert str(known) in doc["written"]  # the switch's key, trusted on first use, joins that file
        assert [n["name"] for n in doc["nodes"]] == lab.nodes
        proc = lab.run_sparkctl("-i", str(site), "validate", "--json")
        _ok(proc, "validate")
        from sparkctl.model import load_inventory

        cluster = load_inventory(site)
        assert cluster.ssh_user == OPERATOR and cluster.known_hosts == known
    finally:
        _remove_operator(lab)
