"""`sparkctl init` on what the lab's nodes report gives the lab's own inventory: with the lab's
management addresses, its known_hosts, its fabric names, switch ports and a --from file made of the
lab inventory's runtime, kit and checkpoint, the site init writes loads to the same cluster as the
one `sparkctl lab up` writes (the lab test test_day_one_lab.py does the same over real SSH)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.spark_discovery import FakeNodes, answer

from sparkctl.cli import init_cmd
from sparkctl.errors import EXIT_OK
from sparkctl.model import load_inventory
from sparkctl.model.cluster import Cluster
from sparkctl.site import bootstrap, propose
from sparkctl.site import init as site_init
from sparkctl.site.report import NodeResult
from sparkctl_lab import dayone
from sparkctl_lab import inventory as lab_inventory
from sparkctl_lab import state as lab_state
from sparkctl_lab import topology as topo
from sparkctl_lab.dayone import OPERATOR, DayOne, site_commands
from sparkctl_lab.inventory import LabInventory

FROM_LAB = ("sparkctl_runtime", "sparkctl_kit", "sparkctl_checkpoint", "sparkctl_supervisor",
            "sparkctl_ports", "sparkctl_profile_overrides", "sparkctl_autostart")
COMPARED = ("runtime", "kit", "checkpoint", "mgmt", "fabric", "ports", "api_allow", "paths", "supervisor")


def _lab_node(rank: int) -> dict[str, Any]:
    """A lab node as nodeside.discover sees it: veth fabric links (no driver, PCI address or RDMA
    device) under the Spark's names, the management address on enP7s7."""
    node = topo.node_name(rank)
    doc = answer(rank, lldp=False)
    mgmt = doc["netdevs"][0] | {"name": topo.MGMT_IFACE,
                                "ipv4": [f"{topo.mgmt_ip(node)}/{topo.MGMT_SUBNET.prefixlen}"]}
    veth = {"driver": None, "pci": None, "hca": None, "hca_fw": None, "state": "up", "carrier": True,
            "admin_up": True, "mtu": topo.LINK_DEFAULT_MTU, "ipv4": []}
    doc["netdevs"] = [mgmt, *({**doc["netdevs"][1], **veth, "name": h.netdev} for h in topo.HALVES)]
    doc["filesystems"] = []
    return doc


def _lab(tmp_path: Path) -> tuple[FakeNodes, lab_inventory.LabInventory]:
    """The lab's nodes as init sees them, and the inventory `sparkctl lab up` writes for them."""
    nodes = FakeNodes()
    for rank, node in enumerate(topo.node_names()):
        nodes.answers[str(topo.mgmt_ip(node))] = _lab_node(rank)
    key, api = tmp_path / "id_lab", tmp_path / "api_key"
    key.write_text("the lab's private key\n")
    api.write_text("lab-secret\n")
    key.chmod(0o600)
    api.chmod(0o600)
    (tmp_path / "checkpoint").mkdir()
    lab = lab_inventory.LabInventory(
        inventory_dir=tmp_path / "inventory" / "lab", private_key=key, api_key_file=api,
        checkpoint_dir=tmp_path / "checkpoint",
        host_keys={m: f"{k.get_name()} {k.get_base64()}"
                   for m, k in ((m, nodes.key(str(topo.mgmt_ip(m)))) for m in topo.machines())},
        nvme_gib={}, kit_url="https://example.invalid/kit.git",
        kit_commit="5d2a9e4c7b1f80a3d6e9c2b4f7a1d8e3c6b9f2a5",
    )
    lab_inventory.write(lab)
    return nodes, lab


