"""The lab's Sparks answer a password login as root, as a fresh DGX OS box does for `sparkctl
bootstrap`: a random password per lab in a 0600 file (`sparkctl lab password` names it), set in each
booted node through chpasswd's stdin, and an sshd configuration that takes it beside root's key."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkctl_lab import control, machines, state


@pytest.fixture
def lab_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCTL_LAB_DIR", str(tmp_path / "lab"))
    return tmp_path / "lab"


def test_each_lab_gets_one_random_root_password_in_a_0600_file(lab_dir: Path) -> None:
    control._ensure_controller_files()
    path = state.root_password_file()
    first = path.read_text()
    assert path.parent == lab_dir and path.stat().st_mode & 0o777 == 0o600
    assert len(first.strip()) >= 20 and first != state.api_key_file().read_text()
    control._ensure_controller_files()
    assert path.read_text() == first  # kept while the lab lives


def test_sshd_takes_root_by_password_and_still_by_key(lab_dir: Path) -> None:
    conf = state.paths("spark-1").upper / "etc/ssh/sshd_config.d/10-sparkctl-lab.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("PermitRootLogin prohibit-password\nPasswordAuthentication no\n")  # an older lab's
    machines.prepare_machine("spark-1", "ssh-ed25519 AAAAtest controller")
    lines = conf.read_text().splitlines()
    assert "PermitRootLogin yes" in lines and "PasswordAuthentication yes" in lines
    assert "PasswordAuthentication no" not in lines
    auth = state.paths("spark-1").upper / "root/.ssh/authorized_keys"
    assert auth.read_text() == "ssh-ed25519 AAAAtest controller\n"


def test_the_password_reaches_the_node_on_chpasswds_stdin_only(
    lab_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab_dir.mkdir()
    state.root_password_file().write_text("pw-from-the-lab\n")
    calls: list[tuple[list[str], str | None]] = []

    def run(argv: list[str], *, input: str | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append((list(argv), input))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(machines, "node_argv", lambda m, argv, st: ["nsenter", m, *argv])
    monkeypatch.setattr(machines.host, "run", run)
    machines.set_root_password("spark-2", state.LabState())
    assert calls[0] == (["nsenter", "spark-2", "chpasswd"], "root:pw-from-the-lab\n")
    assert calls[1][0][:4] == ["nsenter", "spark-2", "sh", "-c"] and calls[1][1] == machines.SSHD_LAB_CONF
    assert all("pw-from-the-lab" not in " ".join(argv) for argv, _ in calls)


def test_a_running_node_gets_the_sshd_configuration_once(tmp_path: Path) -> None:
    conf = tmp_path / "10-sparkctl-lab.conf"
    reloads = tmp_path / "reloads"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho \"$*\" >> {reloads}\n")
    (bin_dir / "systemctl").chmod(0o755)
    script = machines._SSHD_CONF_SYNC.replace(machines.SSHD_LAB_CONF_PATH, str(conf))
    conf.write_text("PermitRootLogin prohibit-password\n")
    for _ in range(2):
        subprocess.run(["sh", "-c", script], input=machines.SSHD_LAB_CONF, text=True, check=True,
                       env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert conf.read_text() == machines.SSHD_LAB_CONF and conf.stat().st_mode & 0o777 == 0o644
    assert reloads.read_text() == "reload-or-restart ssh.service\n"  # the second run found it in place


def test_lab_password_names_the_file_or_says_the_lab_is_not_up(
    lab_dir: Path, run_cli: Callable[..., Any]
) -> None:
    missing = run_cli("lab", "password")
    assert missing.code == 2 and "lab up" in missing.err
    lab_dir.mkdir()
    state.root_password_file().write_text("x\n")
    found = run_cli("lab", "password")
    assert found.code == 0 and found.out.strip() == str(state.root_password_file())
