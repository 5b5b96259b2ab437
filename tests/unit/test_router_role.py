"""The spark_router role's staging of the pinned wheel, run by ansible-playbook against localhost:
the wheel is found in the controller's wheel directory for this machine's architecture, refused when
its digest is not the pinned one, copied, installed into the router's venv without an index or
dependencies, and a second run changes nothing; check mode writes nothing and reports the change."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.modrun import LOCAL_RUN_ENV, REPO, needs_ansible

PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
pytestmark = needs_ansible

PLAY = """\
- name: The router role's staging alone
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The tasks under test
      ansible.builtin.include_role:
        name: spark_router
        tasks_from: stage
"""


def _wheel(directory: Path, name: str = "fakegw", version: str = "1.0.0", body: str = "VALUE = 1\n") -> Path:
    """A minimal pure wheel, as pip installs it."""
    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": body,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as z:
        for arc, text in files.items():
            z.writestr(arc, text)
        z.writestr(f"{info}/RECORD", "".join(f"{arc},,\n" for arc in files) + f"{info}/RECORD,,\n")
    return path


KEY_PLAY = """\
- name: The router role's API key file alone
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The tasks under test
      ansible.builtin.include_role:
        name: spark_router
        tasks_from: key
"""
KEY = "sk-router-test-9d2e"


class Run:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.wheel_dir = tmp / "controller-wheels"
        self.wheel_dir.mkdir()
        self.wheel = _wheel(self.wheel_dir)
        self.node = tmp / "node-router"
        self.home = tmp / "home"
        self.home.mkdir()
        self.play = tmp / "play.yml"
        self.play.write_text(PLAY)
        self.arch = platform.machine()

    def values(self, digest: str | None = None, arch: str | None = None) -> dict[str, Any]:
        digest = digest or hashlib.sha256(self.wheel.read_bytes()).hexdigest()
        return {
            "distribution": "fakegw", "version": "1.0.0", "package": "fakegw==1.0.0",
            "sha256": {arch or self.arch: digest},
            "wheel_dir": str(self.wheel_dir),
            "dir": str(self.node), "venv": str(self.node / "venv"),
            "python": str(self.node / "venv/bin/python"), "wheels": str(self.node / "wheels"),
            "unit": "sparkctl-router.service",
        }

    def play_once(self, *extra: str, values: dict[str, Any] | None = None,
                  ok: bool = True, play: Path | None = None, more: dict[str, Any] | None = None,
                  key: str = KEY) -> tuple[int, str]:
        varfile = self.tmp / "vars.yml"
        varfile.write_text(yaml.safe_dump({"spark_router_values": values or self.values(), **(more or {})}))
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
            **LOCAL_RUN_ENV,
            "SPARKCTL_API_KEY": key,
            "HOME": str(self.home),
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_VARS_ENABLED": "host_group_vars",
            "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        argv = [str(PLAYBOOK), "-i", "localhost,", "-c", "local", str(play or self.play),
                "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{varfile}", *extra]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=600,
                              check=False)
        out = proc.stdout + proc.stderr
        assert (proc.returncode == 0) == ok, out
        assert key not in out
        recap = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", proc.stdout)
        assert recap, out
        return int(recap.group(1)), out


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Run(tmp_path)


def test_the_pinned_wheel_is_installed_once_and_check_mode_writes_nothing(run: Run) -> None:
    changed, out = run.play_once("--check")
    assert changed > 0 and "would install fakegw-1.0.0-py3-none-any.whl" in out
    assert not run.node.exists()
    changed, _ = run.play_once()
    assert changed > 0
    python = run.node / "venv/bin/python"
    probe = subprocess.run([str(python), "-c", "import fakegw; print(fakegw.VALUE)"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "1"
    assert (run.node / "wheels" / run.wheel.name).read_bytes() == run.wheel.read_bytes()
    assert (run.node / "installed.sha256").read_text().strip() == run.values()["sha256"][run.arch]
    assert run.play_once()[0] == 0
    assert run.play_once("--check")[0] == 0


def test_a_wheel_that_is_not_the_pinned_one_is_refused_on_the_controller(run: Run) -> None:
    pinned = "0" * 64
    _, out = run.play_once(values=run.values(digest=pinned), ok=False)
    assert f"{run.wheel} has sha256" in out and f"pins {pinned}" in out
    assert not (run.node / "wheels").exists()  # nothing reached the node


def test_an_architecture_without_a_digest_is_refused_naming_it(run: Run) -> None:
    _, out = run.play_once(values=run.values(arch="riscv64"), ok=False)
    assert f"is {run.arch}, but sparkctl_router.sha256 pins fakegw==1.0.0 for riscv64 only" in out


def test_a_missing_wheel_says_how_to_download_it(run: Run) -> None:
    values = run.values()
    run.wheel.unlink()
    _, out = run.play_once(values=values, ok=False)
    assert f"no fakegw-1.0.0-*{run.arch}.whl in {run.wheel_dir}" in out and "pip download" in out


def test_the_key_is_written_0600_exactly_then_left_alone(run: Run, example_copy: Path) -> None:
    play = run.tmp / "key.yml"
    play.write_text(KEY_PLAY)
    etc = run.tmp / "etc-sparkctl"
    dest = etc / "router-api-key"
    values = {"key_file": str(dest), "unit": "sparkctl-router.service"}
    more = {"spark_router_inventory": str(example_copy)}
    changed, _ = run.play_once("--check", values=values, play=play, more=more)
    assert changed > 0 and not etc.exists()  # check mode: reported, nothing written
    assert run.play_once(values=values, play=play, more=more)[0] > 0
    assert dest.read_text() == KEY and dest.stat().st_mode & 0o777 == 0o600
    assert etc.stat().st_mode & 0o777 == 0o700 and sorted(p.name for p in etc.iterdir()) == ["router-api-key"]
    assert run.play_once(values=values, play=play, more=more)[0] == 0
    assert run.play_once("--check", values=values, play=play, more=more, key=KEY + "-rotated")[0] == 1
    assert dest.read_text() == KEY
    assert run.play_once(values=values, play=play, more=more, key=KEY + "-rotated")[0] == 1
    assert dest.read_text() == KEY + "-rotated"


def _key_script(dest: Path) -> str:
    """The key task's shell text as a check-mode run renders it for ``dest``."""
    tasks = yaml.safe_load((REPO / "roles" / "spark_router" / "tasks" / "key.yml").read_text())
    task = next(t for t in tasks if "ansible.builtin.shell" in t and "stdin" in t["ansible.builtin.shell"])
    text = task["ansible.builtin.shell"]["cmd"]
    text = text.replace("{{ spark_router_values.key_file | quote }}", str(dest))
    text = text.replace("{{ ansible_check_mode | string | quote }}", "True")
    assert "{{" not in text, text
    return text


def test_check_mode_without_the_directory_reads_the_key_before_it_answers(tmp_path: Path) -> None:
    """The branch for a node whose configuration directory is not there yet answered before reading
    its stdin: when the shell was gone before the module wrote the key, the task failed with a
    broken pipe (the role test above failed so once, in check mode). Here the key is written
    only after the shell had every chance to finish: it must still be waiting for it."""
    proc = subprocess.Popen(["bash", "-c", _key_script(tmp_path / "absent" / "router-api-key")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)  # it waits for the key
        out, _ = proc.communicate("sk-router-test-9d2e", timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0 and out.strip() == "changed"
    assert not (tmp_path / "absent").exists()
