"""`sparkctl stage kit` and the kit check of `up`, with the runner (and for `up` the SSH fleet and
the API) faked: which playbook and variables, the kit column, the exit codes, and the refusal that
names the node, the file and both digests."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import gates_fakes as fakes
from support.runner import NODES, FakeRunner

from sparkctl.ansible import results, runner
from sparkctl.ansible.plan import for_stage
from sparkctl.cli import common
from sparkctl.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE

COMMIT = "25e7cb82f6524e3bbc46db6a9a54125e75e36d0e"
VERIFY = "Verify every kit file and the current link against the configured kit"
OVERLAY = "patches/source/python/sglang/srt/distributed/device_communicators/pynccl.py"
TAMPERED = (f"spark-1: kit {COMMIT} fails verification: {OVERLAY}: content differs "
            f"(expected {'a' * 64}, actual {'b' * 64})")


def kit_runner(failures: list[runner.Failure] | None = None, moved: int = 0) -> FakeRunner:
    """playbooks/stage.yml as seen through set_stats: the kit reported per node, or failures."""
    transfer = {"counts": {"keep": 12}, "bytes_moved": moved, "bytes_total": 81920, "seconds": 0.2,
                "files": {"a": "keep"}, "log": []}

    def kit(host: str) -> dict[str, Any]:
        return {"version": COMMIT, "tree_sha256": "c" * 64, "verified": True, "files": 12, "current": COMMIT,
                "switched": False, "transfer": transfer, "image": {"checked": False, "reason": "absent"}}

    return FakeRunner(NODES, ok=5, failures=failures or [], per_node={results.KIT: kit})


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    f = kit_runner()
    monkeypatch.setattr(runner, "execute", f)
    return f


def test_stage_kit_runs_the_stage_playbook_for_the_kit(run_cli: Any, example_copy: Path,
                                                       fake: FakeRunner) -> None:
    res = run_cli("-i", str(example_copy), "stage", "kit")
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert plan.playbook == "stage.yml"
    assert plan.extravars == {"spark_stage_what": "kit", "spark_stage_verify_only": False,
                              "spark_stage_force": False}
    rows = [ln.split() for ln in res.out.splitlines() if ln.startswith("spark-")]
    assert rows and all(r[2:4] == ["✓", COMMIT[:8]] for r in rows), rows  # the kit verified, its commit
    assert plan.argv()[-1] == "playbooks/stage.yml"


def test_stage_kit_json_carries_version_digest_and_bytes(run_cli: Any, example_copy: Path,
                                                         fake: FakeRunner) -> None:
    res = run_cli("-i", str(example_copy), "--json", "stage", "kit")
    assert res.code == EXIT_OK, res.err
    kit = json.loads(res.out)["nodes"]["spark-3"]["kit"]
    assert (kit["version"], kit["verified"], kit["current"]) == (COMMIT, True, COMMIT)
    assert kit["transfer"] == {"counts": {"keep": 12}, "bytes_moved": 0, "bytes_total": 81920, "seconds": 0.2}
    assert kit["image"] == {"checked": False, "image_id": None, "reason": "absent"}


def test_stage_kit_verify_only_names_node_path_and_digests(
    run_cli: Any, example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = kit_runner([runner.Failure("spark-1", VERIFY, TAMPERED)])
    monkeypatch.setattr(runner, "execute", f)
    res = run_cli("-i", str(example_copy), "stage", "kit", "--verify-only")
    assert res.code == EXIT_FAILED
    assert f.plans[0].extravars["spark_stage_verify_only"] is True
    assert "stage kit --verify-only failed on spark-1" in res.err
    text = "".join(ch for line in res.err.splitlines() for ch in line.strip("│ "))
    assert OVERLAY.replace(" ", "") in text and "a" * 64 in text and "b" * 64 in text


def test_stage_kit_without_a_kit_is_bad_input(run_cli: Any, tmp_path: Path, fake: FakeRunner) -> None:
    cluster, _ = fakes.lab_cluster(tmp_path)  # a site whose profile needs no kit, and has none
    assert cluster.kit is None
    res = run_cli("-i", str(cluster.inventory_dir), "stage", "kit")
    assert res.code == EXIT_USAGE and fake.plans == []
    assert "configures no serving kit (sparkctl_kit)" in " ".join(res.err.split())
    res = run_cli("-i", str(cluster.inventory_dir), "stage", "all")  # all: the kit is skipped, not refused
    assert res.code == EXIT_OK, res.err


def test_plan_accepts_kit_and_refuses_the_unknown() -> None:
    cluster = type("C", (), {"inventory_dir": "/inv", "secrets": {}, "nodes": []})()
    assert for_stage(cluster, "kit", verify_only=True).extravars["spark_stage_what"] == "kit"
    with pytest.raises(ValueError, match="what must be one of"):
        for_stage(cluster, "kits")


# --- up refuses a changed kit before any unit is installed -----------------------------------------


def test_up_refuses_a_tampered_kit_and_starts_nothing(run_cli: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, doc = fakes.lab_cluster(tmp_path)
    nodes = fakes.FakeNodes([n.name for n in cluster.nodes], {n.name: n.rank for n in cluster.nodes})
    api = fakes.FakeApi(cluster, doc)
    playbooks = FakeRunner(nodes.state, fail_on={"up.yml": [runner.Failure("spark-1", VERIFY, TAMPERED)]})
    tools = dataclasses.replace(common.tools(), execute=playbooks, fleet=lambda c: nodes, http=api.client,
                                new_run_dir=lambda verb: tmp_path / f"run-{verb}")
    monkeypatch.setattr(common, "tools", lambda: tools)
    res = run_cli("-i", str(cluster.inventory_dir), "up")
    assert res.code == EXIT_FAILED
    assert playbooks.books()[0] == "up.yml" and all(st.unit == "inactive" for st in nodes.state.values())
    text = "".join(line.strip("│ ") for line in res.err.splitlines())
    assert "spark-1" in res.err and OVERLAY in text and "a" * 64 in text and "b" * 64 in text


def test_up_playbook_checks_the_kit_before_installing_units() -> None:
    plays = yaml.safe_load((Path(__file__).resolve().parents[2] / "playbooks" / "up.yml").read_text())
    names = [p.get("name", "") for p in plays]
    kit = next(i for i, p in enumerate(plays) if "serving kit" in p.get("name", ""))
    assert kit < names.index("Install the rank units")
    assert plays[kit]["any_errors_fatal"] is True
    (task,) = plays[kit]["tasks"]
    assert task["ansible.builtin.include_role"] == {"name": "spark_kit", "tasks_from": "verify"}
