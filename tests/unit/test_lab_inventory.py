"""The lab inventory: the example's format exactly, the lab's values, loadable by the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl_lab import inventory as lab_inventory
from sparkctl_lab import topology as topo

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example"


@pytest.fixture
def lab_inv(tmp_path: Path) -> lab_inventory.LabInventory:
    key = tmp_path / "id_ed25519"
    key.write_text("not a real key\n")
    api = tmp_path / "api_key"
    api.write_text("secret\n")
    api.chmod(0o600)
    return lab_inventory.LabInventory(
        inventory_dir=tmp_path / "inventory" / "lab",
        private_key=key,
        api_key_file=api,
        checkpoint_dir=tmp_path / "checkpoint",
        host_keys={
            m: f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{i:040d}" for i, m in enumerate(topo.machines())
        },
        nvme_gib={"spark-0": 4, "spark-1": 4, "spark-2": 4, "spark-3": 2},
        kit_url=str(tmp_path / "kit"),
        kit_commit="0" * 40,
    )


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _hosts(doc: dict[str, Any], group: str) -> dict[str, Any]:
    hosts: dict[str, Any] = doc["all"]["children"][group]["hosts"]
    return hosts


def test_same_files_and_keys_as_the_example(lab_inv: lab_inventory.LabInventory) -> None:
    lab_inventory.write(lab_inv)
    d = lab_inv.inventory_dir
    ex_vars, lab_vars = (
        _load(EXAMPLE / "group_vars/all/sparkctl.yml"),
        _load(d / "group_vars/all/sparkctl.yml"),
    )
    assert set(lab_vars) == set(ex_vars)
    ex_hosts, lab_hosts = _load(EXAMPLE / "hosts.yml"), _load(d / "hosts.yml")
    assert set(lab_hosts["all"]["children"]) == set(ex_hosts["all"]["children"])
    ex_node_keys = set(next(iter(_hosts(ex_hosts, "sparks").values())))
    for node, entry in _hosts(lab_hosts, "sparks").items():
        assert set(entry) <= ex_node_keys, node
    ex_switch = next(iter(_hosts(ex_hosts, "switches").values()))
    lab_switch = _hosts(lab_hosts, "switches")["lab-switch"]
    assert {k for k in lab_switch if k.startswith("sparkctl_")} == {
        k for k in ex_switch if k.startswith("sparkctl_")
    }


def test_lab_values(lab_inv: lab_inventory.LabInventory) -> None:
    lab_inventory.write(lab_inv)
    d = lab_inv.inventory_dir
    hosts = _load(d / "hosts.yml")
    spark2 = _hosts(hosts, "sparks")["spark-2"]
    assert spark2["ansible_host"] == "10.250.0.12" and spark2["sparkctl_rank"] == 2
    assert spark2["sparkctl_fabric_ports"] == [
        {"netdev": "enp1s0f0np0", "hca": "rocep1s0f0", "address": "10.251.0.12/24"},
        {"netdev": "enP2p1s0f0np0", "hca": "roceP2p1s0f0", "address": "10.251.1.12/24"},
    ]
    assert _hosts(hosts, "sparks")["spark-3"]["sparkctl_nvme_gib"] == 2
    av = hosts["all"]["vars"]
    assert av["ansible_user"] == "root" and av["ansible_become"] is False
    assert f"UserKnownHostsFile={d / 'known_hosts'}" in av["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in av["ansible_ssh_common_args"]
    assert av["ansible_ssh_private_key_file"] == str(lab_inv.private_key)
    switch = _hosts(hosts, "switches")["lab-switch"]
    assert switch["sparkctl_switch_type"] == "linux" and switch["sparkctl_switch_mtu"] == 9216
    assert switch["sparkctl_switch_ports"]["spark-1"] == {"enp1s0f0np0": "s1a", "enP2p1s0f0np0": "s1b"}
    gv = _load(d / "group_vars/all/sparkctl.yml")
    assert gv["sparkctl_runtime"]["kind"] == "container" and gv["sparkctl_profile"] == "lab"
    assert gv["sparkctl_mgmt"] == {"subnet": "10.250.0.0/24", "interface": "enP7s7"}
    assert gv["sparkctl_fabric"]["subnets"] == ["10.251.0.0/24", "10.251.1.0/24"]
    assert gv["sparkctl_fabric"]["mtu"] == 9000
    assert gv["sparkctl_secrets"] == {"api_key": {"file": str(lab_inv.api_key_file)}}
    assert gv["sparkctl_checkpoint"]["source"] == "dir"
    assert all(v.startswith("/") for v in gv["sparkctl_paths"].values())


def test_known_hosts_and_ssh_config_pin_every_machine(lab_inv: lab_inventory.LabInventory) -> None:
    lab_inventory.write(lab_inv)
    known = (lab_inv.inventory_dir / "known_hosts").read_text().splitlines()
    assert [line.split()[0] for line in known] == [f"{m},{topo.mgmt_ip(m)}" for m in topo.machines()]
    cfg = (lab_inv.inventory_dir / "ssh_config").read_text()
    assert "Host spark-2\n  HostName 10.250.0.12" in cfg
    assert "StrictHostKeyChecking yes" in cfg and f"UserKnownHostsFile {lab_inv.known_hosts}" in cfg
    assert "StrictHostKeyChecking no" not in cfg


def test_rewrite_is_a_no_op_and_remove_only_touches_our_dir(lab_inv: lab_inventory.LabInventory) -> None:
    first = lab_inventory.write(lab_inv)
    assert "hosts.yml" in first
    assert lab_inventory.write(lab_inv) == []
    stranger = lab_inv.inventory_dir.parent / "site"
    stranger.mkdir()
    (stranger / "hosts.yml").write_text("---\n")
    assert lab_inventory.remove(stranger) is False and (stranger / "hosts.yml").exists()
    assert lab_inventory.remove(lab_inv.inventory_dir) is True
    assert not lab_inv.inventory_dir.exists()


def test_the_model_accepts_the_lab_inventory(lab_inv: lab_inventory.LabInventory) -> None:
    model = pytest.importorskip("sparkctl.model")
    lab_inventory.write(lab_inv)
    cluster = model.load_inventory(lab_inv.inventory_dir)
    assert [n.name for n in cluster.nodes] == topo.node_names()
    assert cluster.mgmt.interface == "enP7s7"
    assert cluster.switch is not None and cluster.switch.type == "linux"
    assert cluster.nodes[3].nvme_gib == 2


def test_written_yaml_passes_the_repository_yamllint(lab_inv: lab_inventory.LabInventory) -> None:
    pytest.importorskip("yamllint")
    import subprocess
    import sys

    lab_inventory.write(lab_inv)
    files = [
        str(lab_inv.inventory_dir / "hosts.yml"),
        str(lab_inv.inventory_dir / "group_vars/all/sparkctl.yml"),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "yamllint", "-c", str(REPO / ".yamllint"), *files],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
