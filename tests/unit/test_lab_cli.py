"""`sparkctl lab …` refuses clearly (exit 2) where it cannot run, before touching anything."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sparkctl_lab import host


@pytest.mark.parametrize(
    "args",
    [
        ("lab", "up"),
        ("lab", "down"),
        ("lab", "status"),
        ("lab", "kill", "spark-1"),
        ("lab", "start", "spark-1"),
        ("lab", "link", "spark-1", "down"),
        ("lab", "mtu", "s1a", "1500"),
        ("lab", "fill", "spark-1", "--gib", "1"),
        ("lab", "exec", "spark-1", "--", "true"),
    ],
)
def test_non_root_is_refused_with_exit_2(
    args: tuple[str, ...], run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.setattr("platform.system", lambda: "Linux")
    result = run_cli(*args)
    assert result.code == 2
    assert "needs root" in result.err


def test_non_linux_is_refused_with_exit_2(
    run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("platform.system", lambda: "Darwin")
    result = run_cli("lab", "up")
    assert result.code == 2 and "needs Linux" in result.err


def test_bad_nvme_sizes_are_usage_errors(
    run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr("platform.system", lambda: "Linux")
    monkeypatch.setattr(host, "require_tools", lambda names: None)
    result = run_cli("lab", "up", "--nvme", "spark-2:4")
    assert result.code == 2 and "NODE=GIB" in result.err
    result = run_cli("lab", "up", "--nvme", "spark-7=4")
    assert result.code == 2 and "not a lab node" in result.err
    result = run_cli("lab", "up", "--nvme-gib", "0")
    assert result.code == 2 and "at least 1 GiB" in result.err


def test_missing_tools_name_the_apt_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(host.SparkctlError) as err:
        host.require_tools(["systemd-nspawn", "mkfs.ext4"])
    assert err.value.exit_code == 2
    assert "systemd-container" in (err.value.hint or "") and "e2fsprogs" in (err.value.hint or "")
