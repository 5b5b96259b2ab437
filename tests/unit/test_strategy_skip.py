"""plugins/strategy/sparkctl_linear.py skips a task whose ``when`` is false for a host on the
controller, without forking a worker: the run must say and record exactly what it says and records
when every task goes to a worker (``SPARKCTL_SKIP_IN_WORKER=1``): the same callbacks with the same
results and task fields, in check mode too, and a condition that fails still fails the same way."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.modrun import REPO, needs_ansible

PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
CALLBACKS = Path(__file__).resolve().parents[1] / "support" / "callbacks"
pytestmark = needs_ansible

INVENTORY = """\
all:
  hosts:
    a:
    b:
    c:
  vars:
    ansible_connection: local
"""

INCLUDED = """\
- name: Included
  ansible.builtin.debug:
    msg: included
"""

ROLE_SPECS = """\
argument_specs:
  main:
    short_description: A role with one option
    options:
      one_word:
        type: str
        default: hello
"""

PLAY = """\
- name: Conditions, false and true
  hosts: all
  gather_facts: false
  vars:
    flag: false
    numbers: [1, 2]
  handlers:
    - name: A handler
      ansible.builtin.debug:
        msg: handled
      when: flag
  tasks:
    - name: A false condition
      ansible.builtin.debug:
        msg: never
      when: flag
    - name: A true condition
      ansible.builtin.set_fact:
        seen: 0
      when: not flag
    - name: On what an earlier task set
      ansible.builtin.debug:
        msg: "{{ seen }}"
      when: seen != 0
    - name: An undefined variable tested
      ansible.builtin.debug:
        msg: never
      when: nothing_here is defined
    - name: A secret, skipped
      ansible.builtin.debug:
        msg: secret
      no_log: true
      when: flag
    - name: Only in check mode
      ansible.builtin.debug:
        msg: check
      when: ansible_check_mode
    - name: One host only
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }}"
      when: inventory_hostname == 'b'
      notify: A handler
    - name: A false block
      when: flag
      block:
        - name: Inside the false block
          ansible.builtin.debug:
            msg: inside
        - name: Inside, with a true condition of its own
          ansible.builtin.debug:
            msg: inside
          when: not flag
    - name: A loop
      ansible.builtin.debug:
        msg: "{{ item }}"
      loop: "{{ numbers }}"
      when: item == 2
    - name: An include
      ansible.builtin.include_tasks: included.yml
      when: flag
    - name: A true include
      ansible.builtin.include_tasks: included.yml
      when: not flag
    - name: A role included, false
      ansible.builtin.include_role:
        name: "{{ playbook_dir }}/roles/one"
      when: flag
    - name: A role included on one host
      ansible.builtin.include_role:
        name: "{{ playbook_dir }}/roles/one"
      when: inventory_hostname == 'c'
    - name: An include looped
      ansible.builtin.include_tasks: included.yml
      loop: "{{ numbers }}"
      when: item == 2
    - name: Delegated
      ansible.builtin.debug:
        msg: never
      delegate_to: a
      when: flag
    - name: An assertion that holds
      ansible.builtin.assert:
        that: seen == 0
        quiet: true
    - name: An assertion that fails, ignored
      ansible.builtin.assert:
        that: seen == 1
        fail_msg: "seen is {{ seen }}"
      ignore_errors: true
    - name: A statistic
      ansible.builtin.set_stats:
        data:
          count: 1
    - name: A variable shown
      ansible.builtin.debug:
        var: seen
    - name: A fact from a template
      ansible.builtin.set_fact:
        derived: "{{ inventory_hostname ~ '-' ~ seen }}"
    - name: The fact read back
      ansible.builtin.debug:
        msg: "{{ derived }}"
    - name: A condition that cannot be evaluated
      ansible.builtin.debug:
        msg: never
      when: really_undefined
      ignore_errors: true