def test_init_on_the_labs_nodes_writes_the_labs_inventory(tmp_path: Path) -> None:
    nodes, lab = _lab(tmp_path)
    key, api = lab.private_key, lab.api_key_file
    lab_vars = yaml.safe_load((lab.inventory_dir / "group_vars/all/sparkctl.yml").read_text())
    lab_all = yaml.safe_load((lab.inventory_dir / "hosts.yml").read_text())["all"]["vars"]
    defaults = {k: lab_vars[k] for k in FROM_LAB if k in lab_vars}
    defaults["ansible_python_interpreter"] = lab_all["ansible_python_interpreter"]
    (tmp_path / "lab-defaults.yml").write_text(yaml.safe_dump(defaults))

    switch = propose.SwitchOptions(
        address=str(topo.mgmt_ip(topo.SWITCH_NAME)), kind="linux", name=topo.SWITCH_NAME,
        ports={n: tuple(topo.switch_port(n, h) for h in topo.HALVES) for n in topo.node_names()})
    req = site_init.Request(
        site_dir=tmp_path / "site", nodes=[(str(topo.mgmt_ip(n)), 22) for n in topo.node_names()],
        user="root", key=key, host_keys=lab.known_hosts, switch=switch, profile="lab",
        cluster_name=topo.CLUSTER_NAME, fabric=[(h.netdev, h.hca) for h in topo.HALVES],
        fabric_subnets=[str(h.subnet) for h in topo.HALVES], api_key_file=api,
        defaults_file=tmp_path / "lab-defaults.yml", yes=True)
    site_init.run(req, site_init.Tools(scan=nodes.scan, discover=nodes.discover))

    ours, theirs = load_inventory(tmp_path / "site"), load_inventory(lab.inventory_dir)
    assert (ours.name, ours.profile.name, ours.ssh_user) == (
        theirs.name, theirs.profile.name, theirs.ssh_user)
    _same_cluster(ours, theirs)
    assert nodes.scanned == []  # every key came from the lab's known_hosts


def _same_cluster(ours: Cluster, theirs: Cluster) -> None:
    for attr in COMPARED:
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert [(n.name, n.rank, n.mgmt_ip, n.fabric_ports) for n in ours.nodes] == [
        (n.name, n.rank, n.mgmt_ip, n.fabric_ports) for n in theirs.nodes]
    assert ours.switch is not None and theirs.switch is not None
    assert (ours.switch.name, ours.switch.host, ours.switch.type, ours.switch.mtu, ours.switch.ports) == (
        theirs.switch.name, theirs.switch.host, theirs.switch.type, theirs.switch.mtu, theirs.switch.ports)
    assert ours.secrets["api_key"].resolve() == theirs.secrets["api_key"].resolve() == "lab-secret"


# --- the demo's and the lab test's command lines (sparkctl_lab.dayone) ------------------------------


@pytest.fixture
def day(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeNodes, LabInventory, DayOne]]:
    """The lab's nodes (faked), its inventory and root password file, and a day-one run beside them;
    init's SSH goes to the fake nodes, bootstrap's state record to the test's directory."""
    nodes, lab = _lab(tmp_path)
    monkeypatch.setenv("SPARKCTL_LAB_DIR", str(tmp_path / "lab-dir"))
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "lab-dir").mkdir()
    lab_state.root_password_file().write_text(PASSWORD + "\n")
    lab_state.controller_key().write_text("the lab controller's private key\n")  # the switch's login
    lab_state.controller_key().chmod(0o600)
    real = init_cmd.make_tools

    def tools(json_out: bool) -> site_init.Tools:
        t = real(json_out)
        t.scan, t.discover = nodes.scan, nodes.discover
        return t

    monkeypatch.setattr(init_cmd, "make_tools", tools)
    yield nodes, lab, DayOne(inventory=lab.inventory_dir, site=tmp_path / "site",
                             workdir=tmp_path / "day-one")


PASSWORD = "lab root password 7f3a"


