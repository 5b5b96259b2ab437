"""`sparkctl ansible-command VERB`: the runnable ansible-playbook line of the plan the verb itself
runs (the same Plan, captured from the verb with the runner faked), variables by file, the line
alone on stdout, bad verbs and options refused with exit 2, and a line ansible-playbook accepts."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.runner import NODES, FakeRunner

from sparkctl.ansible import command, runner
from sparkctl.ansible import plan as planning
from sparkctl.errors import EXIT_OK, EXIT_USAGE
from sparkctl.model import load_inventory

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    f = FakeRunner([*NODES, "crs812"])
    monkeypatch.setattr(runner, "execute", f)
    return f


def _line(res: Any) -> list[str]:
    assert res.code == EXIT_OK, res.err
    lines = res.out.splitlines()
    assert len(lines) == 1, res.out  # one line on stdout, for a shell or a script
    return shlex.split(lines[0])


@pytest.mark.parametrize(
    ("verb", "options"),
    [
        (["provision"], ["--check", "--diff", "--limit", "spark-1,spark-2", "--tags", "fabric,qos"]),
        (["provision"], ["--full"]),
        (["switch", "diff"], []),
        (["check", "fabric"], []),
    ],
)
def test_the_line_is_the_plan_the_verb_runs(
    run_cli: Any, example_copy: Path, fake: FakeRunner, verb: list[str], options: list[str]
) -> None:
    run_cli("-i", str(example_copy), *verb, *options)
    (ran,) = fake.plans
    words = _line(run_cli("ansible-command", *verb, *options, "-i", str(example_copy)))
    vars_file = command.shared_vars_path(ran) if ran.extravars else None
    assert words == shlex.split(command.for_plan(ran, vars_file).line())
    playbook = Path(words[words.index("-i") + 2])
    assert playbook.is_absolute() and playbook.is_file() and playbook.name == ran.playbook
    assert words[words.index("-i") + 1] == str(example_copy)
    if ran.extravars:
        assert json.loads(vars_file.read_text()) == ran.extravars  # type: ignore[union-attr]


def test_stage_variables_go_in_a_file(run_cli: Any, example_copy: Path, tmp_path: Path) -> None:
    words = _line(run_cli("ansible-command", "stage", "weights", "--verify-only", "-i", str(example_copy)))
    vars_at = words[words.index("-e") + 1]
    assert vars_at.startswith("@")
    path = Path(vars_at[1:])
    assert path.is_relative_to(tmp_path / "sparkctl-state")
    doc = json.loads(path.read_text())
    assert (doc["spark_stage_what"], doc["spark_stage_verify_only"]) == ("weights", True)
    expected = planning.for_stage(load_inventory(example_copy), "weights", verify_only=True)
    assert doc == expected.extravars
    assert Path(words[words.index("-i") + 2]).name == "stage.yml"


def test_json_names_the_secret_variables_never_their_values(
    run_cli: Any, example_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_never_printed")
    res = run_cli("--json", "ansible-command", "stage", "-i", str(example_copy))
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)
    assert "HF_TOKEN" in doc["secret_env"] and "hf_never_printed" not in res.out + res.err
    assert Path(doc["playbook"]).is_file() and doc["command"][0] == "env"
    assert shlex.split(doc["line"]) == doc["command"][1:]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["status"], "runs no playbook"),
        (["up", "--check"], "--check"),
        (["stage", "everything"], "everything"),
        (["switch", "show"], "show"),
        (["provision", "--limit", "spark-9"], "spark-9"),
    ],
)
def test_bad_verbs_and_options_exit_2(run_cli: Any, example_copy: Path, args: list[str], needle: str) -> None:
    res = run_cli("ansible-command", *args, "-i", str(example_copy))
    assert res.code == EXIT_USAGE
    assert needle in res.err and res.out == ""


def test_ansible_playbook_accepts_the_line(run_cli: Any, example_copy: Path) -> None:
    words = _line(run_cli("ansible-command", "provision", "-i", str(example_copy)))
    proc = subprocess.run(["bash", "-c", shlex.join(words) + " --syntax-check"], cwd="/",
                          capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"playbook: {REPO / 'playbooks' / 'provision.yml'}" in proc.stdout