"""

# What the worker path itself leaves different between two runs: the objects' random UUIDs.
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _run(tmp_path: Path, *extra: str, in_worker: bool) -> tuple[list[str], str]:
    (tmp_path / "inventory.yml").write_text(INVENTORY)
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "included.yml").write_text(INCLUDED)
    (tmp_path / "roles" / "one" / "tasks").mkdir(parents=True, exist_ok=True)
    (tmp_path / "roles" / "one" / "tasks" / "main.yml").write_text(INCLUDED)
    (tmp_path / "roles" / "one" / "meta").mkdir(exist_ok=True)
    (tmp_path / "roles" / "one" / "meta" / "argument_specs.yml").write_text(ROLE_SPECS)
    record = tmp_path / f"record-{in_worker}-{'-'.join(extra)}.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS),
               ANSIBLE_CALLBACKS_ENABLED="record_results", ANSIBLE_DEPRECATION_WARNINGS="0",
               ANSIBLE_NOCOLOR="1", RECORD_RESULTS_FILE=str(record),
               SPARKCTL_SKIP_IN_WORKER="1" if in_worker else "0")
    argv = [str(PLAYBOOK), "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
            "-e", f"ansible_python_interpreter={sys.executable}", *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sorted(UUID.sub("UUID", line) for line in record.read_text().splitlines()), proc.stdout


@pytest.mark.parametrize("mode", [(), ("--check",)], ids=["run", "check"])
def test_skipped_here_records_what_a_worker_would(tmp_path: Path, mode: tuple[str, ...]) -> None:
    here, _ = _run(tmp_path, *mode, in_worker=False)
    worker, _ = _run(tmp_path, *mode, in_worker=True)
    assert here == worker
    rows: list[dict[str, Any]] = [json.loads(line) for line in here]
    skipped = {(r["host"], r["task"]) for r in rows if r["event"] == "skipped"}
    # The false conditions, with their reason; the secret's result censored as a worker's would be.
    assert ("a", "A false condition") in skipped
    assert (("b", "Only in check mode") in skipped) == (not mode)
    secret = next(r for r in rows if r["event"] == "skipped" and r["task"] == "A secret, skipped")
    assert secret["result"]["_ansible_no_log"] is True and "censored" in secret["result"]
    # The true includes expanded as a worker's result expands them: the included task ran where
    # they were true (the plain include, the role on c, the looped include's second item).
    ran = sorted(r["host"] for r in rows if r["event"] == "ok" and r["task"].endswith("Included"))
    assert ran == ["a", "a", "b", "b", "c", "c", "c"], ran
    failed = {r["host"] for r in rows if r["event"] == "failed"}
    assert failed == {"a", "b", "c"}  # the undefined condition, on every host, ignored


def test_only_plain_tasks_are_skipped_without_a_worker(tmp_path: Path) -> None:
    _, out = _run(tmp_path, "-vvvv", in_worker=False)
    here = set(re.findall(r"sparkctl_linear: (\w+): skipped without a worker: (.+)", out))
    expected = {(h, t) for h in "abc" for t in (
        "A false condition", "On what an earlier task set", "An undefined variable tested",
        "A secret, skipped", "Only in check mode", "Inside the false block",
        "Inside, with a true condition of its own", "An include", "A role included, false")} | {
        ("a", "One host only"), ("c", "One host only"), ("a", "A role included on one host"),
        ("b", "A role included on one host")}
    # A loop (an include's too), a delegated task and a handler go to a worker, as do a true
    # condition (a true include expands there) and one that cannot be evaluated.
    assert here == expected
    _, out = _run(tmp_path, "-vvvv", in_worker=True)
    assert "skipped without a worker" not in out


def test_controller_actions_run_without_a_worker(tmp_path: Path) -> None:
    """set_fact, assert, debug, set_stats, a role's argument validation and true includes run in the
    strategy's process (their records are the worker's: the test above); a looped include stays in
    a worker."""
    _, out = _run(tmp_path, "-vvvv", in_worker=False)
    here = {(h, t.rsplit(" : ", 1)[-1]) for h, t in
            re.findall(r"sparkctl_linear: (\w+): ran without a worker: (.+)", out)}
    expected = {(h, t) for h in "abc" for t in (
        "A true condition", "A true include", "Included", "An assertion that holds",
        "An assertion that fails, ignored", "A statistic", "A variable shown", "A fact from a template",
        "The fact read back", "A condition that cannot be evaluated")} | {
        ("b", "One host only"), ("c", "A role included on one host"),
        ("c", "Validating arguments against arg spec 'main' - A role with one option")}
    assert here == expected
    assert "ran without a worker: An include looped" not in out
    _, out = _run(tmp_path, "-vvvv", in_worker=True)
    assert "without a worker" not in out
