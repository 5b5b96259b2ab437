"""The inventory `sparkctl lab up` writes passes the same model as a real site."""

from __future__ import annotations

from ipaddress import IPv4Address
from pathlib import Path

import pytest

from sparkctl.model import load_inventory


def test_lab_inventory_validates(tmp_path: Path) -> None:
    lab_inventory = pytest.importorskip("sparkctl_lab.inventory")
    inv = lab_inventory.LabInventory(
        inventory_dir=tmp_path / "lab",
        private_key=tmp_path / "id_ed25519",
        api_key_file=tmp_path / "api-key",
        checkpoint_dir=tmp_path / "checkpoint",
        host_keys={},
        nvme_gib={},
    )
    lab_inventory.write(inv)
    cluster = load_inventory(inv.inventory_dir)
    assert cluster.runtime.kind == "lab" and cluster.runtime.image is None
    assert cluster.profile.name == "lab"
    assert cluster.switch is not None and cluster.switch.type == "linux"
    assert [n.rank for n in cluster.nodes] == [0, 1, 2, 3]
    # Lab wiring (shared brief): mgmt 10.250.0.10+rank, fabric 10.251.0.10+rank and 10.251.1.10+rank.
    for n in cluster.nodes:
        assert n.mgmt_ip == IPv4Address(f"10.250.0.{10 + n.rank}")
        assert [str(p.ip) for p in n.fabric_ports] == [f"10.251.0.{10 + n.rank}", f"10.251.1.{10 + n.rank}"]
    assert cluster.checkpoint.on == "controller"
    assert cluster.secrets["api_key"].file == str(inv.api_key_file)
