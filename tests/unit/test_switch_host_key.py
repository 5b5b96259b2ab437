"""The switch's SSH host key must be the one pinned in the inventory's known_hosts before any
network_cli session (which would only consult ~/.ssh/known_hosts)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from support.sshd_fake import FakeSshd

MODULE = Path(__file__).resolve().parents[2] / "roles/spark_switch/library/sparkctl_pinned_host_key.py"
_spec = importlib.util.spec_from_file_location("sparkctl_pinned_host_key", MODULE)
assert _spec and _spec.loader
pinned = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("sparkctl_pinned_host_key", pinned)
_spec.loader.exec_module(pinned)


@pytest.fixture
def switch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeSshd]:
    # One server per test: the fake accepts connections one after the other, and a key exchange
    # that stops after the host key must not hold the next test's connection up on a busy machine.
    server = FakeSshd(tmp_path_factory.mktemp("switch"))
    yield server
    server.close()


def test_the_pinned_key_passes(switch: FakeSshd) -> None:
    ok, msg, fp = pinned.check("127.0.0.1", switch.port, str(switch.known_hosts), timeout=60)
    assert ok, msg
    assert fp == pinned.fingerprint(switch.host_key) and fp.startswith("SHA256:")


def test_a_switch_the_file_does_not_pin_is_refused(switch: FakeSshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    ok, msg, _ = pinned.check("127.0.0.1", switch.port, str(empty), timeout=60)
    assert not ok and "pins no key for it" in msg


def test_another_key_is_refused(switch: FakeSshd, tmp_path: Path) -> None:
    other = paramiko.RSAKey.generate(2048)
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{switch.port} ssh-rsa {other.get_base64()}\n")
    ok, msg, fp = pinned.check("127.0.0.1", switch.port, str(wrong), timeout=60)
    assert not ok and "NOT the key pinned" in msg and fp == pinned.fingerprint(switch.host_key)


def test_an_unreadable_file_is_named(switch: FakeSshd, tmp_path: Path) -> None:
    ok, msg, _ = pinned.check("127.0.0.1", switch.port, str(tmp_path / "missing"))
    assert not ok and "cannot read the pinned known_hosts" in msg
