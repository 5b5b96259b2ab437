"""Shared test helpers: a scratch copy of the example inventory, the CLI in-process, no network."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "inventory" / "example"


@pytest.fixture(scope="session", autouse=True)
def _commands_registered() -> None:
    """The CLI's commands, registered once per process before any test patches a command function.

    Registration binds each command to its function; were it to happen first inside a test that
    replaced, say, `serve.up` with a recorder, every later test in that process (one pytest-xdist
    worker) would run the recorder as `sparkctl up`."""
    from sparkctl.cli import _register

    _register()


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    """A writable copy of inventory/example (the documented four-Spark site)."""
    dest = tmp_path / "site"
    shutil.copytree(EXAMPLE, dest)
    return dest


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """Run `sparkctl ARGS` through the real entry point (exit-code mapping included)."""
    from sparkctl.cli import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        # The command may export settings for its children (--vault-password-file sets
        # ANSIBLE_VAULT_PASSWORD_FILE): in a process of its own they end with it; here they must
        # not outlive the call and reach the tests after it in this worker.
        saved = dict(os.environ)
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


class NetworkTouched(AssertionError):
    pass


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fail the test if anything tries to connect or resolve a name; yields the attempts."""
    attempts: list[str] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(repr(args[1:] if args else kwargs))
        raise NetworkTouched(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield attempts
    assert not attempts, f"network was touched: {attempts}"
