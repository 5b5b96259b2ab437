"""The rank's secrets config reaches the node without a file on the controller: the spark_rank task
that writes it, run by ansible-playbook against localhost (the repository's ansible.cfg, a fake API
key), writes 0600 with the exact text, reports 0 changed the second time, is honest in check mode,
and a run killed in the middle of that task leaves the key in no file of the controller."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.modrun import LOCAL_RUN_ENV, REPO, needs_ansible

from sparkctl.model import load_inventory
from sparkctl.render import rank

PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
KEY = "sk-fake-4c1d9e0b7a-never-on-disk"

pytestmark = needs_ansible

PLAY = """\
- name: The rank's secrets task alone
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Arm the gate (the next module the interpreter runs waits there)
      ansible.builtin.file:
        path: "{{ gate_arm }}"
        state: touch
        mode: "0600"
      when: gate_arm | length > 0
    - name: The task under test
      ansible.builtin.include_role:
        name: spark_rank
        tasks_from: secrets
      vars:
        spark_rank_secrets_file: "{{ dest }}"
        spark_rank_inventory: "{{ inventory }}"
"""


class Run:
    def __init__(self, tmp: Path, inventory: Path) -> None:
        self.tmp = tmp
        self.inventory = inventory
        self.etc = tmp / "etc-sparkctl"
        self.etc.mkdir(mode=0o700)
        self.dest = self.etc / "secrets.yaml"
        self.local_tmp = tmp / "ansible-local"
        self.remote_tmp = tmp / "ansible-remote"
        self.home = tmp / "home"
        for d in (self.local_tmp, self.remote_tmp, self.home):
            d.mkdir()
        self.play = tmp / "play.yml"
        self.play.write_text(PLAY)
        # The module interpreter: once the gate is armed, it stops before running the module (the
        # module and its arguments wait unread in the pipe), as a run killed at that task would.
        self.arm = tmp / "gate-armed"
        self.at_gate = tmp / "at-gate"
        self.python = tmp / "python-gate"
        self.python.write_text(f"#!/bin/sh\nif [ -e {self.arm} ]; then : > {self.at_gate}; exec sleep 300; "
                               f"fi\nexec {sys.executable} \"$@\"\n")
        self.python.chmod(0o755)

    def env(self, key: str) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
            **LOCAL_RUN_ENV,
            "SPARKCTL_API_KEY": key,
            "HOME": str(self.home),
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_LOCAL_TEMP": str(self.local_tmp),
            "ANSIBLE_REMOTE_TEMP": str(self.remote_tmp),
            "ANSIBLE_VARS_ENABLED": "host_group_vars",
            "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def argv(self, *extra: str, gate: bool = False) -> list[str]:
        return [str(PLAYBOOK), "-i", "localhost,", "-c", "local", str(self.play),
                "-e", f"ansible_python_interpreter={self.python}",
                "-e", f"dest={self.dest}", "-e", f"inventory={self.inventory}",
                "-e", f"gate_arm={self.arm if gate else ''}", *extra]

    def play_once(self, key: str = KEY, *extra: str) -> int:
        proc = subprocess.run(self.argv(*extra), capture_output=True, text=True, cwd=REPO,
                              env=self.env(key), timeout=240, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert key not in proc.stdout + proc.stderr
        recap = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", proc.stdout)
        assert recap, proc.stdout
        return int(recap.group(1))

    def files_holding(self, needle: str, skip: Path | None = None) -> list[Path]:
        hits = []
        for path in self.tmp.rglob("*"):
            if path == skip or not path.is_file() or path.is_symlink():
                continue
            try:
                if needle.encode() in path.read_bytes():
                    hits.append(path)
            except OSError:
                continue
        return hits


@pytest.fixture
def run(tmp_path: Path, example_copy: Path) -> Run:
    work = tmp_path / "work"
    work.mkdir()
    return Run(work, example_copy)


def test_no_task_of_the_role_writes_a_secret_with_copy_content() -> None:
    """`copy content=` stages its content in a file under the controller's local temporary directory."""
    offenders = []
    for path in sorted((REPO / "roles").rglob("tasks/*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            for module in ("ansible.builtin.copy", "copy", "ansible.builtin.template", "template"):
                args = task.get(module)
                if isinstance(args, dict) and "secret" in str(args.get("content", "")):
                    offenders.append(f"{path.relative_to(REPO)}: {task.get('name')}")
    assert offenders == []


def test_the_secrets_file_is_written_0600_exactly_then_left_alone(run: Run, example_copy: Path) -> None:
    assert run.play_once() == 1
    expected = rank.rank_secrets_text(load_inventory(example_copy), {"api_key": KEY})
    assert run.dest.read_text() == expected and yaml.safe_load(expected) == {"api-key": KEY}
    assert run.dest.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in run.etc.iterdir()) == ["secrets.yaml"]  # no temporary file left
    assert run.play_once() == 0
    # A changed key in check mode: reported as a change, nothing written.
    assert run.play_once(KEY + "-rotated", "--check") == 1
    assert run.dest.read_text() == expected
    # A file with the right text but a looser mode is rewritten 0600.
    run.dest.chmod(0o644)
    assert run.play_once() == 1 and run.dest.stat().st_mode & 0o777 == 0o600
    assert run.play_once(KEY + "-rotated") == 1
    assert yaml.safe_load(run.dest.read_text()) == {"api-key": KEY + "-rotated"}
    assert run.files_holding(KEY, skip=run.dest) == []


def test_a_run_killed_at_the_task_leaves_the_key_in_no_controller_file(run: Run) -> None:
    proc = subprocess.Popen(run.argv(gate=True), cwd=REPO, env=run.env(KEY), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: list[Path] = []
    try:
        deadline = time.monotonic() + 180
        while not run.at_gate.exists():  # the key is never in the local temporary directory meanwhile
            assert proc.poll() is None, proc.communicate()[0].decode(errors="replace")
            assert time.monotonic() < deadline, "the task never reached its module"
            seen += [p for p in run.local_tmp.rglob("*") if p.is_file() and KEY.encode() in _bytes(p)]
            time.sleep(0.02)
        seen += run.files_holding(KEY)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.stdout is not None
    proc.stdout.close()
    assert seen == []
    assert run.files_holding(KEY) == []  # after the kill: nothing left anywhere under the run's dirs
    assert not run.dest.exists()


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
