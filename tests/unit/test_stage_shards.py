"""Engram shards per serving group: each node packs r{rank}of{tp} of its own group, and a group
that keeps Engram resident packs (and checks) nothing."""

from __future__ import annotations

from pathlib import Path

from sparkctl.model import load_inventory
from sparkctl.stage import faststage, shards

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "inventory" / "examples"


def test_two_tp4_groups_pack_r0of4_to_r3of4_twice() -> None:
    cluster = load_inventory(EXAMPLES / "switch-2xtp4")
    labels = [(shards.of(cluster, n).group, shards.of(cluster, n).label) for n in cluster.nodes]
    assert labels == [("a", f"r{r}of4") for r in range(4)] + [("b", f"r{r}of4") for r in range(4)]
    assert shards.resident_note(cluster, "engram") is None


def test_tp3_triangle_packs_r_of3() -> None:
    cluster = load_inventory(EXAMPLES / "triangle-tp3")
    assert [shards.of(cluster, n).label for n in cluster.nodes] == ["r0of3", "r1of3", "r2of3"]


def test_fast_check_asks_each_node_for_its_groups_shards() -> None:
    cluster = load_inventory(EXAMPLES / "switch-2xtp4")
    params = faststage.check_params(cluster, cluster.node("spark-6"), ["engram"], None, None)
    assert (params["engram"]["rank"], params["engram"]["tp"]) == (2, 4)
    answers = {n.name: {"engram": {"present": True, "verified": True, "files": [], "problems": []}}
               for n in cluster.nodes}
    reasons, nodes = faststage.judge(cluster, ["engram"], answers, None, None)
    assert reasons == []
    assert (nodes["spark-6"]["rank"], nodes["spark-6"]["tp"]) == (2, 4)


def test_resident_engram_packs_and_checks_nothing() -> None:
    cluster = load_inventory(EXAMPLES / "switch-tp8")  # sg17-tp8: engram resident
    own = shards.of(cluster, cluster.node("spark-7"))
    assert (own.label, own.packed) == ("r7of8", False)
    params = faststage.check_params(cluster, cluster.node("spark-7"), ["engram"], None, None)
    assert "engram" not in params
    # No node answers about shards, and none is missing any.
    reasons, nodes = faststage.judge(cluster, ["engram"], {n.name: {} for n in cluster.nodes}, None, None)
    assert reasons == [] and "engram" not in nodes["spark-7"]
    note = shards.resident_note(cluster, "engram")
    assert note is not None and "sg17-tp8" in note and "resident" in note
    assert shards.resident_note(cluster, "weights") is None


def test_a_site_mixing_packed_and_resident_groups_names_the_resident_nodes(tmp_path: Path) -> None:
    import shutil

    import yaml

    site = tmp_path / "site"
    shutil.copytree(EXAMPLES / "switch-2xtp4", site)
    gv = site / "group_vars" / "all" / "sparkctl.yml"
    doc = yaml.safe_load(gv.read_text())
    # Group b keeps Engram resident: m1-1m without its NVMe offload or packed directory, nothing packed.
    doc["sparkctl_groups"][1]["profile_overrides"] = {
        "engram": "resident", "memory": {"engram_packed_gib": 0},
        "env": {"OFFLOAD_MODE": None, "DSV41_PACKED_DIR": None}}
    gv.write_text(yaml.safe_dump(doc))
    cluster = load_inventory(site)
    assert [shards.of(cluster, n).packed for n in cluster.nodes] == [True] * 4 + [False] * 4
    note = shards.resident_nodes_note(cluster, "all")
    assert note is not None and "spark-4, spark-5, spark-6, spark-7" in note and "group b" in note
    assert shards.resident_nodes_note(cluster, "weights") is None
    assert shards.resident_note(cluster, "engram") is None  # group a still packs
