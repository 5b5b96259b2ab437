"""`sparkctl bootstrap`'s SSH side against a fake fresh box (tests/support/box_fake.py): host keys
refused, confirmed, pinned and changed; the password's way (sshd and sudo's stdin only); one line
per failure; a second run that changes nothing."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest
from support.box_fake import FakeBox

from sparkctl.errors import EXIT_USAGE, InputError
from sparkctl.site import bootstrap as boot
from sparkctl.site import hostkeys, keys, report
from sparkctl.site.access import Address, Secret

PASSWORD = "s3cret-Pa55word"


@pytest.fixture
def box(tmp_path: Path) -> Iterator[FakeBox]:
    b = FakeBox(tmp_path, password=PASSWORD)
    yield b
    b.close()


@pytest.fixture
def admin_key(tmp_path: Path) -> keys.AdminKey:
    return keys.generate(tmp_path / "keys" / "id_ed25519", "admin@test")


def _request(tmp_path: Path, boxes: list[FakeBox], key: keys.AdminKey, **kw: Any) -> boot.Request:
    base: dict[str, Any] = {"login": "admin", "operator": "sparkctl", "password": Secret(PASSWORD),
                            "key": key, "known_hosts": tmp_path / "known_hosts"}
    base.update(kw)
    return boot.Request([Address("127.0.0.1", b.port) for b in boxes], **base)


def _never(key: hostkeys.HostKey) -> bool | None:
    raise AssertionError(f"asked about {key.name}")


def test_first_run_sets_up_the_operator_and_a_second_changes_nothing(
    tmp_path: Path, box: FakeBox, admin_key: keys.AdminKey
) -> None:
    asked: list[hostkeys.HostKey] = []

    def yes(key: hostkeys.HostKey) -> bool:
        asked.append(key)
        return True

    req = _request(tmp_path, [box], admin_key)
    [first] = boot.run(req, yes)
    assert first.status == "changed", first.line()
    assert first.steps == {"user": "changed", "authorized_keys": "changed", "sudoers": "changed"}
    assert first.host_key == "confirmed" and first.sudo and first.docker == "running"
    assert first.gpu_runtime == "missing" and any("nvidia-container-toolkit" in w for w in first.warnings)
    assert [k.name for k in asked] == [f"[127.0.0.1]:{box.port}"]
    assert asked[0].fingerprint.startswith("SHA256:")
    assert req.known_hosts.read_text() == box.known_hosts_line()
    auth = box.system.home("sparkctl") / ".ssh/authorized_keys"
    assert auth.read_text() == admin_key.public + "\n"
    assert auth.stat().st_mode & 0o777 == 0o600
    assert box.system.nopasswd("sparkctl")
    assert not [p for p in box.system.sudoers_dir.iterdir() if p.name.startswith(".")]  # no temporary left

    [second] = boot.run(req, _never)
    assert second.status == "ok", second.line()
    assert second.steps == {"user": "ok", "authorized_keys": "ok", "sudoers": "ok"}
    assert second.host_key == "pinned"
    assert auth.read_text() == admin_key.public + "\n"
    assert req.known_hosts.read_text() == box.known_hosts_line()


def test_unknown_host_key_is_refused_without_confirmation_and_no_password_is_sent(
    tmp_path: Path, box: FakeBox, admin_key: keys.AdminKey
) -> None:
    req = _request(tmp_path, [box], admin_key)
    [res] = boot.run(req, lambda key: None)  # nobody to ask
    assert res.status == "failed" and res.exit_code == EXIT_USAGE
    assert "not confirmed" in (res.cause or "") and "--trust-on-first-use" in (res.check or "")
    assert not req.known_hosts.exists()
    assert box.passwords == [] and box.commands == []
    [refused] = boot.run(req, lambda key: False)
    assert "refused" in (refused.cause or "") and not req.known_hosts.exists()


def test_a_changed_host_key_is_refused_naming_the_node_and_never_overwritten(
    tmp_path: Path, box: FakeBox, admin_key: keys.AdminKey
) -> None:
    other = paramiko.ECDSAKey.generate()
    pinned = f"[127.0.0.1]:{box.port} {other.get_name()} {other.get_base64()}\n"
    req = _request(tmp_path, [box], admin_key, trust_on_first_use=True)
    req.known_hosts.write_text(pinned)
    [res] = boot.run(req, _never)
    assert res.status == "failed"
    assert res.cause is not None and res.cause.startswith("host key mismatch")
    assert res.line().startswith(f"127.0.0.1:{box.port}: host key mismatch")
    assert req.known_hosts.read_text() == pinned
    assert box.passwords == [] and box.commands == []


def test_host_keys_file_vouches_for_a_key_or_refuses_another(
    tmp_path: Path, box: FakeBox, admin_key: keys.AdminKey
) -> None:
    vouched = tmp_path / "keys.txt"
    vouched.write_text(box.known_hosts_line())
    req = _request(tmp_path, [box], admin_key, host_keys=vouched)
    [res] = boot.run(req, _never)
    assert res.status == "changed" and res.host_key == f"from {vouched}"

    other = paramiko.ECDSAKey.generate()
    wrong = tmp_path / "wrong.txt"
    wrong.write_text(f"[127.0.0.1]:{box.port} {other.get_name()} {other.get_base64()}\n")
    fresh = _request(tmp_path, [box], admin_key, host_keys=wrong, known_hosts=tmp_path / "kh2")
    [bad] = boot.run(fresh, _never)
    assert bad.status == "failed" and bad.cause is not None and bad.cause.startswith("host key mismatch")
    assert not fresh.known_hosts.read_text().count(box.host_key.get_base64())


def test_wrong_password_is_one_line_authentication_failed(
    tmp_path: Path, box: FakeBox, admin_key: keys.AdminKey
) -> None:
    req = _request(tmp_path, [box], admin_key, password=Secret("not-the-password"), trust_on_first_use=True)
    [res] = boot.run(req, _never)
    assert res.status == "failed" and res.failed_at == "login"
    assert res.cause == f"authentication failed for admin@127.0.0.1:{box.port}"
    assert "\n" not in res.line() and "--login user and its password" in res.line()
    assert box.commands == []


def test_sudo_refused_and_passwords_off_say_so(tmp_path: Path, admin_key: keys.AdminKey) -> None:
    no_sudo = FakeBox(tmp_path / "a", password=PASSWORD, sudo_users=())
    keys_only = FakeBox(tmp_path / "b", password=PASSWORD, password_auth=False)
    try:
        req = _request(tmp_path, [no_sudo, keys_only], admin_key, trust_on_first_use=True)
        denied, off = boot.run(req, _never)
    finally:
        no_sudo.close()
        keys_only.close()
    assert denied.cause == "sudo denied: the login user may not use sudo"
    assert "sudo group" in (denied.check or "")
    assert off.cause is not None and off.cause.startswith("authentication failed")
    assert "publickey" in off.cause
    assert "PasswordAuthentication" in (off.check or "")


def test_refused_connection_is_named_and_the_other_nodes_go_on(
    tmp_path: Path, box: FakeBox, admin_key: keys.AdminKey
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    req = _request(tmp_path, [box], admin_key, trust_on_first_use=True)
    req.addresses = [Address("127.0.0.1", closed), *req.addresses]
    dead, alive = boot.run(req, _never)
    assert dead.line().startswith(f"127.0.0.1:{closed}: connection refused — check that sshd runs")
    assert alive.status == "changed"


def test_the_gpu_runtime_is_a_warning_unless_required(
    tmp_path: Path, box: FakeBox, admin_key: keys.AdminKey
) -> None:
    req = _request(tmp_path, [box], admin_key, trust_on_first_use=True, require_gpu_runtime=True)
    [res] = boot.run(req, _never)
    assert res.status == "failed" and res.steps["sudoers"] == "changed"
    assert "NVIDIA container toolkit missing" in (res.cause or "")
    assert "sudo apt install nvidia-container-toolkit" in (res.check or "")
    box.system.tools.add("nvidia-ctk")
    [ok] = boot.run(req, _never)
    assert ok.status == "ok" and ok.gpu_runtime == "nvidia-ctk" and not ok.warnings


def test_the_password_goes_to_sshd_and_sudo_only(
    tmp_path: Path, box: FakeBox, admin_key: keys.AdminKey, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    req = _request(tmp_path, [box], admin_key, trust_on_first_use=True)
    assert PASSWORD not in repr(req) and PASSWORD not in str(req.password)
    results = boot.run(req, _never)
    boot.run(_request(tmp_path, [box], admin_key, password=Secret(PASSWORD + "x")), _never)
    doc = json.dumps(report.document(req, results))
    assert PASSWORD in box.passwords  # sshd's password authentication
    assert any(s == (PASSWORD + "\n").encode() for s in box.stdins)  # sudo -S, on stdin
    assert all(PASSWORD not in c for c in box.commands)  # never in argv
    captured = capsys.readouterr()
    for text in (doc, caplog.text, captured.out, captured.err):
        assert PASSWORD not in text


def test_addresses_parse_host_port_and_v6() -> None:
    assert Address.parse("10.0.0.1") == Address("10.0.0.1", 22)
    assert Address.parse("spark-1:2222", 22) == Address("spark-1", 2222)
    assert Address.parse("spark-1", 2200) == Address("spark-1", 2200)
    assert Address.parse("[fe80::1]:2222") == Address("fe80::1", 2222)
    assert Address.parse("fe80::1").label == "[fe80::1]:22"
    for bad in ("host:0", "host:x", "host:70000", ""):
        with pytest.raises(InputError, match="address"):
            Address.parse(bad)


def test_the_admin_key_from_either_half_or_generated(tmp_path: Path) -> None:
    made = keys.generate(tmp_path / "id_ed25519", "me@here")
    assert made.public.startswith("ssh-ed25519 ") and made.public.endswith(" me@here")
    assert (tmp_path / "id_ed25519").stat().st_mode & 0o777 == 0o600
    assert keys.resolve(tmp_path / "id_ed25519") == made
    assert keys.resolve(tmp_path / "id_ed25519.pub") == made
    (tmp_path / "id_ed25519.pub").unlink()
    assert keys.resolve(tmp_path / "id_ed25519").public == " ".join(made.public.split()[:2])
    with pytest.raises(InputError, match="never replaces"):
        keys.generate(tmp_path / "id_ed25519", "again")
    with pytest.raises(InputError, match="no SSH key at") as missing:
        keys.resolve(tmp_path / "missing")
    assert "--generate-key" in (missing.value.hint or "")


def test_a_node_message_holding_the_password_is_scrubbed(
    tmp_path: Path, box: FakeBox, admin_key: keys.AdminKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    def leaky(user: str, argv: list[str], stdin: bytes) -> tuple[int, str, str]:
        return 1, "", f"pam_unix(sudo:auth): bad password '{PASSWORD}' for {user}\n"

    monkeypatch.setattr(box, "_answer", leaky)
    [res] = boot.run(_request(tmp_path, [box], admin_key, trust_on_first_use=True), _never)
    assert res.status == "failed" and res.failed_at == "setup"
    assert "'***'" in res.line() and PASSWORD not in json.dumps(res.as_dict())


def test_a_node_with_several_host_keys_is_held_to_the_one_decided(
    tmp_path: Path, admin_key: keys.AdminKey
) -> None:
    box = FakeBox(tmp_path / "rsa", password=PASSWORD, rsa_host_key=True)
    try:
        assert box.rsa_key is not None
        vouched = tmp_path / "keys.txt"  # only its RSA key is known: the logins must see that one
        vouched.write_text(f"[127.0.0.1]:{box.port} ssh-rsa {box.rsa_key.get_base64()}\n")
        [res] = boot.run(_request(tmp_path, [box], admin_key, host_keys=vouched), _never)
    finally:
        box.close()
    assert res.status == "changed", res.line()
    assert res.fingerprint == hostkeys.HostKey("x", "ssh-rsa", box.rsa_key.get_base64()).fingerprint


def test_a_known_hosts_file_that_cannot_be_used_stops_before_any_node_is_contacted(
    tmp_path: Path, box: FakeBox, admin_key: keys.AdminKey
) -> None:
    for known in (tmp_path / "no-such-dir" / "known_hosts", tmp_path):  # no directory; not a file
        with pytest.raises(InputError):
            boot.run(_request(tmp_path, [box], admin_key, known_hosts=known, trust_on_first_use=True), _never)
    assert box.passwords == [] and box.commands == []


def test_a_pinned_key_of_a_less_preferred_type_is_asked_for_and_matches(
    tmp_path: Path, admin_key: keys.AdminKey
) -> None:
    box = FakeBox(tmp_path / "rsa", password=PASSWORD, rsa_host_key=True)
    try:
        assert box.rsa_key is not None
        req = _request(tmp_path, [box], admin_key)
        req.known_hosts.write_text(f"[127.0.0.1]:{box.port} ssh-rsa {box.rsa_key.get_base64()}\n")
        [res] = boot.run(req, _never)
    finally:
        box.close()
    assert res.status == "changed" and res.host_key == "pinned", res.line()
