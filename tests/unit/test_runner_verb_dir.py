"""One verb, one run directory: a playbook run as part of a verb (`up`) keeps its records in a fresh
directory inside the verb's run directory instead of making a run directory of its own."""

from __future__ import annotations

import inspect
from pathlib import Path

from sparkctl.ansible import runner
from sparkctl.ansible.plan import Plan


def test_each_playbook_of_a_verb_gets_its_own_directory_inside_the_verbs(tmp_path: Path) -> None:
    verb_dir = tmp_path / "runs" / "20260101T000000-up"
    down, up, down_again = (runner.playbook_dir_in(verb_dir, Plan(book, tmp_path / "hosts.yml"))
                            for book in ("down.yml", "up.yml", "down.yml"))
    assert [p.name for p in (down, up, down_again)] == ["playbook-down", "playbook-up", "playbook-down.1"]
    assert all(p.parent == verb_dir and p.stat().st_mode & 0o777 == 0o700 for p in (down, up, down_again))
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["20260101T000000-up"]


def test_execute_takes_the_verbs_run_directory() -> None:
    params = inspect.signature(runner.execute).parameters
    assert params["run_dir"].default is None and params["run_dir"].kind is inspect.Parameter.KEYWORD_ONLY


def test_a_playbook_run_in_the_verbs_run_directory(tmp_path: Path) -> None:
    import sys

    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "tiny.yml").write_text(
        "- name: Tiny\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Say\n      ansible.builtin.debug:\n        msg: hi\n")
    (tmp_path / "hosts.yml").write_text(
        f"all:\n  vars:\n    ansible_connection: local\n    ansible_python_interpreter: {sys.executable}\n"
        "  hosts:\n    a: {}\n")
    verb_dir = tmp_path / "runs" / "20260101T000000-up"
    res = runner.execute(Plan("tiny.yml", tmp_path / "hosts.yml"), run_dir=verb_dir, project_dir=tmp_path)
    assert res.ok and res.run_dir == verb_dir / "playbook-tiny"
    assert res.artifact_dir.is_relative_to(res.run_dir)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["20260101T000000-up"]
