"""`sparkctl bootstrap` end to end against fake fresh boxes (tests/support/box_fake.py): the table and
the JSON document, a second run that says it changed nothing, one line per failed node with its
exit code, and the password in no output and no run record."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.box_fake import FakeBox

PASSWORD = "s3cret-Pa55word"


@pytest.fixture
def box(tmp_path: Path) -> Iterator[FakeBox]:
    b = FakeBox(tmp_path / "box", password=PASSWORD)
    yield b
    b.close()


@pytest.fixture
def site(tmp_path: Path) -> dict[str, Path]:
    pw = tmp_path / "password"
    pw.write_text(PASSWORD + "\n")
    return {"password": pw, "key": tmp_path / "keys" / "id_ed25519", "known_hosts": tmp_path / "known_hosts"}


def _args(box: FakeBox, site: dict[str, Path], *extra: str) -> list[str]:
    return ["bootstrap", box.address, "--login", "admin", "--password-file", str(site["password"]),
            "--key", str(site["key"]), "--known-hosts", str(site["known_hosts"]), *extra]


def test_first_run_changes_then_the_second_says_ok_per_node(
    run_cli: Any, box: FakeBox, site: dict[str, Path]
) -> None:
    res = run_cli(*_args(box, site, "--generate-key", "--trust-on-first-use", "--yes", "--json"))
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    [node] = doc["nodes"]
    assert doc["ok"] and node["status"] == "changed" and node["address"] == box.address
    assert node["steps"] == {"user": "changed", "authorized_keys": "changed", "sudoers": "changed"}
    assert node["gpu_runtime"] == "missing" and node["sudo"] is True
    assert site["known_hosts"].read_text() == box.known_hosts_line()

    again = run_cli(*_args(box, site, "--yes"))
    assert again.code == 0, again.err
    text = " ".join(again.out.split())
    assert f"{box.address} │ ok │ nothing │ pinned │ ok │ running │ missing" in text, again.out
    assert "0 changed, 1 unchanged, 0 failed" in text
    assert "NVIDIA container toolkit missing" in text


def test_a_wrong_password_is_one_line_and_the_json_error_shape(
    run_cli: Any, box: FakeBox, site: dict[str, Path]
) -> None:
    site["password"].write_text("wrong\n")
    res = run_cli(*_args(box, site, "--generate-key", "--trust-on-first-use", "--yes", "--json"))
    assert res.code == 1
    doc = json.loads(res.out)
    line = (f"{box.address}: authentication failed for admin@{box.address} — check the --login user and "
            "its password")
    assert doc["error"]["details"] == [line]
    assert doc["error"]["nodes"] == [box.address] and doc["error"]["code"] == 1
    assert doc["nodes"][0]["status"] == "failed"


def test_the_password_is_in_no_output_and_no_run_record(
    run_cli: Any, box: FakeBox, site: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
    _own_state_dir: Path,
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    args = _args(box, site, "--generate-key", "--trust-on-first-use", "--yes")
    args[args.index(str(site["password"]))] = "-"
    res = run_cli(*args)
    assert res.code == 0, res.err
    box.password = "changed-since"  # the next run fails at the login: its messages must not leak either
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    failed = run_cli(*args[:-3], "--trust-on-first-use", "--yes", "--json")
    assert failed.code == 1
    records = list(_own_state_dir.rglob("bootstrap.json"))
    assert len(records) == 2
    for text in (res.out, res.err, failed.out, failed.err, *(r.read_text() for r in records)):
        assert PASSWORD not in text


def test_without_a_terminal_it_refuses_before_contacting_any_node(
    run_cli: Any, box: FakeBox, site: dict[str, Path]
) -> None:
    res = run_cli(*_args(box, site, "--generate-key", "--trust-on-first-use"))
    assert res.code == 2 and "--yes" in res.err
    assert box.passwords == [] and box.commands == []


def test_an_unconfirmed_host_key_refuses_every_node_with_exit_2(
    run_cli: Any, box: FakeBox, site: dict[str, Path]
) -> None:
    res = run_cli(*_args(box, site, "--generate-key", "--yes", "--json"))
    assert res.code == 2
    doc = json.loads(res.out)
    assert "not confirmed" in doc["error"]["details"][0] and not site["known_hosts"].exists()
    assert box.passwords == []


def test_bad_input_is_refused_with_exit_2(run_cli: Any, box: FakeBox, site: dict[str, Path]) -> None:
    both = run_cli(*_args(box, site, "--generate-key", "--trust-on-first-use", "--host-keys", "x", "--yes"))
    assert both.code == 2 and "exclude each other" in both.err
    no_key = run_cli(*_args(box, site, "--trust-on-first-use", "--yes"))
    assert no_key.code == 2 and "no SSH key at" in no_key.err
    bad_port = run_cli("bootstrap", "host:99999", "--password-file", str(site["password"]), "--yes")
    assert bad_port.code == 2 and "port" in bad_port.err
    assert box.passwords == []


def test_at_a_terminal_the_unknown_key_is_shown_and_confirmed(
    run_cli: Any, box: FakeBox, site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    questions: list[str] = []

    def confirm(text: str, **kw: Any) -> bool:
        questions.append(text)
        return True

    monkeypatch.setattr("sparkctl.cli.bootstrap._interactive", lambda: True)
    monkeypatch.setattr("typer.confirm", confirm)
    res = run_cli(*_args(box, site, "--generate-key", "--json"))
    assert res.code == 0, res.err
    fingerprint = json.loads(res.out)["nodes"][0]["fingerprint"]
    err = " ".join(res.err.split())
    assert f"[127.0.0.1]:{box.port} presents an unknown host key" in err
    assert f"{box.host_key.get_name()} {fingerprint}" in err
    assert len(questions) == 2 and "Go ahead?" in questions[0] and "node's own key" in questions[1]
    assert site["known_hosts"].read_text() == box.known_hosts_line()
