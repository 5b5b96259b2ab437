"""`sparkctl stage image` with the runner faked: the plan, the image column (ID and bytes moved per
node), the odd node named on failure, and the refusal without a container runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_runs import reported_run
from rich.console import Console

from sparkctl.ansible import results, runner
from sparkctl.ansible.plan import Plan
from sparkctl.cli.stage_view import summary_table
from sparkctl.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from sparkctl.model import load_inventory
from sparkctl.stage.summaries import node_summaries

NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]
HEAD_ID = "sha256:" + "d" * 64
CHECK = "The image under the reference must be the same everywhere"


class FakeRunner:
    def __init__(self, moved: int, failures: list[runner.Failure] | None = None):
        self.plans: list[Plan] = []
        self.moved, self.failures = moved, failures or []

    def __call__(self, plan: Plan, on_event: Any = None, **_: Any) -> runner.RunResult:
        self.plans.append(plan)
        bad = {f.host for f in self.failures}
        # What playbooks/stage.yml reports per node through set_stats (spark_image_report).
        reported = {
            results.IMAGE: {
                h: {
                    "id": HEAD_ID,
                    "source": "build" if h == NODES[0] else "head",
                    "received": h != NODES[0],
                    "bytes_moved": 0 if h == NODES[0] else self.moved,
                    "seconds": 2.0,
                    "rate_mib_s": 512.0,
                }
                for h in NODES
                if h not in bad
            }
        }
        return reported_run(plan, NODES, self.failures, reported, ok=9, duration_s=3.0)


def test_stage_image_runs_the_stage_playbook_and_shows_the_id(
    run_cli: Any, example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeRunner(moved=3 << 30)
    monkeypatch.setattr(runner, "execute", fake)
    res = run_cli("-i", str(example_copy), "stage", "image")
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert plan.playbook == "stage.yml" and plan.extravars["spark_stage_what"] == "image"
    summaries = node_summaries(fake(plan))
    table = summary_table(load_inventory(example_copy), summaries, False, "image")
    wide = Console(width=250, record=True)
    wide.print(table)
    text = wide.export_text()
    assert "┃ image " in text
    assert "dddddddddddd (3.00 GiB @ 512 MiB/s)" in text and "dddddddddddd (moved 0 B)" in text


def test_stage_image_json_reports_each_node(
    run_cli: Any, example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "execute", FakeRunner(moved=0))
    res = run_cli("-i", str(example_copy), "--json", "stage", "image")
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)
    assert {n["image"]["id"] for n in doc["nodes"].values()} == {HEAD_ID}
    assert sum(n["image"]["bytes_moved"] for n in doc["nodes"].values()) == 0


def test_an_odd_image_fails_naming_the_node(
    run_cli: Any, example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    msg = f"spark-2: the image under sparkctl/engine:r4 is sha256:{'e' * 64}, not the head's {HEAD_ID}"
    monkeypatch.setattr(runner, "execute", FakeRunner(0, [runner.Failure("spark-2", CHECK, msg)]))
    res = run_cli("-i", str(example_copy), "stage", "image")
    assert res.code == EXIT_FAILED
    err = " ".join(res.err.replace("│", " ").split())
    assert "stage image failed on spark-2" in err and "not the head's" in err


def test_stage_image_without_a_container_runtime_is_bad_input(
    run_cli: Any, example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeRunner(0)
    monkeypatch.setattr(runner, "execute", fake)
    conf = example_copy / "group_vars" / "all" / "sparkctl.yml"
    conf.write_text(conf.read_text().replace("kind: container", "kind: venv", 1))
    res = run_cli("-i", str(example_copy), "stage", "image")
    assert res.code == EXIT_USAGE and fake.plans == []
    assert "sparkctl_runtime.kind" in res.err