def _flag(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, (flag, argv)
    return argv[argv.index(flag) + 1]


def test_bootstrap_line_names_the_password_file_and_the_labs_host_keys(
        day: tuple[FakeNodes, LabInventory, DayOne], run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The password travels by file name only; the lab's known_hosts vouches for the keys, which are
    pinned in the site's known_hosts; the operator's key is generated once, in the run's directory.
    The line, through the real CLI, reaches bootstrap as that request."""
    _, lab, d = day
    argv = site_commands(d)[0]
    assert argv[:5] == ["bootstrap", *(str(topo.mgmt_ip(n)) for n in topo.node_names())]
    assert _flag(argv, "--password-file") == str(lab_state.root_password_file())
    assert not any(PASSWORD in a for a in argv)
    assert _flag(argv, "--login") == "root" and _flag(argv, "--operator") == OPERATOR
    assert _flag(argv, "--host-keys") == str(lab.known_hosts)
    assert _flag(argv, "--known-hosts") == str(d.site / "known_hosts")
    assert _flag(argv, "--key") == str(d.workdir / "id_ed25519") and "--generate-key" in argv
    assert argv[-1] == "--yes" and d.site.is_dir()  # bootstrap's known_hosts has its directory

    seen: list[bootstrap.Request] = []

    def run(req: bootstrap.Request, ask: Any, progress: Any = None) -> list[NodeResult]:
        seen.append(req)
        return [NodeResult(a, status="changed", host_key=f"from {req.host_keys}", sudo=True)
                for a in req.addresses]

    monkeypatch.setattr(bootstrap, "run", run)
    res = run_cli(*argv)
    assert res.code == EXIT_OK, res.err
    (req,) = seen
    assert (req.login, req.operator, req.password.reveal()) == ("root", OPERATOR, PASSWORD)
    assert (req.host_keys, req.known_hosts) == (lab.known_hosts, d.site / "known_hosts")
    assert [a.host for a in req.addresses] == [str(topo.mgmt_ip(n)) for n in topo.node_names()]
    assert req.key.private == d.key and d.key.is_file() and req.key.public.startswith("ssh-ed25519 ")
    assert "--generate-key" not in d.bootstrap()  # a second run uses the pair the first one made
    assert PASSWORD not in res.out + res.err


def test_init_line_after_bootstrap_writes_the_labs_cluster_as_the_operator(
        day: tuple[FakeNodes, LabInventory, DayOne], run_cli: Any) -> None:
    """After bootstrap pinned the nodes' keys in the site's known_hosts and made the operator's key,
    init's line (through the real CLI) takes those pins, the switch's key from the lab's known_hosts,
    and writes a site that loads to the lab inventory's cluster, the operator as its SSH user."""
    nodes, lab, d = day
    argv = site_commands(d)[1]
    assert argv[:2] == ["init", str(d.site)] and argv[-1] == "--yes"
    assert _flag(argv, "--user") == OPERATOR and _flag(argv, "--key") == str(d.key)
    assert _flag(argv, "--host-keys") == str(lab.known_hosts)
    assert _flag(argv, "--from") == str(d.defaults_file)
    assert _flag(argv, "--api-key-file") == str(lab.api_key_file)
    assert yaml.safe_load(d.defaults_file.read_text())["sparkctl_runtime"] == yaml.safe_load(
        (lab.inventory_dir / "group_vars/all/sparkctl.yml").read_text())["sparkctl_runtime"]
    addresses = [str(topo.mgmt_ip(n)) for n in topo.node_names()]
    d.key.write_text("the operator's private key\n")  # what bootstrap --generate-key left (0600)
    d.key.chmod(0o600)
    d.site_known_hosts.write_text(nodes.known_hosts_text(*addresses))  # what bootstrap pinned

    res = run_cli("--json", *argv)
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)
    hows = {h["name"]: h["how"] for h in doc["host_keys"]}
    assert hows == {**{a: "pinned" for a in addresses},
                    str(topo.mgmt_ip(topo.SWITCH_NAME)): f"from {lab.known_hosts}"}
    assert sorted(doc["written"]) == ["group_vars/all/sparkctl.yml", "hosts.yml", "known_hosts"]
    assert nodes.scanned == []
    res = run_cli("-i", str(d.site), "validate")
    assert res.code == EXIT_OK, res.err

    ours, theirs = load_inventory(d.site), load_inventory(lab.inventory_dir)
    assert (ours.name, ours.profile.name, ours.ssh_user) == (theirs.name, theirs.profile.name, OPERATOR)
    _same_cluster(ours, theirs)
    hosts = yaml.safe_load((d.site / "hosts.yml").read_text())["all"]
    assert "ansible_become" not in hosts["vars"]  # under sparks: all's would reach the controller's tasks
    assert hosts["children"]["sparks"]["vars"]["ansible_become"] is True
    switch = hosts["children"]["switches"]["hosts"][topo.SWITCH_NAME]
    assert (switch["ansible_user"], switch["ansible_ssh_private_key_file"]) == (
        "root", str(lab_state.controller_key()))
    assert {h["ansible_ssh_private_key_file"] for h in hosts["children"]["sparks"]["hosts"].values()} == {
        str(d.key)}
    assert run_cli("--json", *argv).out and json.loads(run_cli("--json", *argv).out)["written"] == []


def test_the_module_prints_each_line_nul_separated_and_refuses_without_the_lab(
        day: tuple[FakeNodes, LabInventory, DayOne], capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m sparkctl_lab.dayone` (what scripts/demo.sh reads) prints the same lines; without
    the lab's files it names the missing one and exits 2 (the demo stops there)."""
    _, lab, d = day
    common = ["--inventory", str(lab.inventory_dir), "--site", str(d.site), "--workdir", str(d.workdir)]
    for name in ("bootstrap", "init"):
        assert dayone.main([*common, name]) == 0
        out = capsys.readouterr().out
        assert out.endswith("\0") and out[:-1].split("\0") == d.command(name)
    lab_state.root_password_file().unlink()
    assert dayone.main([*common, "bootstrap"]) == 2
    assert f"{lab_state.root_password_file()} is missing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        dayone.main([*common, "provision"])


DEMO = Path(__file__).resolve().parents[2] / "scripts" / "demo.sh"


def _demo_function(name: str) -> str:
    text = DEMO.read_text()
    start = text.index(f"\n{name}() {{\n") + 1
    return text[start:text.index("\n}\n", start) + 3]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_demo_runs_the_same_lines_on_its_own_site_and_stops_without_one(
        day: tuple[FakeNodes, LabInventory, DayOne], tmp_path: Path) -> None:
    """scripts/demo.sh's day_one, run by bash with a recording `sparkctl` on PATH, hands sparkctl
    exactly dayone's arguments (the password by file name only); a failing one fails the step and
    says the demo has no site. The demo's steps: lab up, bootstrap, init, validate, then every
    `sparkctl -i` on the site, never on the lab's inventory."""
    _, lab, d = day
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sparkctl"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done >"$RECORD"\n'
                    'exit "${FAKE_RC:-0}"\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
    script = (f"set -uo pipefail\nout={shlex.quote(str(tmp_path / 'out'))}; mkdir -p \"$out\"\n"
              f"lab_inv={shlex.quote(str(lab.inventory_dir))}\nsite={shlex.quote(str(d.site))}\n"
              f"{_demo_function('day_one')}\nday_one \"$1\"\n")
    for name, rc in (("bootstrap", 0), ("init", 0), ("init", 3)):
        record = tmp_path / f"{name}.args"
        proc = subprocess.run(["bash", "-c", script, "demo", name], capture_output=True, text=True,
                              cwd=DEMO.parents[1], env={**env, "RECORD": str(record), "FAKE_RC": str(rc)},
                              timeout=120, check=False)
        assert proc.returncode == rc, proc.stderr
        assert record.read_text()[:-1].split("\0") == DayOne(
            inventory=lab.inventory_dir, site=d.site, workdir=tmp_path / "out" / "day-one").command(name)
        assert PASSWORD not in record.read_text() + proc.stdout + proc.stderr
        assert ("no site in" in proc.stderr) == (rc != 0)

    steps = [line.split()[1] for line in DEMO.read_text().splitlines() if line.startswith("step ")]
    assert steps[:4] == ["lab-up", "bootstrap", "init", "validate"]
    assert '-i "$lab_inv"' not in DEMO.read_text() and "inventory/lab" not in _demo_function("step")
