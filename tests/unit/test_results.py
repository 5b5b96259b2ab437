"""Playbook results reach the CLI by set_stats key, so renaming a task never breaks a command."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sparkctl.ansible import results, runner
from sparkctl.ansible.plan import Plan

PLAYBOOK = """\
- name: Report probe
  hosts: all
  gather_facts: false
  tasks:
    - name: "{task}"
      ansible.builtin.command: echo moved-{{{{ inventory_hostname }}}}
      register: probe_out
      changed_when: false
    - name: Report to sparkctl
      ansible.builtin.set_stats:
        data:
          sparkctl_stage: "{{{{ {{inventory_hostname: {{'transfer': moved}}}} }}}}"
      vars:
        moved: {{bytes_moved: "{{{{ probe_out.stdout | length }}}}"}}
"""


def _project(tmp_path: Path, task: str) -> Path:
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "report.yml").write_text(PLAYBOOK.format(task=task))
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {Path(sys.executable)}\n"
        "  hosts:\n    spark-0: {}\n    spark-1: {}\n"
    )
    return tmp_path


@pytest.mark.parametrize("task", ["Receive from the previous rank", "A task renamed since"])
def test_results_are_read_by_key_whatever_the_task_is_called(tmp_path: Path, task: str) -> None:
    project = _project(tmp_path, task)
    plan = Plan("report.yml", project / "hosts.yml")
    res = runner.execute(plan, runs_dir=project / "runs", project_dir=project)
    assert res.ok, res.failures
    got = results.per_host(res, results.STAGE)
    assert got == {
        "spark-0": {"transfer": {"bytes_moved": len("moved-spark-0")}},
        "spark-1": {"transfer": {"bytes_moved": len("moved-spark-1")}},
    }
    assert results.per_host(res, results.FABRIC_PROBE) == {}
