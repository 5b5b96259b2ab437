"""`sparkctl plan` on a site of two serving groups: the document lists the groups and each node's
group, and the human output says which group a node's rank belongs to."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkctl.errors import EXIT_OK

TWO = str(Path(__file__).resolve().parents[2] / "inventory" / "examples" / "switch-2xtp4")


def test_plan_json_lists_the_groups(run_cli: Any) -> None:
    res = run_cli("-i", TWO, "--json", "plan")
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)
    assert [(g["name"], g["head"], g["dist_init_addr"]) for g in doc["groups"]] == [
        ("a", "spark-0", "10.77.0.10:29649"), ("b", "spark-4", "10.77.0.14:29649")]
    assert [(n["name"], n["group"], n["rank"]) for n in doc["nodes"]][3:5] == [("spark-3", "a", 3),
                                                                                ("spark-4", "b", 0)]


def test_plan_says_each_nodes_group(run_cli: Any) -> None:
    res = run_cli("-i", TWO, "plan", "--node", "spark-5")
    assert res.code == EXIT_OK, res.err
    assert "rank 1 of group b (worker)" in " ".join(res.out.split())
