"""The lab raises root's inotify instance limit to what its machines need before it boots them.

Every lab machine's systemd, journald, logind, dbus and Docker hold inotify instances as the host's
root; at Debian's default (128) a fourth lab's node failed to boot: "Failed to create control group
inotify object: Too many open files".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.errors import SparkctlError
from sparkctl_lab import host


@pytest.fixture
def limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "max_user_instances"
    path.write_text("128\n")
    monkeypatch.setattr(host, "INOTIFY_INSTANCES", path)
    return path


def test_the_limit_is_raised_for_the_running_machines_and_the_new_ones(
    limit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host, "nspawn_machines", lambda: 15)  # three labs up already
    said: list[str] = []
    host.ensure_inotify_instances(5, said.append)
    need = (15 + 5) * host.INOTIFY_PER_MACHINE + host.INOTIFY_HOST_SHARE
    assert int(limit.read_text()) == need
    assert said == [
        f"raised fs.inotify.max_user_instances from 128 to {need} (a lab machine holds ~9 of them)"
    ]


def test_a_limit_high_enough_is_left_alone(limit: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limit.write_text("8192\n")
    monkeypatch.setattr(host, "nspawn_machines", lambda: 15)
    said: list[str] = []
    host.ensure_inotify_instances(5, said.append)
    host.ensure_inotify_instances(0, said.append)
    assert limit.read_text() == "8192\n" and said == []


def test_a_limit_that_cannot_be_raised_is_named_with_the_command(
    limit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host, "nspawn_machines", lambda: 0)
    limit.chmod(0o444)
    monkeypatch.setattr(host, "INOTIFY_INSTANCES", _ReadOnly(limit))
    with pytest.raises(SparkctlError) as err:
        host.ensure_inotify_instances(5, print)
    need = 5 * host.INOTIFY_PER_MACHINE + host.INOTIFY_HOST_SHARE
    assert str(err.value).startswith(
        f"fs.inotify.max_user_instances is 128: the lab's machines need about {need}"
    )
    assert err.value.hint == f"raise it as root: sysctl -w fs.inotify.max_user_instances={need}"


class _ReadOnly:
    """A /proc/sys file root may read but not write (a container without the right to set it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read_text(self) -> str:
        return self.path.read_text()

    def write_text(self, text: str) -> int:
        raise PermissionError(13, "Permission denied", str(self.path))


def test_nspawn_machines_counts_only_systemd_nspawn(monkeypatch: pytest.MonkeyPatch) -> None:
    argvs = {1: ["/sbin/init"], 2: ["/usr/bin/systemd-nspawn", "--boot"], 3: ["systemd-nspawn"], 4: []}
    monkeypatch.setattr(host, "all_pids", lambda: list(argvs))
    monkeypatch.setattr(host, "cmdline", lambda pid: argvs[pid])
    assert host.nspawn_machines() == 2
