"""`sparkctl stage image` with the runner faked: the plan, the image column (ID and bytes moved per
node), the odd node named on failure, and the refusal without a container runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from support.runner import NODES, FakeRunner

from sparkctl.ansible import results, runner
from sparkctl.cli.stage_view import summary_table
from sparkctl.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from sparkctl.model import load_inventory
from sparkctl.stage.summaries import node_summaries

HEAD_ID = "sha256:" + "d" * 64
CHECK = "The image under the reference must be the same everywhere"


def image_runner(moved: int, failures: list[runner.Failure] | None = None) -> FakeRunner:
    """playbooks/stage.yml reporting per node through set_stats (spark_image_report): the head built
    the image, every other node received ``moved`` bytes (failed nodes report nothing)."""

    def image(host: str) -> dict[str, Any]:
        head = host == NODES[0]
        return {"id": HEAD_ID, "source": "build" if head else "head", "received": not head,
                "bytes_moved": 0 if head else moved, "seconds": 2.0, "rate_mib_s": 512.0}

    return FakeRunner(NODES, ok=9, duration_s=3.0, failures=failures or [], per_node={results.IMAGE: image})


def test_stage_image_runs_the_stage_playbook_and_shows_the_id(
    run_cli: Any, example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = image_runner(moved=3 << 30)
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
    header, *rows = [ln for ln in text.splitlines() if ln.startswith(("node ", "spark-"))]
    assert header.split()[:4] == ["node", "rank", "kit", "image"]
    # The short ID on every node; the bytes each received (the head none) and the rate below.
    assert all("✓ dddddddd " in r for r in rows) and len(rows) == len(NODES), rows
    assert rows[0].split()[-1] == "B" and all(r.rstrip().endswith("3.0 GiB") for r in rows[1:]), rows
    assert "MiB/s per node: image 512" in text


def test_stage_image_json_reports_each_node(
    run_cli: Any, example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "execute", image_runner(moved=0))
    res = run_cli("-i", str(example_copy), "--json", "stage", "image")
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)
    assert {n["image"]["id"] for n in doc["nodes"].values()} == {HEAD_ID}
    assert sum(n["image"]["bytes_moved"] for n in doc["nodes"].values()) == 0


def test_an_odd_image_fails_naming_the_node(
    run_cli: Any, example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    msg = f"spark-2: the image under sparkctl/engine:r4 is sha256:{'e' * 64}, not the head's {HEAD_ID}"
    monkeypatch.setattr(runner, "execute", image_runner(0, [runner.Failure("spark-2", CHECK, msg)]))
    res = run_cli("-i", str(example_copy), "stage", "image")
    assert res.code == EXIT_FAILED
    err = " ".join(res.err.replace("│", " ").split())
    assert "stage image failed on spark-2" in err and "not the head's" in err


def test_stage_image_without_a_container_runtime_is_bad_input(
    run_cli: Any, example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = image_runner(0)
    monkeypatch.setattr(runner, "execute", fake)
    conf = example_copy / "group_vars" / "all" / "sparkctl.yml"
    conf.write_text(conf.read_text().replace("kind: container", "kind: venv", 1))
    res = run_cli("-i", str(example_copy), "stage", "image")
    assert res.code == EXIT_USAGE and fake.plans == []
    assert "sparkctl_runtime.kind" in res.err
