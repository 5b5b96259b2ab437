"""Several serving groups on one site: each group renders as its own cluster (its size, its ranks
0..n-1, its rendezvous on its own head, its API on its own rank 0), the plan and the facts list the
groups, and a site of one group renders exactly as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkctl.errors import InputError
from sparkctl.model import load_inventory
from sparkctl.render import cluster_facts, common, groups, plan_document

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "inventory" / "examples"


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.fixture(scope="module")
def two() -> Any:
    return load_inventory(EXAMPLES / "switch-2xtp4")


@pytest.fixture(scope="module")
def two_plan(two: Any) -> dict[str, Any]:
    return plan_document(two)


def test_two_tp4_groups_each_render_four_ranks_with_their_own_rendezvous(two_plan: dict[str, Any]) -> None:
    seen: dict[str, list[tuple[str, str, str, str]]] = {}
    for entry in two_plan["nodes"]:
        argv = entry["rank_launch"]["argv"]
        seen.setdefault(entry["group"], []).append(
            (_flag(argv, "--nnodes"), _flag(argv, "--tp-size"), _flag(argv, "--node-rank"),
             _flag(argv, "--dist-init-addr")))
    assert seen == {
        "a": [("4", "4", str(r), "10.77.0.10:29649") for r in range(4)],
        "b": [("4", "4", str(r), "10.77.0.14:29649") for r in range(4)],
    }


def test_each_group_has_its_head_and_its_ranks_in_the_plan(two_plan: dict[str, Any]) -> None:
    by_name = {e["name"]: e for e in two_plan["nodes"]}
    placed = [(by_name[n]["rank"], by_name[n]["role"]) for n in ("spark-4", "spark-5")]
    assert placed == [(0, "head"), (1, "worker")]
    # The unit on spark-4 is a head's (rank 0 of 4), not the site's rank 4 of 8.
    unit = by_name["spark-4"]["files"][common.RANK_UNIT_FILE]
    assert "rank 0/4 (head: rendezvous and HTTP API)" in unit
    # The environment advertises the node's own bootstrap address, as on a one-group site.
    env = by_name["spark-6"]["rank_launch"]["env"]
    assert env["SGLANG_HOST_IP"] == "10.77.0.16"


def test_plan_lists_groups_with_rendezvous_api_and_waves(two_plan: dict[str, Any]) -> None:
    listed = [(g["name"], g["head"], g["tp_size"], g["dist_init_addr"], g["api_url"], g["start_waves"])
              for g in two_plan["groups"]]
    assert listed == [
        ("a", "spark-0", 4, "10.77.0.10:29649", "http://192.168.7.10:8004", [[1, 2, 3], [0]]),
        ("b", "spark-4", 4, "10.77.0.14:29649", "http://192.168.7.14:8004", [[1, 2, 3], [0]]),
    ]
    assert [g["nodes"] for g in two_plan["groups"]] == [[f"spark-{i}" for i in range(4)],
                                                       [f"spark-{i}" for i in range(4, 8)]]


def test_facts_start_every_groups_workers_then_every_head(two: Any) -> None:
    facts = cluster_facts(two)
    assert facts["start_waves"] == [[1, 2, 3], [0]]
    assert [g["name"] for g in facts["groups"]] == ["a", "b"]


def test_router_seam_lists_each_groups_rank0_api(two: Any) -> None:
    eps = groups.endpoints(two)
    assert [(e.group, e.node, e.address, e.port, e.url) for e in eps] == [
        ("a", "spark-0", "192.168.7.10", 8004, "http://192.168.7.10:8004"),
        ("b", "spark-4", "192.168.7.14", 8004, "http://192.168.7.14:8004"),
    ]


def test_tp8_is_one_group_of_eight_and_lists_no_groups() -> None:
    cluster = load_inventory(EXAMPLES / "switch-tp8")
    doc = plan_document(cluster)
    assert "groups" not in doc
    assert all("group" not in e for e in doc["nodes"])
    argv = doc["nodes"][7]["rank_launch"]["argv"]
    assert (_flag(argv, "--nnodes"), _flag(argv, "--node-rank")) == ("8", "7")
    assert [(e.group, e.node) for e in groups.endpoints(cluster)] == [("main", "spark-0")]


def test_the_one_group_site_is_its_own_view() -> None:
    cluster = load_inventory(ROOT / "inventory" / "example")
    assert groups.plain(cluster)
    assert groups.view(cluster, cluster.groups[0]) is cluster
    assert "groups" not in cluster_facts(cluster)


def test_select_and_restrict_by_group_name(two: Any) -> None:
    assert [g.name for g in groups.select(two, None)] == ["a", "b"]
    assert [g.name for g in groups.select(two, ["b"])] == ["b"]
    only_b = groups.restrict(two, ["b"])
    assert [(n.name, n.rank) for n in only_b.nodes] == [(f"spark-{i}", i - 4) for i in range(4, 8)]
    assert only_b.head.name == "spark-4"
    assert groups.restrict(two, ["a", "b"]) is two
    with pytest.raises(InputError) as err:
        groups.select(two, ["c"])
    assert "--group c" in err.value.message and "a, b" in (err.value.hint or "")


def test_node_group_hands_each_node_its_group_rank_and_tp(two: Any) -> None:
    assert groups.node_group(two, two.node("spark-5")) == {
        "name": "b", "serving": True, "rank": 1, "tp_size": 4, "engram": "nvme", "profile": "m1-1m",
        "head": "spark-4"}


def test_a_node_in_no_group_is_rendered_spare(tmp_path: Path) -> None:
    """A site whose one group leaves nodes out: the group renders as its own cluster, the spare
    nodes are named with no group, and their roles are told they serve nothing."""
    import shutil

    import yaml

    site = tmp_path / "site"
    shutil.copytree(EXAMPLES / "switch-2xtp4", site)
    gv = site / "group_vars" / "all" / "sparkctl.yml"
    doc = yaml.safe_load(gv.read_text())
    doc["sparkctl_groups"] = doc["sparkctl_groups"][:1]  # group a only: spark-4..7 spare
    gv.write_text(yaml.safe_dump(doc))
    cluster = load_inventory(site)
    plan = plan_document(cluster)
    by_name = {e["name"]: e for e in plan["nodes"]}
    assert by_name["spark-1"]["group"] == "a" and by_name["spark-5"]["group"] is None
    assert [g["name"] for g in plan["groups"]] == ["a"]
    argv = by_name["spark-1"]["rank_launch"]["argv"]
    assert (_flag(argv, "--nnodes"), _flag(argv, "--node-rank")) == ("4", "1")
    assert groups.node_group(cluster, cluster.node("spark-5"))["serving"] is False
    assert groups.node_group(cluster, cluster.node("spark-1"))["serving"] is True
