"""Secrets and the runner: ansible-runner records ansible-playbook's whole environment in the run
directory, so secret variables never enter it; they reach the playbook through memory only, and a
run killed mid-way leaves no secret byte on disk."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sparkctl.ansible import runner
from sparkctl.ansible.plan import Plan
from sparkctl.model import secretenv

SECRET = "hf_t0ps3cr3t-value-7d1e"
READ_THROUGH_MEMORY = (
    "{{ (lookup('ansible.builtin.file', lookup('ansible.builtin.env', 'SPARKCTL_SECRETS_FD'))"
    " | from_json).SPARKCTL_TEST_TOKEN | hash('sha256') }}"
)


def _project(tmp: Path, pause_s: int = 0) -> Path:
    (tmp / "playbooks").mkdir()
    pause = f"    - name: Wait\n      ansible.builtin.pause:\n        seconds: {pause_s}\n" if pause_s else ""
    (tmp / "playbooks" / "secret.yml").write_text(
        "- name: Secret probe\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Secret through memory\n      ansible.builtin.set_fact:\n"
        f"        secret_digest: \"{READ_THROUGH_MEMORY}\"\n"
        "    - name: Not in this environment\n      ansible.builtin.set_fact:\n"
        "        in_env: \"{{ lookup('ansible.builtin.env', 'SPARKCTL_TEST_TOKEN') | length }}\"\n"
        + pause
    )
    (tmp / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n  hosts:\n    a: {{}}\n"
    )
    return tmp


def _no_secret_under(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_secrets_reach_the_playbook_through_memory_only(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    project = _project(tmp_path)
    monkeypatch.setenv("SPARKCTL_TEST_TOKEN", SECRET)
    plan = Plan("secret.yml", project / "hosts.yml", secret_env=("SPARKCTL_TEST_TOKEN",))
    res = runner.execute(plan, runs_dir=project / "runs", project_dir=project)
    assert res.ok, res.failures
    facts = res.task_results("Secret through memory")["a"]["ansible_facts"]
    assert facts["secret_digest"] == hashlib.sha256(SECRET.encode()).hexdigest()
    assert res.task_results("Not in this environment")["a"]["ansible_facts"]["in_env"] in (0, "0")
    assert os.environ["SPARKCTL_TEST_TOKEN"] == SECRET  # given back to sparkctl after the run
    command = json.loads((res.artifact_dir / "command").read_text())
    assert "SPARKCTL_TEST_TOKEN" not in command["env"]
    _no_secret_under(project / "runs")


def test_a_named_inventory_secret_is_withheld_whatever_its_name(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SITE_API_CREDENTIAL_FOR_RANKS", SECRET)  # no conventional suffix
    with secretenv.withheld(["SITE_API_CREDENTIAL_FOR_RANKS"]) as child:
        assert "SITE_API_CREDENTIAL_FOR_RANKS" not in os.environ
        assert json.loads(Path(child[secretenv.SECRETS_FD_ENV]).read_text())[
            "SITE_API_CREDENTIAL_FOR_RANKS"] == SECRET
    assert os.environ["SITE_API_CREDENTIAL_FOR_RANKS"] == SECRET


AGENT = """
import sys
from pathlib import Path
from sparkctl.ansible import runner
from sparkctl.ansible.plan import Plan
project = Path(sys.argv[1])
runner.execute(Plan("secret.yml", project / "hosts.yml", secret_env=("SPARKCTL_TEST_TOKEN",)),
               runs_dir=project / "runs", project_dir=project)
"""



def _text_if_there(path: Path) -> str:
    """A job event's text; "" when ansible-runner renamed it away between the listing and the read
    (its ``-partial.json`` files become the final ones)."""
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def test_a_run_killed_mid_way_leaves_no_secret_on_disk(tmp_path: Path) -> None:
    project = _project(tmp_path, pause_s=60)
    env = {**os.environ, "SPARKCTL_TEST_TOKEN": SECRET}
    proc = subprocess.Popen([sys.executable, "-c", AGENT, str(project)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        started = False
        while time.monotonic() < deadline and not started:
            events = list((project / "runs").glob("*/artifacts/*/job_events/*.json"))
            started = any('"task": "Wait"' in _text_if_there(e) for e in events)
            time.sleep(0.2)
        assert started, "the playbook never reached its pause"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # sparkctl, no clean-up at all
        proc.wait(10)
        # ansible-playbook runs in a session of its own (the runner's pty): killed too, or it would
        # outlive the test and the pytest session, still pausing on its own.
        assert _kill_all_naming(project), "no ansible-playbook of this run was found"
    _no_secret_under(project / "runs")


def _kill_all_naming(project: Path) -> list[int]:
    """SIGKILL every process whose command line names the project directory; their pids."""
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(project).encode() in a for a in argv):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed
