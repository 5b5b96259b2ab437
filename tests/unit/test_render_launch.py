"""The typed rank launch: what `plan --json` holds under rank_launch, and reading it back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkctl.errors import InputError
from sparkctl.model import Cluster, Runtime, load_inventory
from sparkctl.profiles import load_profile
from sparkctl.render import RankLaunch, common, node_entry, rank_launch

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example"


@pytest.fixture(scope="module")
def example() -> Cluster:
    return load_inventory(EXAMPLE)


def _runtimes(example: Cluster) -> list[Cluster]:
    venv = Runtime(kind="venv", venv_path="/opt/sparkctl/venv")
    lab = Runtime(kind="lab")
    return [
        example,
        example.model_copy(update={"runtime": venv}),
        # A site's profile is its serving group's too: the variant changes both.
        example.model_copy(update={
            "runtime": lab, "profile": (sim := load_profile("lab")),
            "groups": [g.model_copy(update={"profile": sim}) for g in example.groups]}),
    ]


def test_the_plan_entry_is_the_record_as_json(example: Cluster) -> None:
    for cluster in _runtimes(example):
        for node in cluster.nodes:
            launch = rank_launch(cluster, node)
            entry = node_entry(cluster, node)["rank_launch"]
            assert launch.as_json() == entry
            assert json.dumps(launch.as_json()) == json.dumps(entry)  # same keys in the same order
            assert RankLaunch.from_json(entry) == launch
            assert launch.unit == node_entry(cluster, node)["files"][common.RANK_UNIT_FILE]


def test_container_fields_only_for_the_container_runtime(example: Cluster) -> None:
    container, venv, lab = (rank_launch(c, c.head) for c in _runtimes(example))
    assert container.container == f"sparkctl-{example.name}-r0" and container.image
    for other in (venv, lab):
        assert other.container is None and other.image is None and other.kit_files == ()
        assert not {"container", "image", "kit_files"} & set(other.as_json())


def test_a_partial_entry_reads_back_with_the_rendered_defaults() -> None:
    launch = RankLaunch.from_json({"container": "sparkctl-x-r1", "drain_s": 75})
    assert launch.unit_name == common.RANK_UNIT_NAME
    assert launch.unit_file == common.RANK_UNIT_FILE
    assert launch.env_file == common.RANK_ENV_FILE
    assert (launch.container, launch.drain_s, launch.argv, launch.kit_files) == ("sparkctl-x-r1", 75, (), ())


def test_an_unknown_runtime_is_refused() -> None:
    with pytest.raises(InputError, match="runtime"):
        RankLaunch.from_json({"runtime": "podman"})
