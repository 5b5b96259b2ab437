"""With --json, a script can rely on stdout: every failure of every command prints one JSON object
(``{"error": {code, message, hint, details, nodes}}``) unless the command already printed its own
document; the exit code is the same as without --json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.core import TyperGroup
from typer.main import get_command

from sparkctl.cli import _register, app

# `lab` drives this machine's lab (not an inventory): its commands are tested with the lab.
_SKIP = {"lab"}


def _leaves(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(cmd, TyperGroup):
        return [leaf for name, sub in cmd.commands.items() if name not in _SKIP
                for leaf in _leaves(sub, (*path, name))]
    return [path]


_register()
LEAVES = _leaves(get_command(app))


@pytest.mark.parametrize("words", LEAVES, ids=[" ".join(w) for w in LEAVES])
def test_every_command_fails_with_one_json_object_on_stdout(
    words: tuple[str, ...], run_cli: Any, tmp_path: Path, no_network: list[str]
) -> None:
    missing = tmp_path / "no-such-site"
    res = run_cli("-i", str(missing), "--json", *words)
    if res.code == 0:  # a command that needs no inventory (`profiles`) prints its document
        json.loads(res.out)
        return
    doc = json.loads(res.out)  # one document, nothing else on stdout
    if "error" not in doc:  # the command's own document says it failed (validate: ok false, errors)
        assert doc.get("ok") is False and doc.get("errors"), (words, doc)
        return
    assert doc["error"]["code"] == res.code, (words, doc)
    assert doc["error"]["message"], words


def test_a_failure_prints_no_json_without_the_flag(run_cli: Any, tmp_path: Path) -> None:
    res = run_cli("-i", str(tmp_path / "no-such-site"), "up")
    assert res.code == 2 and res.out == "", res.out
    assert "sparkctl: error" in res.err  # the panel, for a person


def test_the_error_object_names_the_problem(run_cli: Any, tmp_path: Path) -> None:
    res = run_cli("-i", str(tmp_path / "no-such-site"), "--json", "down")
    err = json.loads(res.out)["error"]
    assert res.code == 2 and err["code"] == 2
    assert "no-such-site" in err["message"] + " ".join(err["details"]), err


def test_a_usage_error_is_a_json_error_too(run_cli: Any) -> None:
    res = run_cli("--json", "status", "--no-such-flag")
    assert res.code == 2
    assert json.loads(res.out)["error"]["code"] == 2
