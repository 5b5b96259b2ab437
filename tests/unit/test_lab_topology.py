"""The lab's wiring facts: names fit the kernel, addresses and MACs are unique and where documented."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkctl_lab import topology as topo

REPO = Path(__file__).resolve().parents[2]


def test_nodes_and_addresses_follow_the_documented_plan() -> None:
    assert topo.node_names() == ["spark-0", "spark-1", "spark-2", "spark-3"]
    assert topo.machines()[-1] == "lab-switch"
    assert [str(topo.mgmt_ip(n)) for n in topo.node_names()] == [f"10.250.0.{10 + r}" for r in range(4)]
    assert str(topo.mgmt_ip("lab-switch")) == "10.250.0.2"
    a, b = topo.HALVES
    assert (a.netdev, a.hca, b.netdev, b.hca) == (
        "enp1s0f0np0",
        "rocep1s0f0",
        "enP2p1s0f0np0",
        "roceP2p1s0f0",
    )
    assert str(topo.fabric_ip("spark-3", a)) == "10.251.0.13/24"
    assert str(topo.fabric_ip("spark-3", b)) == "10.251.1.13/24"


def test_every_address_lies_in_its_subnet_and_none_collides() -> None:
    mgmt = [topo.mgmt_ip(m) for m in topo.machines()] + [ipaddress.IPv4Address(topo.CONTROLLER_IP)]
    assert all(ip in topo.MGMT_SUBNET for ip in mgmt)
    assert len(set(mgmt)) == len(mgmt)
    for h in topo.HALVES:
        ips = [topo.fabric_ip(n, h) for n in topo.node_names()]
        assert all(i.network == h.subnet for i in ips) and len(set(ips)) == 4


def test_interface_names_fit_the_kernel_limit() -> None:
    names = [topo.MGMT_IFACE, topo.MGMT_BRIDGE, topo.FABRIC_BRIDGE, *topo.switch_ports()]
    names += [h.netdev for h in topo.HALVES] + [topo.mgmt_veth_host(m) for m in topo.machines()]
    assert all(1 <= len(n) <= 15 for n in names), [n for n in names if len(n) > 15]


def test_switch_ports_map_back_to_their_node_half() -> None:
    assert topo.switch_ports() == ["s0a", "s0b", "s1a", "s1b", "s2a", "s2b", "s3a", "s3b"]
    node, half = topo.port_owner("s2b")
    assert node == "spark-2" and half.netdev == "enP2p1s0f0np0"
    with pytest.raises(ValueError, match="not a lab switch port"):
        topo.port_owner("s9a")


def test_macs_are_stable_unique_and_locally_administered() -> None:
    macs = [topo.mgmt_mac(m) for m in topo.machines()] + [topo.mgmt_host_mac(m) for m in topo.machines()]
    macs += [topo.fabric_mac(n, h) for n in topo.node_names() for h in topo.HALVES]
    macs += [topo.switch_port_mac(n, h) for n in topo.node_names() for h in topo.HALVES]
    assert len(set(macs)) == len(macs)
    assert all(int(m.split(":")[0], 16) & 0b10 and not int(m.split(":")[0], 16) & 0b01 for m in macs)
    assert topo.mgmt_mac("spark-1") == topo.mgmt_mac("spark-1")


@pytest.mark.parametrize("bad", ["spark-4", "spark-", "node1", "lab-switch", "spark--1"])
def test_rank_of_rejects_what_is_not_a_node(bad: str) -> None:
    with pytest.raises(ValueError, match="not a lab node"):
        topo.rank_of(bad)


_SECOND_LAB_FACTS = """
import json
from sparkctl_lab import cli, machines, state, topology as topo
print(json.dumps({
    "cluster": topo.CLUSTER_NAME, "subnet": str(topo.MGMT_SUBNET), "controller": str(topo.CONTROLLER_IP),
    "switch": str(topo.mgmt_ip("lab-switch")), "spark-3": str(topo.mgmt_ip("spark-3")),
    "bridge": topo.MGMT_BRIDGE, "netns": topo.netns("spark-0"),
    "veths": [topo.mgmt_veth_host(m) for m in topo.machines()],
    "cgroup": machines.CGROUP_PARENT, "lab_dir": str(state.lab_dir()), "run_dir": str(state.run_dir()),
    "inventory": str(cli.DEFAULT_INVENTORY), "nodes": topo.node_names(),
}))
"""


def _lab_facts(instance: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKCTL_LAB")}
    if instance is not None:
        env["SPARKCTL_LAB_INSTANCE"] = instance
    return subprocess.run([sys.executable, "-c", _SECOND_LAB_FACTS], capture_output=True, text=True, env=env)


def test_a_second_lab_on_the_host_shares_no_name_address_or_directory_with_lab_0() -> None:
    first, second = (json.loads(_lab_facts(i).stdout) for i in (None, "1"))
    assert first == json.loads(_lab_facts("0").stdout)  # unset is lab 0, named as it always was
    assert (first["subnet"], first["bridge"], first["netns"], first["veths"][0]) == (
        "10.250.0.0/24", "sparklab0", "sparklab-spark-0", "lm-spark-0")
    assert (first["lab_dir"], first["run_dir"], first["inventory"], first["cluster"]) == (
        "/var/lib/sparkctl/lab", "/run/sparkctl-lab", "inventory/lab", "lab")
    assert second == {
        "cluster": "lab1", "subnet": "10.250.1.0/24", "controller": "10.250.1.1", "switch": "10.250.1.2",
        "spark-3": "10.250.1.13", "bridge": "sparklab1", "netns": "sparklab1-spark-0",
        "veths": ["lm1-spark-0", "lm1-spark-1", "lm1-spark-2", "lm1-spark-3", "lm1-lab-switch"],
        "cgroup": "sparkctl-lab1", "lab_dir": "/var/lib/sparkctl/lab-1", "run_dir": "/run/sparkctl-lab-1",
        "inventory": "inventory/lab1", "nodes": first["nodes"],
    }
    # Lab 0's clean-up finds its leftovers by prefix: none of lab 1's names may match lab 0's.
    assert not second["netns"].startswith("sparklab-") and not second["veths"][0].startswith("lm-")
    assert all(len(v) <= 15 for v in second["veths"])


def test_a_lab_instance_that_is_not_a_digit_is_refused() -> None:
    proc = _lab_facts("2x")
    assert proc.returncode != 0 and "SPARKCTL_LAB_INSTANCE must be a digit 0-9 (got '2x')" in proc.stderr


# --- shapes: `lab up --shape` ------------------------------------------------------------------

# Who is cabled to whom, as the shipped examples draw it (inventory/examples/triangle-tp3, ring-tp4).
EXPECTED_NEIGHBOURS = {
    "triangle": {0: {1, 2}, 1: {0, 2}, 2: {0, 1}},
    "ring": {0: {1, 3}, 1: {0, 2}, 2: {1, 3}, 3: {0, 2}},
}


@pytest.fixture(autouse=True)
def _default_shape() -> Iterator[None]:
    yield
    topo.use_shape(topo.DEFAULT_SHAPE)


def _seen(sh: topo.Shape) -> dict[str, set[str]]:
    """Per node, the nodes sharing a bridge of lab-switch with one of its ports: who it can reach."""
    owner = {topo.switch_port(n, h, sh): n for n in topo.node_names(sh) for h in topo.fabric_ports(sh)}
    seen: dict[str, set[str]] = {n: set() for n in topo.node_names(sh)}
    for ports in topo.segments(sh).values():
        nodes = {owner[p] for p in ports}
        for n in nodes:
            seen[n] |= nodes - {n}
    return seen


def test_the_default_shape_is_the_four_node_switched_lab() -> None:
    sh = topo.shape()
    assert (sh.name, sh.topology, sh.node_count, sh.profile, sh.cables) == ("switch4", "switch", 4, "lab", ())
    assert topo.segments() == {topo.FABRIC_BRIDGE: topo.switch_ports()} and topo.fabric_ports() == topo.HALVES
    assert topo.NODE_COUNT == 4


@pytest.mark.parametrize("name", sorted(topo.SHAPES))
def test_every_port_is_on_exactly_one_bridge_and_every_bridge_port_is_a_node_port(name: str) -> None:
    sh = topo.get_shape(name)
    bridged = [p for ports in topo.segments(sh).values() for p in ports]
    assert sorted(bridged) == sorted(topo.switch_ports(sh))
    assert len(set(bridged)) == len(bridged) == sh.node_count * 2
    for node in topo.node_names(sh):
        for h in topo.fabric_ports(sh):
            assert topo.switch_port(node, h, sh) in topo.segments(sh)[topo.segment_of(node, h, sh)]


@pytest.mark.parametrize("name", ["triangle", "ring"])
def test_a_cabled_shape_is_point_to_point_and_a_node_sees_only_its_cabled_peers(name: str) -> None:
    sh = topo.get_shape(name)
    for bridge, ports in topo.segments(sh).items():
        owners = {topo.port_owner(p, sh)[0] for p in ports}
        assert len(ports) == 2 and len(owners) == 2, (bridge, ports)  # one cable, two different nodes
    want = {topo.node_name(r): {topo.node_name(p) for p in peers}
            for r, peers in EXPECTED_NEIGHBOURS[name].items()}
    assert _seen(sh) == want
    assert {n: topo.neighbours(n, sh) for n in topo.node_names(sh)} == want


def test_the_ring_has_no_path_between_opposite_nodes() -> None:
    seen = _seen(topo.get_shape("ring"))
    assert "spark-2" not in seen["spark-0"] and "spark-3" not in seen["spark-1"]


@pytest.mark.parametrize("name", ["switch4", "switch8"])
def test_a_switched_shape_puts_every_node_on_one_fabric(name: str) -> None:
    sh = topo.get_shape(name)
    assert list(topo.segments(sh)) == [topo.FABRIC_BRIDGE]
    assert _seen(sh) == {n: set(topo.node_names(sh)) - {n} for n in topo.node_names(sh)}


@pytest.mark.parametrize("name", ["triangle", "ring"])
def test_a_cabled_node_uses_both_physical_ports_one_cable_and_subnet_each(name: str) -> None:
    sh = topo.get_shape(name)
    assert [h.netdev for h in topo.fabric_ports(sh)] == ["enp1s0f0np0", "enp1s0f1np1"]
    subnets = topo.fabric_subnets(sh)
    assert len(subnets) == len(set(subnets)) == len(sh.cables)
    for i, cable in enumerate(sh.cables):
        (a, ka), (b, kb) = cable.ends
        ips = [topo.fabric_ip(a, topo.half(ka, sh), sh), topo.fabric_ip(b, topo.half(kb, sh), sh)]
        assert all(ip.network == subnets[i] for ip in ips) and ips[0] != ips[1]
    for node in topo.node_names(sh):
        assert len({topo.cable_of(node, h, sh) for h in topo.fabric_ports(sh)}) == 2


@pytest.mark.parametrize("name,example", [("triangle", "triangle-tp3"), ("ring", "ring-tp4")])
def test_a_cabled_shape_is_cabled_port_for_port_as_its_shipped_example(name: str, example: str) -> None:
    from sparkctl.model import load_inventory

    sh = topo.get_shape(name)
    assert sh.example == example
    site = load_inventory(REPO / "inventory" / "examples" / example)
    assert site.topology == sh.topology and site.profile.name == sh.profile
    by_subnet: dict[ipaddress.IPv4Network, list[str]] = {}
    for n in site.nodes:
        for port in n.fabric_ports:
            by_subnet.setdefault(port.address.network, []).append(n.name)
    published = {
        (n.name, port.netdev): next(m for m in by_subnet[port.address.network] if m != n.name)
        for n in site.nodes
        for port in n.fabric_ports
    }
    lab = {(n, h.netdev): topo.peer(n, h, sh) for n in topo.node_names(sh) for h in topo.fabric_ports(sh)}
    assert lab == published


def test_switch8_addresses_names_and_macs_stay_unique_and_fit_the_kernel() -> None:
    sh = topo.use_shape("switch8")
    assert topo.node_names() == [f"spark-{r}" for r in range(8)]
    mgmt = [topo.mgmt_ip(m) for m in topo.machines()] + [ipaddress.IPv4Address(topo.CONTROLLER_IP)]
    assert len(set(mgmt)) == len(mgmt) and all(ip in topo.MGMT_SUBNET for ip in mgmt)
    macs = [f(m) for f in (topo.mgmt_mac, topo.mgmt_host_mac) for m in topo.machines()]
    macs += [f(n, h) for f in (topo.fabric_mac, topo.switch_port_mac)
             for n in topo.node_names() for h in sh.ports]
    assert len(set(macs)) == len(macs)
    assert topo.mgmt_mac("lab-switch") == "02:5a:00:00:04:00"  # the switch keeps its four-node MAC
    assert all(len(n) <= 15 for n in [*topo.switch_ports(), *map(topo.mgmt_veth_host, topo.machines())])


def test_the_active_shape_decides_which_nodes_exist() -> None:
    topo.use_shape("triangle")
    assert topo.machines() == ["spark-0", "spark-1", "spark-2", "lab-switch"]
    with pytest.raises(ValueError, match="not a lab node"):
        topo.rank_of("spark-3")
    assert all(len(b) <= 15 for b in topo.segments())
    with pytest.raises(ValueError, match="unknown lab shape 'hexagon'"):
        topo.use_shape("hexagon")
    assert topo.every_machine()[-2:] == ["spark-7", "lab-switch"]


@pytest.mark.parametrize("name", sorted(topo.SHAPES))
def test_the_lab_inventory_of_every_shape_validates_as_its_published_shape(name: str, tmp_path: Path) -> None:
    from sparkctl.model import load_inventory
    from sparkctl_lab import inventory as lab_inventory

    sh = topo.get_shape(name)
    inv = lab_inventory.LabInventory(
        inventory_dir=tmp_path / "lab", private_key=tmp_path / "k", api_key_file=tmp_path / "api",
        checkpoint_dir=tmp_path / "ck", host_keys={}, nvme_gib={}, kit_url=str(tmp_path / "kit"),
        kit_commit="0" * 40, shape=name,
    )
    lab_inventory.write(inv)
    cluster = load_inventory(inv.inventory_dir)
    assert cluster.topology == sh.topology and cluster.profile.name == sh.profile
    assert cluster.profile.tp_size == sh.node_count == len(cluster.nodes)
    assert (cluster.switch is not None) == sh.switched
    assert cluster.fabric.bootstrap_over == ("fabric" if sh.switched else "mgmt")
    for n in cluster.nodes:
        assert [str(p.address) for p in n.fabric_ports] == [
            str(topo.fabric_ip(n.name, h, sh)) for h in topo.fabric_ports(sh)]
    # The lab's simulated ranks: the lab profile's container and the kit's path, the published TP/EP.
    from sparkctl.profiles import load_profile

    assert cluster.profile.container == load_profile("lab").container
    assert "/opt/sglang4" in str(cluster.profile.env.get("PYTHONPATH", ""))


def test_the_state_file_remembers_the_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkctl_lab import state

    monkeypatch.setenv("SPARKCTL_LAB_RUN_DIR", str(tmp_path / "run"))
    state.save(state.LabState(rootfs="/r", shape="ring"))
    assert state.load() is not None and topo.shape().name == "ring"  # loading makes it the active one
    assert topo.node_names() == ["spark-0", "spark-1", "spark-2", "spark-3"]
    older = json.loads(state.state_file().read_text())
    del older["shape"]  # a lab brought up before shapes existed
    state.state_file().write_text(json.dumps(older))
    loaded = state.load()
    assert loaded is not None and loaded.shape == "switch4" and topo.shape().name == "switch4"
    state.state_file().write_text(json.dumps({**older, "shape": "hexagon"}))
    assert state.load() is None  # unreadable: treated as a crash, cleaned by the next `up`


def test_an_unknown_shape_is_a_usage_error_naming_the_shapes(
    run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr("platform.system", lambda: "Linux")
    result = run_cli("lab", "up", "--shape", "hexagon")
    assert result.code == 2
    said = " ".join(result.err.split())
    assert "'hexagon' is not a lab shape; one of: switch4, triangle, ring, switch8" in said
