"""`sparkctl lab …` refuses clearly (exit 2) where it cannot run, before touching anything."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sparkctl_lab import host


@pytest.mark.parametrize(
    "args",
    [
        ("lab", "build"),
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


def test_build_makes_the_caches_under_the_lab_lock_and_starts_nothing(
    run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import contextlib
    import json
    from collections.abc import Iterator
    from pathlib import Path

    from sparkctl_lab import control, engine, kit, rootfs, state

    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr("platform.system", lambda: "Linux")
    calls: list[str] = []

    @contextlib.contextmanager
    def locked(timeout: float = 600.0, path: Path | None = None) -> Iterator[None]:
        name = "caches" if path is not None else "lab"  # the host-wide cache lock, inside the lab's
        calls.append(f"lock {name}")
        yield
        calls.append(f"unlock {name}")

    def ensure(log_path: Any = None) -> tuple[Path, float | None]:
        calls.append("rootfs")
        return tmp_path / "rootfs", 91.5

    def tarball(log_path: Any = None) -> engine.Tarball:
        calls.append("engine")
        return engine.Tarball(tmp_path / "engine.tar", "k" * 16, 40.0, 2.5)

    def kit_ensure(path: Any = None) -> kit.KitRepo:
        calls.append("kit")
        return kit.KitRepo(path=tmp_path / "kit", commit="c" * 40, written=False)

    monkeypatch.setattr(state, "locked", locked)
    monkeypatch.setattr(rootfs, "ensure", ensure)
    monkeypatch.setattr(rootfs, "is_built", lambda path: False)
    monkeypatch.setattr(engine, "ensure_tarball", tarball)
    monkeypatch.setattr(kit, "ensure", kit_ensure)
    monkeypatch.setattr(control, "start_machine", lambda *a, **k: pytest.fail("build started a machine"))
    result = run_cli("--json", "lab", "build")
    assert result.code == 0, result.err
    assert calls == ["lock lab", "lock caches", "rootfs", "engine", "kit", "unlock caches", "unlock lab"]
    doc = json.loads(result.out)
    assert doc == {"rootfs": str(tmp_path / "rootfs"), "rootfs_build_s": 91.5,
                   "engine_tarball": str(tmp_path / "engine.tar"), "engine_build_s": 42.5,
                   "kit_commit": "c" * 40}
