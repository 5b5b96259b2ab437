"""`sparkctl stage`'s fast path through the CLI: nothing to stage means no playbook, one reason
means the playbook, and --full, --verify-only and --force always run it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from support import synth_checkpoint
from support.runner import FakeRunner
from support.stage_fakes import EXPECTED, AnswerFleet, clean_stagecheck, kit_reference, stage_site

from sparkctl.ansible import runner
from sparkctl.cli import common
from sparkctl.errors import EXIT_OK


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    cluster = stage_site(tmp_path)
    synth_checkpoint.write_checkpoint(cluster.checkpoint.path, engram_rows=(53, 49), filler_shards=1,
                                      filler_mib=0.01)
    answers = clean_stagecheck(cluster, EXPECTED)
    fleet = AnswerFleet(answers)
    rec = FakeRunner([n.name for n in cluster.nodes], ok=3)
    tools = dataclasses.replace(common.tools(), fleet=lambda cluster: fleet,
                                kit_reference=lambda cluster: kit_reference())
    monkeypatch.setattr(common, "tools", lambda: tools)
    monkeypatch.setattr(runner, "execute", rec)
    inv = tmp_path / "lab"
    return {"inv": str(inv), "fleet": fleet, "answers": answers, "runs": rec}


def test_nothing_to_stage_runs_no_playbook(run_cli: Any, site: dict[str, Any]) -> None:
    res = run_cli("-i", site["inv"], "--json", "stage")
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)
    assert site["runs"].plans == [] and doc["path"]["path"] == "fast" and doc["run"] is None
    assert doc["nodes"]["spark-3"]["engram"]["verified"] and set(site["fleet"].scripts) == set(doc["nodes"])
    res = run_cli("-i", site["inv"], "stage")
    assert res.code == EXIT_OK and "nothing to stage on 4 nodes" in res.out and site["runs"].plans == []


def test_one_difference_runs_the_playbook_and_says_why(run_cli: Any, site: dict[str, Any]) -> None:
    site["answers"]["spark-2"]["engram"]["verified"] = False
    res = run_cli("-i", site["inv"], "stage")
    assert res.code == EXIT_OK, res.err
    assert len(site["runs"].plans) == 1 and site["runs"].plans[0].playbook == "stage.yml"
    assert "running playbooks/stage.yml: spark-2: Engram shards: not packed" in res.out
    res = run_cli("-i", site["inv"], "--json", "stage")
    path = json.loads(res.out)["path"]
    assert path["path"] == "playbook" and path["reasons"] == ["spark-2: Engram shards: not packed"]


@pytest.mark.parametrize("flag", ["--full", "--verify-only", "--force"])
def test_the_flags_that_always_run_the_playbook(run_cli: Any, site: dict[str, Any], flag: str) -> None:
    res = run_cli("-i", site["inv"], "--json", "stage", flag)
    assert res.code == EXIT_OK, res.err
    assert len(site["runs"].plans) == 1 and site["fleet"].scripts == {}
    assert json.loads(res.out)["path"]["reasons"] == [flag]
