"""Topology and serving groups in the model: the shipped example of each shape validates, each
impossible shape is refused with exit 2 naming the field, and today's site is one group as before."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import EXIT_USAGE, InputError
from sparkctl.model import Cluster, load_inventory

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "inventory" / "examples"
SHAPES = {
    # shape: (topology, profile of each group, nodes of each group)
    "triangle-tp3": ("triangle", {"main": "mia-tp3"}, {"main": ["spark-0", "spark-1", "spark-2"]}),
    "ring-tp4": ("ring", {"main": "mia-ring-tp4"}, {"main": [f"spark-{i}" for i in range(4)]}),
    "switch-tp8": ("switch", {"main": "sg17-tp8"}, {"main": [f"spark-{i}" for i in range(8)]}),
    "switch-2xtp4": ("switch", {"a": "m1-1m", "b": "m1-1m"},
                     {"a": [f"spark-{i}" for i in range(4)], "b": [f"spark-{i}" for i in range(4, 8)]}),
}


def test_every_shape_has_its_example() -> None:
    assert sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()) == sorted(SHAPES)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_example_of_each_shape_validates(shape: str) -> None:
    cluster = load_inventory(EXAMPLES / shape)
    topology, profiles, nodes = SHAPES[shape]
    assert cluster.topology == topology
    assert {g.name: g.profile.name for g in cluster.groups} == profiles
    assert {g.name: g.nodes for g in cluster.groups} == nodes
    for group in cluster.groups:
        assert len(group.nodes) == group.profile.tp_size
        assert cluster.group_of(group.head) is group
        assert group.rank_of(group.nodes[-1]) == len(group.nodes) - 1


def test_todays_site_is_one_group_of_every_node_in_rank_order() -> None:
    cluster = load_inventory(REPO / "inventory" / "example")
    assert cluster.topology == "switch"
    (group,) = cluster.groups
    assert (group.name, group.nodes, group.head) == ("main", [f"spark-{i}" for i in range(4)], "spark-0")
    assert group.profile is cluster.profile


# -- editing a copy of an example ------------------------------------------------------------------


def _copy(shape: str, tmp_path: Path) -> Path:
    dest = tmp_path / shape
    shutil.copytree(EXAMPLES / shape, dest)
    return dest


def _site(inv: Path) -> tuple[Path, dict[str, Any]]:
    path = inv / "group_vars/all/sparkctl.yml"
    return path, yaml.safe_load(path.read_text())


def _set(inv: Path, **changes: Any) -> None:
    path, doc = _site(inv)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _hosts(inv: Path) -> tuple[Path, dict[str, Any]]:
    path = inv / "hosts.yml"
    return path, yaml.safe_load(path.read_text())


def _refused(inv: Path) -> list[str]:
    with pytest.raises(InputError) as err:
        load_inventory(inv)
    assert err.value.exit_code == EXIT_USAGE
    return err.value.details


def _drop_hosts(inv: Path, *names: str) -> None:
    path, doc = _hosts(inv)
    for name in names:
        del doc["all"]["children"]["sparks"]["hosts"][name]
        switches = doc["all"]["children"].get("switches")
        if switches:
            for sw in switches["hosts"].values():
                sw["sparkctl_switch_ports"].pop(name, None)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _ports(inv: Path, name: str, *addresses: str) -> None:
    path, doc = _hosts(inv)
    ports = doc["all"]["children"]["sparks"]["hosts"][name]["sparkctl_fabric_ports"]
    for port, address in zip(ports, addresses, strict=True):
        port["address"] = address
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


# -- the impossible shapes of the issue ------------------------------------------------------------


def test_a_ring_of_eight_nodes_is_refused(tmp_path: Path) -> None:
    inv = _copy("switch-tp8", tmp_path)
    path, doc = _hosts(inv)
    del doc["all"]["children"]["switches"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    _set(inv, sparkctl_topology="ring", sparkctl_profile="mia-ring-tp4")
    details = _refused(inv)
    assert any(d.startswith(
        "sparkctl_topology: ring needs exactly 4 nodes, the sparks group has 8")
        for d in details)


def test_four_nodes_on_two_subnets_without_a_switch_are_refused(example_copy: Path) -> None:
    path, doc = _hosts(example_copy)
    del doc["all"]["children"]["switches"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    details = _refused(example_copy)
    assert any(d.startswith("all.children.switches: 4 nodes and no switch") for d in details)


def test_four_nodes_on_two_subnets_called_a_ring_are_refused(tmp_path: Path) -> None:
    inv = _copy("ring-tp4", tmp_path)
    _set(inv, sparkctl_fabric={"subnets": ["10.77.0.0/24", "10.77.1.0/24"], "mtu": 9000, "host_qos": False,
                               "bootstrap_over": "mgmt", "stage_over_fabric": False})
    for i in range(4):
        _ports(inv, f"spark-{i}", f"10.77.0.{10 + i}/24", f"10.77.1.{10 + i}/24")
    details = _refused(inv)
    assert any(d.startswith("sparkctl_fabric.subnets[0]: ports of 4 nodes (spark-0, spark-1, spark-2, "
                            "spark-3) in 10.77.0.0/24: on a ring a subnet is one point-to-point cable")
               for d in details)


def test_tp8_on_seven_nodes_is_refused(tmp_path: Path) -> None:
    inv = _copy("switch-tp8", tmp_path)
    _drop_hosts(inv, "spark-7")
    details = _refused(inv)
    assert any(d.startswith(
        "all.children.sparks.hosts: 7 nodes is not a multiple of --tp-size 8")
        for d in details)


def test_overlapping_groups_are_refused(tmp_path: Path) -> None:
    inv = _copy("switch-2xtp4", tmp_path)
    _, doc = _site(inv)
    groups = doc["sparkctl_groups"]
    groups[1]["nodes"] = ["spark-3", "spark-5", "spark-6", "spark-7"]
    _set(inv, sparkctl_groups=groups)
    details = _refused(inv)
    assert any(d.startswith("sparkctl_groups[1].nodes[0]: spark-3 is already in group a "
                            "(sparkctl_groups[0]): "
                            "groups overlap") for d in details)


# -- groups ------------------------------------------------------------------------------------------


def test_a_group_is_held_to_its_profiles_tp(tmp_path: Path) -> None:
    inv = _copy("switch-2xtp4", tmp_path)
    _, doc = _site(inv)
    groups = doc["sparkctl_groups"]
    groups[1]["nodes"] = ["spark-4", "spark-5", "spark-6"]
    _set(inv, sparkctl_groups=groups)
    details = _refused(inv)
    assert any(d.startswith("sparkctl_groups[1].nodes: 3 nodes, but m1-1m has --tp-size 4 x --pp-size 1 "
                            "= 4 ranks")
               for d in details)


def test_group_names_members_and_profiles_are_checked(tmp_path: Path) -> None:
    inv = _copy("switch-2xtp4", tmp_path)
    _set(inv, sparkctl_groups=[
        {"name": "a", "nodes": ["spark-0", "spark-1", "spark-2", "spark-33"]},
        {"name": "a", "nodes": ["spark-4", "spark-5", "spark-6", "spark-7"], "profile": "m9-1m"},
    ])
    details = _refused(inv)
    assert any(d.startswith("sparkctl_groups[0].nodes[3]: no node named spark-33") for d in details)
    assert any(d.startswith("sparkctl_groups[1].name: a is also sparkctl_groups[0]") for d in details)
    assert any(d.startswith("sparkctl_groups[1].profile: unknown profile 'm9-1m'") for d in details)


def test_a_groups_own_profile_gets_only_its_own_overrides_and_its_memory_check(tmp_path: Path) -> None:
    inv = _copy("switch-2xtp4", tmp_path)
    _, doc = _site(inv)
    groups = doc["sparkctl_groups"]
    groups[1]["profile_overrides"] = {"args": {"--max-total-tokens": 16_000_000}}
    _set(inv, sparkctl_groups=groups)
    details = _refused(inv)
    assert any(d.startswith("sparkctl_groups[1].profile (m1-1m): KV pin does not fit") for d in details)


def test_a_spare_node_is_a_note(tmp_path: Path) -> None:
    inv = _copy("switch-2xtp4", tmp_path)
    _set(inv, sparkctl_groups=[{"name": "a", "nodes": ["spark-4", "spark-5", "spark-6", "spark-7"]}])
    cluster = load_inventory(inv)
    assert [g.nodes for g in cluster.groups] == [["spark-4", "spark-5", "spark-6", "spark-7"]]
    assert cluster.group_of("spark-0") is None
    assert any(w.startswith("spark-0, spark-1, spark-2, spark-3 in no serving group")
               for w in cluster.warnings)


def test_a_group_follows_sparkctl_rank(tmp_path: Path) -> None:
    inv = _copy("switch-2xtp4", tmp_path)
    cluster: Cluster = load_inventory(inv)
    b = cluster.groups[1]
    assert (b.head, b.rank_of("spark-4"), b.rank_of("spark-7")) == ("spark-4", 0, 3)
    _, doc = _site(inv)
    groups = doc["sparkctl_groups"]
    groups[0]["nodes"] = ["spark-2", "spark-0", "spark-1", "spark-3"]
    _set(inv, sparkctl_groups=groups)
    details = _refused(inv)
    assert any(d.startswith("sparkctl_groups[0].nodes: spark-0 (sparkctl_rank 0) is listed after spark-2 "
                            "(sparkctl_rank 2)") for d in details)


def test_a_groups_own_profile_sets_its_nodes_disk_budget(tmp_path: Path) -> None:
    inv = _copy("switch-2xtp4", tmp_path)
    # 476 + 47.21 packed + 8 = 531.21 GiB per node for m1-1m: group a through the site's profile,
    # group b through its own; each node is named once, by the profile its group serves.
    path, doc = _hosts(inv)
    for i in range(8):
        doc["all"]["children"]["sparks"]["hosts"][f"spark-{i}"]["sparkctl_nvme_gib"] = 500
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    details = _refused(inv)
    named = sorted(d.split(":")[0] for d in details)
    assert named == [f"sparks.spark-{i}.sparkctl_nvme_gib" for i in range(8)]
    assert any("(group b, m1-1m)" in d for d in details)


# -- cabling -----------------------------------------------------------------------------------------


def test_a_triangle_missing_a_cable_is_refused(tmp_path: Path) -> None:
    inv = _copy("triangle-tp3", tmp_path)
    # spark-1's second port into the spark-0/spark-2 cable's subnet: three nodes on one "cable".
    _ports(inv, "spark-1", "10.77.1.11/24", "10.77.2.11/24")
    details = _refused(inv)
    assert any(d.startswith("sparkctl_fabric.subnets[1]: ports of 3 nodes (spark-0, spark-1, spark-2)")
               for d in details)
    assert any(d.startswith(
        "sparkctl_fabric.subnets[2]: only spark-2 has a port in 10.77.3.0/24")
        for d in details)
    assert any(d.startswith(
        "sparkctl_fabric.subnets: no subnet (cable) joins spark-1 and spark-2")
        for d in details)


def test_a_triangle_uses_both_physical_ports(tmp_path: Path) -> None:
    inv = _copy("triangle-tp3", tmp_path)
    path, doc = _hosts(inv)
    ports = doc["all"]["children"]["sparks"]["hosts"]["spark-0"]["sparkctl_fabric_ports"]
    ports[1].update(netdev="enP2p1s0f0np0", hca="roceP2p1s0f0")  # the other PCIe half of port 0
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    details = _refused(inv)
    assert any(d.startswith("sparks.spark-0.sparkctl_fabric_ports[1].netdev: enP2p1s0f0np0 (physical port 0) "
                            "carries the cable to spark-2") for d in details)


def test_a_triangle_needs_three_nodes(tmp_path: Path) -> None:
    inv = _copy("triangle-tp3", tmp_path)
    _drop_hosts(inv, "spark-2")
    details = _refused(inv)
    assert any(d.startswith("sparkctl_topology: triangle needs exactly 3 nodes, the sparks group has 2")
               for d in details)


def test_a_ring_numbers_ranks_around_the_cables(tmp_path: Path) -> None:
    inv = _copy("ring-tp4", tmp_path)
    path, doc = _hosts(inv)
    hosts = doc["all"]["children"]["sparks"]["hosts"]
    hosts["spark-1"]["sparkctl_rank"], hosts["spark-2"]["sparkctl_rank"] = 2, 1
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    details = _refused(inv)
    assert any(d.startswith("sparks.spark-2.sparkctl_rank: rank 1 (spark-2) and rank 0 (spark-0) share no "
                            "cable")
               for d in details)


def test_a_diagonal_cable_is_not_a_ring(tmp_path: Path) -> None:
    inv = _copy("ring-tp4", tmp_path)
    # spark-0's second port cabled to spark-2 (the opposite node) instead of spark-3.
    _ports(inv, "spark-0", "10.77.1.10/24", "10.77.3.10/24")
    details = _refused(inv)
    assert any(d.startswith("sparkctl_fabric.subnets[2]: ports of 3 nodes") for d in details)
    assert any(d.startswith(
        "sparkctl_fabric.subnets[3]: only spark-3 has a port in 10.77.4.0/24")
        for d in details)


def test_a_cabled_topology_lists_no_switch_and_bootstraps_over_management(tmp_path: Path) -> None:
    inv = _copy("ring-tp4", tmp_path)
    switchless = _copy("switch-tp8", tmp_path / "sw")
    _, sw = _hosts(switchless)
    path, doc = _hosts(inv)
    doc["all"]["children"]["switches"] = sw["all"]["children"]["switches"]
    for name in [f"spark-{i}" for i in range(4, 8)]:
        del doc["all"]["children"]["switches"]["hosts"]["crs812"]["sparkctl_switch_ports"][name]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    _, site = _site(inv)
    _set(inv, sparkctl_fabric={**site["sparkctl_fabric"], "bootstrap_over": "fabric"})
    details = _refused(inv)
    assert any(d.startswith(
        "all.children.switches: a switch is listed, but sparkctl_topology is ring")
        for d in details)
    assert any(d.startswith("sparkctl_fabric.bootstrap_over: fabric on a ring") for d in details)


def test_a_profile_not_published_for_the_topology_is_refused(tmp_path: Path) -> None:
    inv = _copy("ring-tp4", tmp_path)
    _set(inv, sparkctl_profile="m1-1m")
    details = _refused(inv)
    assert any(d.startswith("sparkctl_profile: m1-1m is published for switch, triangle, pair, not for a ring")
               for d in details)
    inv = _copy("switch-tp8", tmp_path / "tp8")
    _set(inv, sparkctl_profile="mia-tp3")
    details = _refused(inv)
    assert any("8 nodes is not a multiple of --tp-size 3" in d for d in details)


def test_the_triangle_example_refuses_a_four_rank_profile(tmp_path: Path) -> None:
    inv = _copy("triangle-tp3", tmp_path)
    _set(inv, sparkctl_profile="m1-1m")
    details = _refused(inv)
    assert any(d.startswith(
        "all.children.sparks.hosts: 3 nodes is not a multiple of --tp-size 4")
        for d in details)


def test_the_shape_keys_are_typed(tmp_path: Path) -> None:
    inv = _copy("triangle-tp3", tmp_path)
    _set(inv, sparkctl_topology="mesh", sparkctl_groups=[{"name": "a"}, {"name": "B", "nodes": ["spark-0"]}])
    details = _refused(inv)
    assert any(d.startswith("sparkctl_topology: 'mesh' is not one of switch, triangle, ring or pair")
               for d in details)
    assert any(d.startswith("sparkctl_groups[0].nodes: missing") for d in details)
    assert any(d.startswith("sparkctl_groups[1].name: 'B' is not a short lowercase name") for d in details)
