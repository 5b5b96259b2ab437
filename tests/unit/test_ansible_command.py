"""The runnable ``ansible-playbook`` line of a plan (``sparkctl.ansible.command``) and the run
record that keeps it: absolute paths that work from a wheel, variables by file, no secret on it,
and a recorded line that runs as it stands."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl.ansible import command, content, runner
from sparkctl.ansible.plan import Plan

REPO = Path(__file__).resolve().parents[2]


def test_the_line_names_everything_by_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    plan = Plan("provision.yml", Path("site"), limit="spark-1", tags=("fabric", "qos"), check=True, diff=True)
    cmd = command.for_plan(plan)
    assert cmd.argv[0] == str(Path(sys.executable).parent / "ansible-playbook")  # the venv's, not PATH's
    assert cmd.argv[1:4] == ["-i", str(tmp_path / "site"), str(REPO / "playbooks" / "provision.yml")]
    assert cmd.argv[4:] == ["--limit", "spark-1", "--tags", "fabric,qos", "--check", "--diff"]
    assert cmd.playbook == REPO / "playbooks" / "provision.yml"
    assert cmd.env["ANSIBLE_CONFIG"] == str(content.ansible_cfg())
    paths = [str(p) for p in content.collections_paths()]
    assert cmd.env["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep) == paths
    assert shlex.split(cmd.line()) == [f"{k}={v}" for k, v in cmd.env.items()] + cmd.argv
    assert cmd.as_argv()[0] == "env" and cmd.as_argv()[-len(cmd.argv):] == cmd.argv


def test_extra_variables_go_by_file_never_on_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HF_TOKEN", "hf_not_on_the_line")
    plan = Plan("stage.yml", tmp_path / "site", extravars={"spark_stage_what": "weights"},
                secret_env=("HF_TOKEN",))
    with pytest.raises(ValueError, match="extra variables"):
        command.for_plan(plan)
    path = command.write_vars(plan, command.shared_vars_path(plan))
    assert path is not None and path.parent == tmp_path / "state" / "commands"
    assert path.stat().st_mode & 0o777 == 0o600
    assert command.write_vars(plan, command.shared_vars_path(plan)) == path  # same plan, same file
    cmd = command.for_plan(plan, path)
    assert cmd.argv[4:6] == ["-e", f"@{path}"]
    assert "weights" not in cmd.line() and "hf_not_on_the_line" not in cmd.line()
    assert cmd.secret_env == ("HF_TOKEN",)
    assert command.write_vars(Plan("up.yml", tmp_path), tmp_path / "none.json") is None
    assert not (tmp_path / "none.json").exists()


def test_the_vault_password_file_goes_by_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "vault-pass"
    secret.write_text("not on the line\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(secret))
    cmd = command.for_plan(Plan("up.yml", tmp_path))
    assert cmd.env["ANSIBLE_VAULT_PASSWORD_FILE"] == str(secret)
    assert "not on the line" not in cmd.line()


def test_a_run_records_a_line_that_runs_as_it_stands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record once held ``playbooks/<verb>.yml`` relative to a checkout (from a wheel: "could
    not be found"); now ``<run dir>/command`` and the run document hold the line, and running the
    line does what the run did."""
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    project = tmp_path / "content"
    (project / "playbooks").mkdir(parents=True)
    (project / "playbooks" / "tiny.yml").write_text(
        "- name: Tiny\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Say\n      ansible.builtin.debug:\n        msg: \"said {{ tiny_word }}\"\n")
    (tmp_path / "hosts.yml").write_text(
        f"all:\n  vars:\n    ansible_connection: local\n    ansible_python_interpreter: {sys.executable}\n"
        "  hosts:\n    a: {}\n")
    plan = Plan("tiny.yml", tmp_path / "hosts.yml", extravars={"tiny_word": "xyzzy"})
    res = runner.execute(plan, runs_dir=tmp_path / "runs", project_dir=project)
    assert res.ok, res.failures
    recorded = (res.run_dir / "command").read_text().strip()
    assert res.as_dict()["command"] == res.command and shlex.join(res.command[1:]) == recorded
    assert str(project / "playbooks" / "tiny.yml") in recorded
    assert f"-e @{res.run_dir / 'vars.json'}" in recorded and "xyzzy" not in recorded
    assert (res.run_dir / "vars.json").stat().st_mode & 0o777 == 0o600
    proc = subprocess.run(["bash", "-c", recorded], cwd="/", capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "said xyzzy" in proc.stdout
