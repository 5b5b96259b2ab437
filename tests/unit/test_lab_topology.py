"""The lab's wiring facts: names fit the kernel, addresses and MACs are unique and where documented."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

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
