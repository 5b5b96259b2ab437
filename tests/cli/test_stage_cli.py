"""`sparkctl stage` with the runner faked: playbook, variables, summaries and exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.runner import NODES, FakeRunner, task_events

from sparkctl.ansible import results, runner
from sparkctl.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE

VERIFY = "Verify every checkpoint file and packed shard (full re-hash)"
FANOUT = "Receive from the previous rank and serve the next one over the fabric"


def stage_facts(host: str, ok: bool = True) -> dict[str, Any]:
    rank = NODES.index(host)
    return {
        "stage": {
            "node": host, "rank": rank, "tp": 4, "depth": "quick", "ok": ok,
            "weights": {"present": True, "verified": ok, "files": 6, "bytes": 1 << 30, "problems": []},
            "engram": {"present": True, "verified": ok, "problems": [],
                       "files": [{"name": f"engram-l{layer}-r{rank}of4.bin"} for layer in (1, 14)]},
        }
    }


TRANSFER = {"counts": {"transferred": 6}, "bytes_moved": 1 << 30, "bytes_total": 1 << 30, "seconds": 2.0,
            "rate_mib_s": 512.0}


def stage_report(host: str) -> dict[str, Any]:
    """What playbooks/stage.yml reports for one node through set_stats (failed nodes report nothing)."""
    return {"stage": stage_facts(host)["stage"], "pack": {},
            "transfer": TRANSFER if host != NODES[0] else {"skipped": True}}


def stage_runner(failures: list[runner.Failure] | None = None) -> FakeRunner:
    return FakeRunner(NODES, ok=9, duration_s=3.0, failures=failures or [], events=task_events(FANOUT),
                      per_node={results.STAGE: stage_report})


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    f = stage_runner()
    monkeypatch.setattr(runner, "execute", f)
    return f


def test_stage_all_runs_the_stage_playbook(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    res = run_cli("-i", str(example_copy), "stage")
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert plan.playbook == "stage.yml" and Path(plan.inventory) == example_copy
    assert plan.extravars == {
        "spark_stage_what": "all",
        "spark_stage_verify_only": False,
        "spark_stage_force": False,
    }
    row = next(ln for ln in res.out.splitlines() if ln.startswith("spark-3"))
    assert row.split()[4] == "✓", row  # the checkpoint verified (weights column)


def test_stage_options_become_role_variables(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    res = run_cli("-i", str(example_copy), "stage", "engram", "--force", "--bwlimit", "200",
                  "--stall-timeout", "30")
    assert res.code == EXIT_OK, res.err
    ev = fake.plans[0].extravars
    assert (ev["spark_stage_what"], ev["spark_stage_force"]) == ("engram", True)
    assert ev["spark_stage_bwlimit_mib_s"] == 200 and ev["spark_stage_stall_timeout_s"] == 30


def test_stage_json_reports_each_node(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    res = run_cli("-i", str(example_copy), "--json", "stage", "weights")
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)
    assert doc["ok"] and doc["what"] == "weights"
    assert doc["nodes"]["spark-2"]["engram"]["verified"] is True
    assert doc["nodes"]["spark-2"]["transfer"]["bytes_moved"] == 1 << 30


def test_verify_only_failure_names_node_and_file(
    run_cli: Any, example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    msg = "spark-1: /mnt/nvme/models/x/model-00002-of-00048.safetensors: SHA-256 ab… differs"
    f = stage_runner([runner.Failure("spark-1", VERIFY, msg)])
    monkeypatch.setattr(runner, "execute", f)
    res = run_cli("-i", str(example_copy), "stage", "--verify-only")
    assert res.code == EXIT_FAILED
    assert f.plans[0].extravars["spark_stage_verify_only"] is True
    assert "spark-1" in res.err and "model-00002-of-00048.safetensors" in res.err


def test_bad_inventory_exits_2_without_running(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    hosts = example_copy / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("sparkctl_rank: 3", "sparkctl_rank: 1"))
    res = run_cli("-i", str(example_copy), "stage")
    assert res.code == EXIT_USAGE
    assert fake.plans == []


def test_unknown_what_is_a_usage_error(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    res = run_cli("-i", str(example_copy), "stage", "everything")
    assert res.code == EXIT_USAGE and fake.plans == []


def test_stage_engram_on_a_resident_engram_site_packs_nothing_and_says_so(
        run_cli: Any, tmp_path: Path, fake: FakeRunner) -> None:
    import shutil

    site = tmp_path / "tp8"
    shutil.copytree(Path(__file__).resolve().parents[2] / "inventory" / "examples" / "switch-tp8", site)
    res = run_cli("-i", str(site), "stage", "engram")
    assert res.code == EXIT_OK, res.err
    assert fake.plans == []
    assert "nothing to pack" in res.out and "sg17-tp8" in res.out
    res = run_cli("-i", str(site), "--json", "stage", "engram")
    assert res.code == EXIT_OK, res.err
    assert "resident" in json.loads(res.out)["note"] and fake.plans == []


def test_stage_on_a_site_mixing_packed_and_resident_groups_names_the_resident_nodes(
        run_cli: Any, tmp_path: Path, fake: FakeRunner) -> None:
    import shutil

    import yaml

    site = tmp_path / "two"
    shutil.copytree(Path(__file__).resolve().parents[2] / "inventory" / "examples" / "switch-2xtp4", site)
    gv = site / "group_vars" / "all" / "sparkctl.yml"
    doc = yaml.safe_load(gv.read_text())
    doc["sparkctl_groups"][1]["profile_overrides"] = {
        "engram": "resident", "memory": {"engram_packed_gib": 0},
        "env": {"OFFLOAD_MODE": None, "DSV41_PACKED_DIR": None}}
    gv.write_text(yaml.safe_dump(doc))
    res = run_cli("-i", str(site), "stage", "engram", "--force")
    assert res.code == EXIT_OK, res.err
    flat = " ".join(res.out.split())
    assert "no shards packed on group b (m1-1m): spark-4, spark-5, spark-6, spark-7" in flat
    assert [p.playbook for p in fake.plans] == ["stage.yml"]  # group a's nodes still pack
