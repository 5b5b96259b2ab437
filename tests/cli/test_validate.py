"""`sparkctl validate`: exit 0 with a ✓ summary, --json both ways, exit 2 listing every problem."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import EXIT_OK, EXIT_USAGE
from sparkctl.qa import sglang_check

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example"


def test_validate_example_prints_the_summary(run_cli: Any, no_network: list[str]) -> None:
    result = run_cli("-i", str(EXAMPLE), "validate")
    assert result.code == EXIT_OK, result.err
    flat = " ".join(result.out.replace("│", " ").split())
    assert "✓ inventory" in flat and "is valid" in flat
    for row in (
        "✓ site example",
        "✓ profile r4-nvme: TP4/EP4",
        "✓ nodes 4 (head spark-0",
        "✓ ranks 0=spark-0, 1=spark-1, 2=spark-2, 3=spark-3",
        "✓ switch crs812 (routeros",
    ):
        assert row in flat, (row, flat)
    assert "note prefill transient" in flat


def test_validate_json_ok(run_cli: Any, no_network: list[str]) -> None:
    result = run_cli("-i", str(EXAMPLE), "--json", "validate")
    assert result.code == EXIT_OK
    doc = json.loads(result.out)
    assert doc["ok"] is True
    assert (doc["cluster"], doc["profile"], doc["runtime"]) == ("example", "r4-nvme", "container")
    assert [(n["name"], n["rank"], n["role"]) for n in doc["nodes"]] == [
        ("spark-0", 0, "head"),
        ("spark-1", 1, "worker"),
        ("spark-2", 2, "worker"),
        ("spark-3", 3, "worker"),
    ]
    assert [p["hca"] for p in doc["nodes"][0]["fabric"]] == ["rocep1s0f0", "roceP2p1s0f0"]
    assert doc["switch"] == {"name": "crs812", "type": "routeros", "host": "192.168.7.2", "mtu": 9216}
    assert doc["memory"]["kv_pool_gib"] == 6.22
    assert doc["disk_need_gib"] == 531.21
    # the memory note, then validate's notes on this controller: the example pins no host key yet,
    # and the API key's variable may not be set here
    assert doc["warnings"][0].startswith("prefill transient")
    assert "known_hosts pins no host key for spark-0" in doc["warnings"][1]
    assert len(doc["warnings"]) == 2 + ("SPARKCTL_API_KEY" not in os.environ)


def test_validate_json_errors(example_copy: Path, run_cli: Any, no_network: list[str]) -> None:
    path = example_copy / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(path.read_text())
    doc["sparkctl_ports"]["api"] = 80
    doc["sparkctl_runtime"]["image_source"] = "pull"
    doc["sparkctl_runtime"]["image"] = "lmsysorg/sglang:latest"
    path.write_text(yaml.safe_dump(doc))
    result = run_cli("-i", str(example_copy), "--json", "validate")
    assert result.code == EXIT_USAGE
    out = json.loads(result.out)
    assert out["ok"] is False
    assert len(out["errors"]) == 2
    assert result.err == ""  # JSON mode: the document is the whole answer


def test_validate_uses_the_environment_variable(
    run_cli: Any, monkeypatch: pytest.MonkeyPatch, no_network: list[str]
) -> None:
    monkeypatch.setenv("SPARKCTL_INVENTORY", str(EXAMPLE))
    assert run_cli("--json", "validate").code == EXIT_OK


@pytest.mark.parametrize("json_mode", [False, True])
def test_validate_missing_inventory(
    tmp_path: Path, run_cli: Any, no_network: list[str], json_mode: bool
) -> None:
    args = ["-i", str(tmp_path / "nowhere"), *(["--json"] if json_mode else []), "validate"]
    result = run_cli(*args)
    assert result.code == EXIT_USAGE
    if json_mode:
        assert json.loads(result.out)["ok"] is False
    else:
        assert "does not exist" in " ".join(result.err.replace("│", " ").split())


def test_validate_lab_style_inventory(example_copy: Path, run_cli: Any, no_network: list[str]) -> None:
    path = example_copy / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(path.read_text())
    doc["sparkctl_profile"] = "lab"
    doc["sparkctl_runtime"] = {"kind": "lab"}
    del doc["sparkctl_kit"]
    path.write_text(yaml.safe_dump(doc))
    result = run_cli("-i", str(example_copy), "--json", "validate")
    assert result.code == EXIT_OK, result.out
    assert json.loads(result.out)["profile"] == "lab"


def test_validate_says_when_sglangs_parser_did_not_run_and_strict_refuses(
    run_cli: Any, no_network: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sglang_check, "available", lambda: False)
    result = run_cli("-i", str(EXAMPLE), "validate")
    assert result.code == EXIT_OK, result.err
    assert "own parser did not run" in " ".join(result.out.split())
    doc = json.loads(run_cli("-i", str(EXAMPLE), "--json", "validate").out)
    assert doc["ok"] is True and doc["sglang_parser"] is False
    strict = run_cli("-i", str(EXAMPLE), "validate", "--strict")
    assert strict.code == EXIT_USAGE
    assert "--strict asks for it" in " ".join(strict.err.split())


def test_an_in_process_command_leaves_the_environment_as_it_found_it(
    run_cli: Any, tmp_path: Path, no_network: list[str]
) -> None:
    """`--vault-password-file` exports ANSIBLE_VAULT_PASSWORD_FILE for the command's children; run
    in-process by a test it must not stay behind (a later test's ansible-vault then saw two vault
    ids and refused with exit 5)."""
    import os

    pw = tmp_path / "pw"
    pw.write_text("secret\n")
    before = dict(os.environ)
    res = run_cli("--vault-password-file", str(pw), "validate", "-i", str(EXAMPLE))
    assert res.code == 0, res.out + res.err
    assert dict(os.environ) == before
