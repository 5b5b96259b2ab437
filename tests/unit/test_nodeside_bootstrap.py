"""The node's half of `sparkctl bootstrap` (sparkctl/nodeside/bootstrap.py) on real files: one
authorized_keys line per key whatever its comment, owner and mode put right, a sudoers file that
visudo rejects never put in place; and the shipped step as the node's shell gets it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.box_fake import FakeSystem

from sparkctl.nodeside import bootstrap as node
from sparkctl.site.bootstrap import node_command

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJx3Wq0bYk6oYl8l0ZfS1Qm7c8q4w3bJ4m2QnL0sXbVx admin@ctl"


def _ids() -> tuple[int, int]:
    return os.getuid(), os.getgid()


def test_a_key_already_there_under_another_comment_is_not_added_again(tmp_path: Path) -> None:
    ssh = tmp_path / ".ssh"
    ssh.mkdir(mode=0o755)
    auth = ssh / "authorized_keys"
    auth.write_text("ssh-rsa AAAAB3other x\n" + " ".join(KEY.split()[:2]) + " old-comment")  # no newline
    os.chmod(auth, 0o644)
    assert node.authorize(str(tmp_path), *_ids(), KEY) == "changed"  # modes put right, nothing added
    assert auth.read_text().count(KEY.split()[1]) == 1
    assert (ssh.stat().st_mode & 0o777, auth.stat().st_mode & 0o777) == (0o700, 0o600)
    assert node.authorize(str(tmp_path), *_ids(), KEY) == "ok"


def test_a_new_key_after_a_line_without_newline_starts_its_own_line(tmp_path: Path) -> None:
    (tmp_path / ".ssh").mkdir(mode=0o700)
    auth = tmp_path / ".ssh/authorized_keys"
    auth.write_text("ssh-rsa AAAAB3other x")
    os.chmod(auth, 0o600)
    assert node.authorize(str(tmp_path), *_ids(), KEY) == "changed"
    assert auth.read_text().splitlines() == ["ssh-rsa AAAAB3other x", KEY]


def test_authorized_keys_through_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".ssh").mkdir(mode=0o700)
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / ".ssh/authorized_keys").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(node.NodeError, match="symbolic link"):
        node.authorize(str(tmp_path), *_ids(), KEY)


def test_a_sudoers_file_visudo_rejects_is_never_put_in_place(tmp_path: Path) -> None:
    class Rejecting(FakeSystem):
        def visudo_check(self, path: str) -> str | None:
            return "parse error in " + path

    system = Rejecting(tmp_path, {"sparkctl"}, set(), "active")
    answer = node.answer({"step": "apply", "user": "sparkctl", "key": KEY,
                          "sudoers_dir": str(system.sudoers_dir)}, system)
    assert answer["ok"] is False and "visudo rejected" in answer["error"]
    assert list(system.sudoers_dir.iterdir()) == []  # neither the file nor its temporary


def test_a_sudoers_file_that_differs_is_replaced_and_one_that_matches_is_kept(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path, {"sparkctl"}, set(), "active")
    path = system.sudoers_dir / "90-sparkctl-sparkctl"
    path.write_text("sparkctl ALL=(ALL) ALL\n")
    assert node.sudoers(system, str(system.sudoers_dir), "sparkctl") == "changed"
    assert path.read_text() == node.sudoers_text("sparkctl") and path.stat().st_mode & 0o777 == 0o440
    assert node.sudoers(system, str(system.sudoers_dir), "sparkctl") == "ok"


def test_check_reports_docker_and_the_toolkit_without_changing_anything(tmp_path: Path) -> None:
    bare = FakeSystem(tmp_path, set(), set(), "inactive")
    assert node.check({}, bare) == {"docker": "missing", "gpu_runtime": "missing"}
    dgx = FakeSystem(tmp_path, set(), {"docker", "nvidia-container-runtime"}, "inactive")
    assert node.check({}, dgx) == {"docker": "inactive", "gpu_runtime": "nvidia-container-runtime"}


def test_the_shipped_step_runs_in_a_bare_python3_from_the_command_line_sshd_gets() -> None:
    command = node_command({"step": "check"}, sudo=False)  # read-only: safe to run here
    proc = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["mode"] == "bootstrap" and doc["ok"] is True and set(doc) >= {"docker", "gpu_runtime"}
    assert node_command({"step": "check"}, sudo=True).startswith("sudo -S -p '' -- sh -c ")
