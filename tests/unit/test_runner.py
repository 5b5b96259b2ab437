"""sparkctl.ansible.runner against localhost (connection: local): stats, failures, results, run dirs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sparkctl.ansible import runner
from sparkctl.ansible.plan import Plan

PLAYBOOK = """\
- name: Runner probe
  hosts: all
  gather_facts: false
  tasks:
    - name: Echo
      ansible.builtin.command: echo hi-{{ inventory_hostname }}
      changed_when: false
    - name: Touch a file
      ansible.builtin.copy:
        content: "x\\n"
        dest: "{{ probe_dir }}/{{ inventory_hostname }}.txt"
        mode: "0644"
    - name: Secret from the environment
      ansible.builtin.set_fact:
        seen_secret: "{{ lookup('ansible.builtin.env', 'SPARKCTL_TEST_SECRET') | length }}"
    - name: Fail on b
      ansible.builtin.fail:
        msg: boom on purpose
      when: inventory_hostname == 'b'
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "probe.yml").write_text(PLAYBOOK)
    py = Path(sys.executable)
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {py}\n"
        f"    probe_dir: {tmp_path / 'out'}\n"
        "  hosts:\n    a: {}\n    b: {}\n"
    )
    (tmp_path / "out").mkdir()
    return tmp_path


def _run(project: Path, **plan_kw: object) -> tuple[runner.RunResult, list[runner.RunnerEvent]]:
    events: list[runner.RunnerEvent] = []
    plan = Plan("probe.yml", project / "hosts.yml", **plan_kw)  # type: ignore[arg-type]
    res = runner.execute(plan, events.append, runs_dir=project / "runs", project_dir=project)
    return res, events


def test_stats_failures_and_results(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_TEST_SECRET", "s3cr3t-value")
    res, events = _run(project)
    assert res.rc == 2 and res.status == "failed" and not res.ok
    assert res.stats["a"].failed == 0 and res.stats["a"].changed == 1
    assert res.stats["b"].failed == 1
    assert [(f.host, f.task, f.msg) for f in res.failures] == [("b", "Fail on b", "boom on purpose")]
    assert res.task_results("Echo")["a"]["stdout"] == "hi-a"
    assert (project / "out" / "a.txt").read_text() == "x\n"
    kinds = {e.kind for e in events}
    assert {runner.PLAY, runner.TASK, runner.OK, runner.CHANGED, runner.FAILED, runner.DONE} <= kinds
    # the run dir: under runs/, named by verb, artifacts inside; the secret is in no file there
    assert res.run_dir.parent == project / "runs" and res.run_dir.name.endswith("-probe")
    assert res.artifact_dir.is_relative_to(res.run_dir)
    assert (res.artifact_dir / "rc").read_text().strip() == "2"
    for path in res.run_dir.rglob("*"):
        if path.is_file():
            assert "s3cr3t-value" not in path.read_text(errors="replace"), path
    envvars = (res.run_dir / "env" / "envvars").read_text()
    assert "ANSIBLE_HOST_KEY_CHECKING" in envvars and str(res.run_dir / "ansible-home") in envvars


def test_second_run_reports_no_change_and_check_mode(project: Path) -> None:
    _run(project, limit="a")
    again, _ = _run(project, limit="a")
    assert again.ok and again.stats["a"].changed == 0 and set(again.stats) == {"a"}
    (project / "out" / "a.txt").write_text("edited\n")
    checked, events = _run(project, limit="a", check=True, diff=True)
    assert checked.ok and checked.stats["a"].changed == 1
    assert (project / "out" / "a.txt").read_text() == "edited\n"  # check mode touched nothing
    assert any(e.kind == runner.DIFF for e in events)


def test_missing_playbook_is_usage_error(project: Path) -> None:
    with pytest.raises(runner.SparkctlError) as err:
        plan = Plan("nope.yml", project / "hosts.yml")
        runner.execute(plan, runs_dir=project / "runs", project_dir=project)
    assert err.value.exit_code == 2


def test_run_dirs_are_unique(tmp_path: Path) -> None:
    a = runner.new_run_dir("provision", tmp_path)
    b = runner.new_run_dir("provision", tmp_path)
    assert a != b and a.is_dir() and b.is_dir()
    assert oct(a.stat().st_mode & 0o777) == "0o700"


def test_control_dir_falls_back_when_path_too_long(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 80)
    deep.mkdir()
    cp = runner.control_path_dir(deep)
    assert len(str(cp)) <= 60 and cp.is_dir()
    cp.rmdir()


def test_environment_puts_interpreter_bin_first(tmp_path: Path) -> None:
    env = runner.run_environment(tmp_path, tmp_path / "cp")
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert env["ANSIBLE_CONFIG"].endswith("ansible.cfg")
    assert env["ANSIBLE_SSH_CONTROL_PATH_DIR"] == str(tmp_path / "cp")
