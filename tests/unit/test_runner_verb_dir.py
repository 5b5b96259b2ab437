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
