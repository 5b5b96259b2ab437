"""qualify and bench on a site of two serving groups: each group in turn, against its own rank 0
(the group's view of the site), only those --group names; one document per group under --json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.groups_site import TwoGroupSite

from sparkctl.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from sparkctl.qa.verbs import Bench, Qualify


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TwoGroupSite:
    return TwoGroupSite(tmp_path, monkeypatch)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int]]:
    """Each qualify run as (cluster name, rank 0's node, TP); every run passes."""
    seen: list[tuple[str, str, int]] = []

    def one(self: Qualify, cluster: Any) -> tuple[dict[str, Any], bool]:
        seen.append((cluster.name, cluster.head.name, cluster.profile.tp_size))
        return {"passed": True, "head": cluster.head.name}, True

    monkeypatch.setattr(Qualify, "one", one)
    return seen


def test_qualify_runs_each_group_against_its_own_rank0(run_cli: Any, site: TwoGroupSite,
                                                       runs: list[Any]) -> None:
    res = run_cli("-i", str(site.inventory), "--json", "qualify")
    assert res.code == EXIT_OK, res.out + res.err
    name = site.cluster.name
    assert runs == [(f"{name}-a", "spark-0", 2), (f"{name}-b", "spark-2", 2)]
    doc = json.loads(res.out)
    assert doc["passed"] is True and {g: d["head"] for g, d in doc["groups"].items()} == {"a": "spark-0",
                                                                                          "b": "spark-2"}


def test_qualify_group_runs_only_that_group(run_cli: Any, site: TwoGroupSite, runs: list[Any]) -> None:
    res = run_cli("-i", str(site.inventory), "qualify", "--group", "b")
    assert res.code == EXIT_OK, res.out + res.err
    assert [r[1] for r in runs] == ["spark-2"]
    assert "group b (rank 0 on spark-2)" in res.out


def test_bench_group_measures_the_named_groups_rank0(run_cli: Any, site: TwoGroupSite,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def one(self: Bench, cluster: Any, *args: Any) -> tuple[dict[str, Any], bool]:
        seen.append(cluster.head.name)
        return {"head": cluster.head.name}, cluster.head.name == "spark-2"  # b's bench failed

    monkeypatch.setattr(Bench, "one", one)
    res = run_cli("-i", str(site.inventory), "--json", "bench", "--group", "a")
    assert res.code == EXIT_OK, res.out + res.err
    assert seen == ["spark-0"] and list(json.loads(res.out)["groups"]) == ["a"]
    res = run_cli("-i", str(site.inventory), "--json", "bench")
    assert res.code == EXIT_FAILED and seen[1:] == ["spark-0", "spark-2"]
    assert run_cli("-i", str(site.inventory), "bench", "--group", "z").code == EXIT_USAGE
