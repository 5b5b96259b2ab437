"""The start order of the ranks is defined once (render.rank.start_waves) and read by the role."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.model import load_inventory
from sparkctl.render import cluster_facts, rank

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "roles" / "spark_rank" / "tasks"


@pytest.fixture(scope="module")
def example() -> Any:
    return load_inventory(ROOT / "inventory" / "example")


def test_workers_first_then_rank_0(example: Any) -> None:
    assert rank.start_waves(example) == [[1, 2, 3], [0]]
    assert cluster_facts(example)["start_waves"] == [[1, 2, 3], [0]]


def test_two_nodes_still_start_the_worker_first(example: Any) -> None:
    pair = example.model_copy(update={"nodes": [n for n in example.nodes if n.rank in (0, 1)]})
    assert rank.start_waves(pair) == [[1], [0]]


def test_the_role_starts_wave_by_wave_from_the_rendered_list() -> None:
    start = yaml.safe_load((TASKS / "start.yml").read_text())
    assert len(start) == 1
    loop = start[0]
    assert loop["ansible.builtin.include_tasks"] == "start_wave.yml"
    assert loop["loop"] == "{{ sparkctl_cluster.start_waves }}"
    assert loop["loop_control"]["loop_var"] == "spark_rank_wave"
    wave = yaml.safe_load((TASKS / "start_wave.yml").read_text())
    # A node starts in the wave of its rank in its serving group, and only if it serves in one.
    assert [t["when"] for t in wave] == [
        "spark_rank_group_rank | int in spark_rank_wave and (spark_rank_serving | bool)"] * 2
    defaults = yaml.safe_load((TASKS.parent / "defaults" / "main.yml").read_text())
    assert (defaults["spark_rank_group_rank"], defaults["spark_rank_serving"]) == (
        "{{ sparkctl_group.rank }}", "{{ sparkctl_group.serving }}")
    for path in (TASKS / "start.yml", TASKS / "start_wave.yml"):  # no order of its own
        text = path.read_text()
        assert "== 0" not in text and "!= 0" not in text, path
