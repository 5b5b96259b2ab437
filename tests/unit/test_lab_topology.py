"""The lab's wiring facts: names fit the kernel, addresses and MACs are unique and where documented."""

from __future__ import annotations

import ipaddress

import pytest

from sparkctl_lab import topology as topo


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
