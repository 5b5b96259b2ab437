"""`sparkctl init`'s logic (sparkctl.site): the proposal from canned discovery answers, the written
site validating, a PCIe half down named, host keys never pinned unconfirmed, the API key never in
the YAML, a re-run that writes nothing unconfirmed, a site that does not validate left unwritten."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import paramiko
import pytest
import yaml
from support.spark_discovery import FakeNodes, answer

from sparkctl.errors import EXIT_FAILED, EXIT_USAGE, SparkctlError
from sparkctl.model import load_inventory
from sparkctl.site import example_dir, facts, hostkeys, propose
from sparkctl.site import init as site_init
from sparkctl.ssh.targets import targets_for

REPO = Path(__file__).resolve().parents[2]
KEY = Path(__file__).resolve()  # any file stands for the private key: init only names it
ADDRESSES = [f"192.168.7.{10 + r}" for r in range(4)]
SWITCH = propose.SwitchOptions(address="192.168.7.2", kind="routeros", name="crs812")


def _request(site: Path, **kw: Any) -> site_init.Request:
    base: dict[str, Any] = dict(site_dir=site, nodes=[(a, 22) for a in ADDRESSES], trust_on_first_use=True,
                                switch=SWITCH, key=KEY)
    base.update(kw)
    return site_init.Request(**base)


def _tools(nodes: FakeNodes, **kw: Any) -> site_init.Tools:
    return site_init.Tools(scan=nodes.scan, discover=nodes.discover,
                           new_secret=lambda: "s3cr3t-api-key-value", **kw)


def _tree(site: Path) -> dict[str, bytes]:
    return {str(p.relative_to(site)): p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()}


@pytest.fixture
def nodes() -> FakeNodes:
    return FakeNodes.sparks()


# --- the proposal ------------------------------------------------------------------------------


def test_halves_of_one_port_are_grouped_by_bus_device_function() -> None:
    f = facts.from_answer("192.168.7.10", answer(0))
    ports = f.cx7_ports()
    assert [(p.index, [h.name for h in p.halves], p.up) for p in ports] == [
        (0, ["enp1s0f0np0", "enP2p1s0f0np0"], True),
        (1, ["enp1s0f1np1", "enP2p1s0f1np1"], False),
    ]
    nd, iface = f.mgmt() or (None, None)
    assert nd is not None and (nd.name, str(iface)) == ("enP7s7", "192.168.7.10/24")


def test_the_written_site_is_the_discovered_one_and_validates(tmp_path: Path, nodes: FakeNodes) -> None:
    site = tmp_path / "site-a"
    result = site_init.run(_request(site), _tools(nodes))
    assert sorted(result.written) == [".api_key", "group_vars/all/sparkctl.yml", "hosts.yml", "known_hosts"]
    cluster = load_inventory(site)
    assert cluster.name == "site-a" and cluster.profile.name == "r4-nvme"
    assert [(n.name, n.rank, str(n.mgmt_ip)) for n in cluster.nodes] == [
        (f"spark-{r}", r, ADDRESSES[r]) for r in range(4)]
    assert [(p.netdev, p.hca, str(p.address)) for p in cluster.nodes[2].fabric_ports] == [
        ("enp1s0f0np0", "rocep1s0f0", "10.77.0.12/24"), ("enP2p1s0f0np0", "roceP2p1s0f0", "10.77.1.12/24")]
    assert [n.nvme_gib for n in cluster.nodes] == [3600] * 4
    assert (str(cluster.mgmt.subnet), cluster.mgmt.interface) == ("192.168.7.0/24", "enP7s7")
    assert [str(s) for s in cluster.fabric.subnets] == ["10.77.0.0/24", "10.77.1.0/24"]
    sw = cluster.switch
    assert sw is not None
    assert (sw.name, sw.type, sw.host, sw.mtu) == ("crs812", "routeros", "192.168.7.2", 9216)
    assert sw.ports["spark-3"] == {"enp1s0f0np0": "qsfp56-dd-4-1", "enP2p1s0f0np0": "qsfp56-dd-4-1"}
    assert cluster.known_hosts == site / "known_hosts"
    assert cluster.ssh_user == "sparkctl"
    # how sparkctl's own SSH will reach the nodes: the key init logged in with, the pinned file
    target = targets_for(cluster)[0]
    assert (target.address, target.user, target.key_files, target.known_hosts) == (
        ADDRESSES[0], "sparkctl", (KEY,), site / "known_hosts")
    all_vars = yaml.safe_load((site / "hosts.yml").read_text())["all"]["vars"]
    assert all_vars["ansible_ssh_common_args"] == (
        "-o UserKnownHostsFile=known_hosts -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes")
    moved = tmp_path / "moved"  # named relative to the site, the pinned file moves with it
    shutil.copytree(site, moved)
    assert load_inventory(moved).known_hosts == moved / "known_hosts"
    # what discovery read is in the file as comments, for the admin
    hosts = (site / "hosts.yml").read_text()
    joined = re.sub(r"\n *# ", " ", hosts)  # a comment wrapped over several lines, as one
    assert ("dgx-spark-1, DGX OS 7.2.3, Ubuntu 24.04.3 LTS, kernel 6.11.0-1016-nvidia, NVIDIA driver "
            "580.95.05, BIOS 5.36_0ACUM018, 128 GiB memory") in joined
    assert "# port 0 PCIe half B (0002:01:00.0)" in hosts
    assert "ConnectX-7 firmware 28.45.1020" in hosts
    # discovery was asked to size the NVMe filesystem the paths sit on
    assert nodes.params == [{"mounts": ["/mnt/nvme"]}]
    # what the nodes cannot tell is the example's, and said so
    assert "sparkctl_runtime, sparkctl_kit, sparkctl_checkpoint as in the shipped example" in result.notes[-1]


def test_the_written_files_pass_the_repositorys_yamllint(tmp_path: Path, nodes: FakeNodes) -> None:
    """A site kept under inventory/<site> is linted with the rest of the repository (`yamllint -s .`)."""
    from yamllint import linter
    from yamllint.config import YamlLintConfig

    site = tmp_path / "site"
    site_init.run(_request(site), _tools(nodes))
    config = YamlLintConfig(file=str(REPO / ".yamllint"))
    for rel in ("hosts.yml", "group_vars/all/sparkctl.yml"):
        found = [f"{p.line}: {p.desc} ({p.rule})" for p in linter.run((site / rel).read_text(), config)]
        assert found == [], (rel, found)


def test_a_node_with_one_pcie_half_down_is_named(tmp_path: Path) -> None:
    nodes = FakeNodes.sparks()
    nodes.answers[ADDRESSES[2]] = answer(2, down=["enP2p1s0f0np0"])
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(tmp_path / "site"), _tools(nodes))
    assert err.value.exit_code == EXIT_FAILED
    (detail,) = err.value.details
    assert detail.startswith("spark-2 (192.168.7.12): ConnectX-7 port 0 PCIe half B enP2p1s0f0np0")
    assert "roceP2p1s0f0" in detail and "no carrier" in detail
    assert not (tmp_path / "site" / "hosts.yml").exists()


def test_a_node_that_does_not_answer_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    nodes = FakeNodes.sparks()
    nodes.answers[ADDRESSES[1]] = "unreachable: connection refused by 192.168.7.11:22"
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(tmp_path / "site"), _tools(nodes))
    assert err.value.exit_code == EXIT_FAILED and "1 of 4 node(s) could not be read" in err.value.message
    assert err.value.details == [
        "spark-1 (192.168.7.11:22): unreachable: connection refused by 192.168.7.11:22"]
    assert not (tmp_path / "site").exists()


def test_a_management_address_on_no_interface_asks_for_the_flags(tmp_path: Path) -> None:
    nodes = FakeNodes.sparks()
    for a in ADDRESSES:  # reached through NAT: the nodes hold other addresses
        doc = dict(nodes.answers[a])
        doc["netdevs"] = [{**doc["netdevs"][0], "ipv4": ["172.16.0.5/24"]}, *doc["netdevs"][1:]]
        nodes.answers[a] = doc
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(tmp_path / "site"), _tools(nodes))
    assert any("give --mgmt-interface and --mgmt-subnet" in d for d in err.value.details)
    site_init.run(_request(tmp_path / "site", mgmt_interface="enP7s7", mgmt_subnet="192.168.7.0/24"),
                  _tools(nodes))
    assert str(load_inventory(tmp_path / "site").mgmt.subnet) == "192.168.7.0/24"


def test_nodes_that_differ_in_identity_are_noted(tmp_path: Path) -> None:
    nodes = FakeNodes.sparks()
    odd = answer(2)
    odd["nvidia_driver"] = "580.82.07"
    nodes.answers[ADDRESSES[2]] = odd
    result = site_init.run(_request(tmp_path / "site"), _tools(nodes))
    assert ("the nodes differ in NVIDIA driver: spark-0 580.95.05, spark-1 580.95.05, spark-2 580.82.07, "
            "spark-3 580.95.05 — `sparkctl preflight` requires one identity") in result.notes
    assert not any("differ in DGX OS" in n or "differ in kernel" in n for n in result.notes)


def test_switch_ports_without_lldp_must_be_given(tmp_path: Path) -> None:
    nodes = FakeNodes.sparks(lldp=False)
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(tmp_path / "site"), _tools(nodes))
    assert len(err.value.details) == 4
    assert "spark-0: which switch port its cable goes to is unknown (no LLDP answer" in err.value.details[0]
    asked: list[tuple[str, list[str]]] = []

    def answer_port(node: str, netdevs: Any) -> str:
        asked.append((node, list(netdevs)))
        return f"sfp{node[-1]}a,sfp{node[-1]}b"

    site_init.run(_request(tmp_path / "asked"), _tools(nodes, ask_port=answer_port))
    assert asked[0] == ("spark-0", ["enp1s0f0np0", "enP2p1s0f0np0"]) and len(asked) == 4
    cluster = load_inventory(tmp_path / "asked")
    assert cluster.switch is not None
    assert cluster.switch.ports["spark-3"] == {"enp1s0f0np0": "sfp3a", "enP2p1s0f0np0": "sfp3b"}
    ports = {f"spark-{r}": (f"ether{r + 1}",) for r in range(4)}
    sw = propose.SwitchOptions(address="192.168.7.2", kind="routeros", name="crs812", ports=ports)
    site_init.run(_request(tmp_path / "site", switch=sw), _tools(nodes))
    cluster = load_inventory(tmp_path / "site")
    assert cluster.switch is not None
    assert cluster.switch.ports["spark-1"] == {"enp1s0f0np0": "ether2", "enP2p1s0f0np0": "ether2"}


# --- secrets ---------------------------------------------------------------------------------


def test_the_api_key_is_a_0600_file_never_in_the_yaml(tmp_path: Path, nodes: FakeNodes) -> None:
    site = tmp_path / "site"
    result = site_init.run(_request(site), _tools(nodes))
    key_file = site / ".api_key"
    assert key_file.read_text().strip() == "s3cr3t-api-key-value"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    for rel, body in _tree(site).items():
        if rel != ".api_key":
            assert b"s3cr3t-api-key-value" not in body, rel
    assert "s3cr3t" not in result.diff
    doc = yaml.safe_load((site / "group_vars/all/sparkctl.yml").read_text())
    assert doc["sparkctl_secrets"] == {"api_key": {"file": ".api_key"}}
    cluster = load_inventory(site)
    assert cluster.secrets["api_key"].resolve() == "s3cr3t-api-key-value"


def test_ansible_reads_no_host_but_the_sites_from_its_directory(tmp_path: Path, nodes: FakeNodes) -> None:
    """ansible-playbook is given the site directory: every file in it that is not hidden or ignored
    by ansible.cfg is an inventory source (a bare token in a file is a host to the INI plugin)."""
    site = tmp_path / "site"
    site_init.run(_request(site), _tools(nodes))
    tool = Path(sys.executable).parent / "ansible-inventory"
    proc = subprocess.run([str(tool), "-i", str(site), "--list"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}, check=False)
    assert proc.returncode == 0, proc.stderr
    hosts = set(json.loads(proc.stdout)["_meta"]["hostvars"])
    assert hosts == {"spark-0", "spark-1", "spark-2", "spark-3", "crs812"}
    assert "s3cr3t" not in proc.stdout + proc.stderr


def test_with_vault_the_key_is_a_vault_encrypted_variable(tmp_path: Path, nodes: FakeNodes,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    password = tmp_path / "vault-pass"
    password.write_text("correct horse battery staple\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(password))
    site = tmp_path / "site"
    result = site_init.run(_request(site, vault=True), _tools(nodes))
    assert "group_vars/all/vault.yml" in result.written and not (site / ".api_key").exists()
    vaulted = site / "group_vars/all/vault.yml"
    assert vaulted.read_text().startswith("$ANSIBLE_VAULT;1.1;AES256")
    assert stat.S_IMODE(vaulted.stat().st_mode) == 0o600
    assert all(b"s3cr3t-api-key-value" not in body for body in _tree(site).values())
    doc = yaml.safe_load((site / "group_vars/all/sparkctl.yml").read_text())
    assert doc["sparkctl_secrets"] == {"api_key": {"var": "vault_sparkctl_api_key"}}
    assert load_inventory(site).secrets["api_key"].resolve() == "s3cr3t-api-key-value"
    assert site_init.run(_request(site, vault=True), _tools(nodes)).written == []  # the vault file is kept
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE")
    monkeypatch.setattr("sparkctl.model.vault.vault_password_files", lambda explicit=None: [])
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(tmp_path / "other", vault=True), _tools(nodes))
    assert err.value.exit_code == EXIT_USAGE and "--vault needs the vault password" in err.value.message


def test_a_given_api_key_file_is_referenced_not_copied(tmp_path: Path, nodes: FakeNodes) -> None:
    own = tmp_path / "my-key"
    own.write_text("my-own-key\n")
    site = tmp_path / "site"
    site_init.run(_request(site, api_key_file=own), _tools(nodes))
    assert not (site / ".api_key").exists()
    assert load_inventory(site).secrets["api_key"].describe() == f"file:{own}"
    assert all(b"my-own-key" not in body for body in _tree(site).values())


# --- host keys -------------------------------------------------------------------------------


def test_a_host_key_is_not_pinned_without_confirmation(tmp_path: Path, nodes: FakeNodes) -> None:
    site = tmp_path / "site"
    asked: list[str] = []

    def nobody(key: hostkeys.HostKey) -> bool | None:
        asked.append(key.fingerprint)
        return None

    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(site, trust_on_first_use=False), _tools(nodes, ask_key=nobody))
    assert err.value.exit_code == EXIT_USAGE
    assert "host key of 192.168.7.10" in err.value.message and "not confirmed" in err.value.message
    assert asked and asked[0].startswith("SHA256:")
    assert nodes.discovered == [] and not site.exists()
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(site, trust_on_first_use=False), _tools(nodes, ask_key=lambda key: False))
    assert "refused" in err.value.message and not site.exists()


def test_confirmed_keys_are_pinned_and_a_changed_key_is_refused(tmp_path: Path, nodes: FakeNodes) -> None:
    site = tmp_path / "site"
    site_init.run(_request(site, trust_on_first_use=False), _tools(nodes, ask_key=lambda key: True))
    pinned = hostkeys.read(site / "known_hosts")
    for a in ADDRESSES:
        assert hostkeys.pinned(pinned, a)[0].blob == nodes.key(a).get_base64()
    nodes.keys[ADDRESSES[1]] = paramiko.ECDSAKey.generate()  # reinstalled, or an impostor
    before = _tree(site)
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(site, yes=True), _tools(nodes))
    assert err.value.exit_code == EXIT_FAILED
    assert "host key of 192.168.7.11" in err.value.message and "does not match" in err.value.message
    assert _tree(site) == before


def test_host_keys_from_a_file_are_pinned_without_scanning(tmp_path: Path, nodes: FakeNodes) -> None:
    given = tmp_path / "bootstrap_known_hosts"
    given.write_text(nodes.known_hosts_text(*ADDRESSES, "192.168.7.2"))
    site = tmp_path / "site"
    result = site_init.run(_request(site, trust_on_first_use=False, host_keys=given), _tools(nodes))
    assert nodes.scanned == []
    assert {h["how"] for h in result.host_keys} == {f"from {given}"}
    given.write_text(nodes.known_hosts_text(*ADDRESSES[:3]))
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(tmp_path / "other", trust_on_first_use=False, host_keys=given), _tools(nodes))
    assert err.value.exit_code == EXIT_USAGE and "has no host key for 192.168.7.13" in err.value.message


# --- re-running --------------------------------------------------------------------------------


def test_a_rerun_shows_the_diff_and_changes_nothing_unconfirmed(tmp_path: Path, nodes: FakeNodes) -> None:
    site = tmp_path / "site"
    site_init.run(_request(site), _tools(nodes))
    before = _tree(site)
    again = site_init.run(_request(site), _tools(nodes))  # same answers: nothing to write
    assert again.written == [] and _tree(site) == before
    shown: list[str] = []

    def no_terminal(diff: str) -> bool | None:
        shown.append(diff)
        return None

    nodes.answers[ADDRESSES[3]] = answer(3, nvme_gib=1800)
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(site), _tools(nodes, ask_write=no_terminal))
    assert err.value.exit_code == EXIT_USAGE and err.value.details == ["would change hosts.yml"]
    assert "-          sparkctl_nvme_gib: 3600\n+          sparkctl_nvme_gib: 1800" in shown[0]
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(site), _tools(nodes, ask_write=lambda diff: False))
    assert err.value.exit_code == EXIT_FAILED
    assert _tree(site) == before
    done = site_init.run(_request(site, yes=True), _tools(nodes))
    assert done.written == ["hosts.yml"]
    assert load_inventory(site).nodes[3].nvme_gib == 1800
    assert (site / ".api_key").read_bytes() == before[".api_key"]  # the key is kept


def test_a_site_that_does_not_validate_is_left_under_a_temporary_name(tmp_path: Path,
                                                                      nodes: FakeNodes) -> None:
    site = tmp_path / "site"
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(site, switch=None), _tools(nodes))  # four nodes and no switch
    assert err.value.exit_code == EXIT_USAGE
    assert any("no switch" in d for d in err.value.details)
    assert not site.exists()
    (staged,) = [p for p in tmp_path.iterdir() if p.name.startswith(".site.init-")]
    assert (staged / "hosts.yml").is_file() and str(staged) in (err.value.hint or "")


# --- defaults and the lab ------------------------------------------------------------------------


def _lab_answer(rank: int) -> dict[str, Any]:
    """A lab node: veth fabric links (no driver, no PCI, no RDMA device), mgmt on enP7s7."""
    doc = answer(rank, lldp=False)
    veth = {"driver": None, "pci": None, "hca": None, "hca_fw": None, "state": "up", "carrier": True,
            "admin_up": True}
    doc["netdevs"] = [
        doc["netdevs"][0] | {"ipv4": [f"10.250.0.{10 + rank}/24"]},
        {**answer(rank)["netdevs"][1], **veth, "name": "enp1s0f0np0"},
        {**answer(rank)["netdevs"][1], **veth, "name": "enP2p1s0f0np0"},
    ]
    doc["filesystems"] = []
    return doc


def test_a_defaults_file_and_named_fabric_ports_give_the_lab_site(tmp_path: Path) -> None:
    nodes = FakeNodes()
    for r in range(4):
        nodes.answers[f"10.250.0.{10 + r}"] = _lab_answer(r)
    ck = tmp_path / "checkpoint"
    ck.mkdir()
    defaults = tmp_path / "lab.yml"
    defaults.write_text(yaml.safe_dump({
        "sparkctl_runtime": {"kind": "lab"},
        "sparkctl_checkpoint": {"source": "dir", "path": str(ck), "location": "controller"},
        "sparkctl_kit": None,
        "sparkctl_fabric": {"subnets": ["10.251.0.0/24", "10.251.1.0/24"], "mtu": 9000},
        "ansible_user": "root", "ansible_become": False, "ansible_python_interpreter": "/usr/bin/python3",
        "sparkctl_switch_ports": {f"spark-{r}": {"enp1s0f0np0": f"s{r}a", "enP2p1s0f0np0": f"s{r}b"}
                                  for r in range(4)},
    }))
    sw = propose.SwitchOptions(address="10.250.0.2", kind="linux", name="lab-switch")
    req = _request(tmp_path / "lab", nodes=[(f"10.250.0.{10 + r}", 22) for r in range(4)], switch=sw,
                   profile="lab", defaults_file=defaults,
                   fabric=[("enp1s0f0np0", "rocep1s0f0"), ("enP2p1s0f0np0", "roceP2p1s0f0")])
    result = site_init.run(req, _tools(nodes))
    cluster = load_inventory(tmp_path / "lab")
    assert (cluster.profile.name, cluster.runtime.kind, cluster.ssh_user) == ("lab", "lab", "root")
    assert [str(p.address) for p in cluster.nodes[1].fabric_ports] == ["10.251.0.11/24", "10.251.1.11/24"]
    assert cluster.switch is not None and cluster.switch.ports["spark-2"]["enP2p1s0f0np0"] == "s2b"
    assert any("no filesystem mounted at /mnt/nvme" in n for n in result.notes)


def test_a_defaults_file_with_an_unknown_key_is_refused_before_any_contact(tmp_path: Path,
                                                                              nodes: FakeNodes) -> None:
    defaults = tmp_path / "d.yml"
    defaults.write_text("sparkctl_profil: lab\n")
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(tmp_path / "site", defaults_file=defaults), _tools(nodes))
    assert err.value.exit_code == EXIT_USAGE and "unknown key sparkctl_profil" in err.value.message
    assert nodes.scanned == []


def test_a_defaults_file_value_of_the_wrong_shape_is_named_by_validation(tmp_path: Path,
                                                                        nodes: FakeNodes) -> None:
    defaults = tmp_path / "d.yml"
    defaults.write_text("sparkctl_paths: /mnt/nvme\n")
    with pytest.raises(SparkctlError) as err:
        site_init.run(_request(tmp_path / "site", defaults_file=defaults), _tools(nodes))
    assert err.value.exit_code == EXIT_USAGE
    assert any(d.startswith("sparkctl_paths") for d in err.value.details), err.value.details
    assert nodes.params == [{"mounts": ["/mnt/nvme"]}]


def test_the_example_is_copied_and_validates(tmp_path: Path) -> None:
    site = tmp_path / "ex"
    result = site_init.example(site_init.Request(site_dir=site), site_init.Tools())
    src = example_dir()
    shipped = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    assert {"hosts.yml", "group_vars/all/sparkctl.yml"} <= set(shipped)
    assert sorted(result.written) == shipped
    for rel in shipped:
        assert (site / rel).read_bytes() == (src / rel).read_bytes()
    assert load_inventory(site).name == "example"
