"""`sparkctl watch --install` / `--print-unit` under sudo: the unit runs as the admin sudo names, with
the admin's state directory and home, KillMode=mixed and a stop timeout covering a restart; refused
when the admin cannot be told or when another account can change the code the unit runs."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path
from typing import Any

import pytest
from support.serve_site import Site
from support.text import flat

from sparkctl.ansible import content
from sparkctl.errors import EXIT_OK, EXIT_USAGE, InputError
from sparkctl.render import rank
from sparkctl.serve import watchunit

ADMIN_UID = 4242


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    return Site(tmp_path, monkeypatch)


def _account(name: str, uid: int, home: Path) -> pwd.struct_passwd:
    return pwd.struct_passwd((name, "x", uid, uid, name, str(home), "/bin/bash"))


@pytest.fixture
def sudo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Root under `sudo` from the admin `alice` (home under tmp_path), root's own HOME elsewhere."""
    admin_home = tmp_path / "home" / "alice"
    admin_home.mkdir(parents=True)
    root_home = tmp_path / "root"
    root_home.mkdir()
    accounts = {"alice": _account("alice", ADMIN_UID, admin_home), "root": _account("root", 0, root_home),
                "bob": _account("bob", ADMIN_UID + 1, tmp_path / "home" / "bob")}
    real_getpwnam = pwd.getpwnam

    def getpwnam(name: str) -> pwd.struct_passwd:
        if name in accounts:
            return accounts[name]
        if name == "nobody-here":
            raise KeyError(name)
        return real_getpwnam(name)

    monkeypatch.setattr(watchunit.pwd, "getpwnam", getpwnam)
    monkeypatch.setattr(watchunit.os, "geteuid", lambda: 0)
    monkeypatch.setenv("SUDO_USER", "alice")
    monkeypatch.setenv("HOME", str(root_home))
    monkeypatch.delenv("SPARKCTL_STATE_DIR", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return {"admin_home": admin_home, "root_home": root_home}


def _directives(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def test_the_unit_under_sudo_runs_as_the_admin_with_the_admins_state_dir_and_kill_mode_mixed(
    run_cli: Any, site: Any, sudo: dict[str, Any]
) -> None:
    res = run_cli("-i", str(site.inventory), "watch", "--print-unit")
    assert res.code == EXIT_OK, res.err
    unit = _directives(res.out)
    admin_home = sudo["admin_home"]
    assert unit["User"] == ["alice"]
    try:
        group = grp.getgrgid(ADMIN_UID).gr_name
    except KeyError:
        group = str(ADMIN_UID)
    assert unit["Group"] == [group]  # the admin's primary group
    env = dict(e.split("=", 1) for e in unit["Environment"])
    assert env["SPARKCTL_STATE_DIR"] == str(admin_home / ".local" / "state" / "sparkctl")
    assert env["HOME"] == str(admin_home)  # ~/.ssh: the admin's SSH identity, not root's
    assert str(sudo["root_home"]) not in res.out
    assert unit["KillMode"] == ["mixed"]
    cluster = site.cluster
    longest_stop = max(rank.stop_timeout_s(cluster, n) for n in cluster.nodes)
    budget = int(longest_stop + cluster.supervisor.settle_s + cluster.profile.gates.boot_timeout_s)
    assert int(unit["TimeoutStopSec"][0]) == budget + watchunit.RESTART_OVERHEAD_S


def test_the_admins_own_state_dir_passed_through_sudo_is_kept(
    run_cli: Any, site: Any, sudo: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "srv-state"))
    res = run_cli("-i", str(site.inventory), "watch", "--print-unit")
    assert res.code == EXIT_OK, res.err
    assert f"Environment=SPARKCTL_STATE_DIR={tmp_path / 'srv-state'}" in res.out
    monkeypatch.setenv("SPARKCTL_STATE_DIR", "~/state")
    assert content.state_dir(sudo["admin_home"]) == sudo["admin_home"] / "state"


@pytest.mark.parametrize("sudo_user", ["", "root"])
def test_root_that_cannot_name_the_admin_is_refused_and_nothing_is_written(
    run_cli: Any, site: Any, sudo: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    sudo_user: str,
) -> None:
    if sudo_user:
        monkeypatch.setenv("SUDO_USER", sudo_user)
    else:
        monkeypatch.delenv("SUDO_USER")
    units = tmp_path / "units"
    units.mkdir()
    monkeypatch.setattr(watchunit, "UNIT_DIR", units)
    monkeypatch.setattr(watchunit, "systemd_running", lambda: True)
    monkeypatch.setattr(watchunit.shutil, "which", lambda name: f"/usr/bin/{name}")
    for argv in (["--install"], ["--print-unit"]):
        res = run_cli("-i", str(site.inventory), "watch", *argv)
        assert res.code == EXIT_USAGE, res.out
        assert "cannot tell which admin" in flat(res.err)
        assert "--user NAME" in flat(res.err)
    assert list(units.iterdir()) == []
    # An explicit --user names the account (root included, if the admin insists).
    res = run_cli("-i", str(site.inventory), "watch", "--print-unit", "--user", "bob")
    assert res.code == EXIT_OK, res.err
    assert "User=bob" in res.out and f"HOME={tmp_path / 'home' / 'bob'}" in res.out
    res = run_cli("-i", str(site.inventory), "watch", "--print-unit", "--user", "nobody-here")
    assert res.code == EXIT_USAGE and "no such account" in flat(res.err)


def test_code_another_account_can_change_is_refused(
    run_cli: Any, site: Any, sudo: dict[str, Any], tmp_path: Path
) -> None:
    hosts = next(p for p in site.inventory.rglob("*") if p.is_file())
    hosts.chmod(hosts.stat().st_mode | 0o002)
    res = run_cli("-i", str(site.inventory), "watch", "--print-unit")
    assert res.code == EXIT_USAGE
    assert "another account than alice and root can change" in flat(res.err)
    alice = watchunit.unit_account()
    with pytest.raises(InputError) as exc:
        watchunit.check_not_writable_by_others(alice, [site.inventory])
    assert f"{hosts} (writable by every account)" in exc.value.message
    hosts.chmod(hosts.stat().st_mode & ~0o002)
    if os.geteuid() == 0:  # owned by a third account (only root can give a file away)
        owner = hosts.stat().st_uid
        os.chown(hosts, ADMIN_UID + 7, -1)
        with pytest.raises(InputError) as exc:
            watchunit.check_not_writable_by_others(alice, [site.inventory])
        assert f"{hosts} (owned by uid {ADMIN_UID + 7})" in exc.value.message
        os.chown(hosts, owner, -1)
    assert run_cli("-i", str(site.inventory), "watch", "--print-unit").code == EXIT_OK


def test_a_site_packages_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    """One file dropped into the interpreter's site-packages (a .pth) runs at every start."""
    alice = _account("alice", os.getuid(), tmp_path)
    site_packages = tmp_path / "venv" / "lib" / "site-packages"
    site_packages.mkdir(parents=True)
    (site_packages / "some_package.py").write_text("")
    (site_packages / "some_package.py").chmod(0o666)  # what is under it is not walked ...
    watchunit.check_not_writable_by_others(alice, [], flat=[site_packages])
    site_packages.chmod(0o777)  # ... the directory itself is checked
    with pytest.raises(InputError) as exc:
        watchunit.check_not_writable_by_others(alice, [], flat=[site_packages])
    assert f"{site_packages} (writable by every account)" in exc.value.message


def test_a_down_by_the_admin_pauses_the_installed_service(
    run_cli: Any, site: Any, sudo: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unit written under sudo and the admin's own `down` share one state directory: the pause
    the admin leaves is the one the service reads (with root's, the service never saw it)."""
    from sparkctl.serve import events

    res = run_cli("-i", str(site.inventory), "watch", "--print-unit")
    assert res.code == EXIT_OK, res.err
    service_env = dict(e.split("=", 1) for e in _directives(res.out)["Environment"])
    # the admin, later, in a session of their own (no sudo, no state directory set)
    monkeypatch.delenv("SUDO_USER")
    monkeypatch.delenv("SPARKCTL_STATE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(sudo["admin_home"]))
    for st in site.nodes.state.values():
        st.unit = "active"
    res = run_cli("-i", str(site.inventory), "down")
    assert res.code == EXIT_OK, res.err
    # the service, in the environment its unit gives it
    monkeypatch.setenv("SPARKCTL_STATE_DIR", service_env["SPARKCTL_STATE_DIR"])
    monkeypatch.setenv("HOME", service_env["HOME"])
    assert events.paused(site.cluster.name) is not None
    # and root's own state directory (what the unit named before) holds no such pause
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(sudo["root_home"] / ".local" / "state" / "sparkctl"))
    assert events.paused(site.cluster.name) is None
