"""Every hostile inventory in cases.yml makes `sparkctl validate` exit 2 naming the field; none
touches the network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import EXIT_USAGE

CASES_FILE = Path(__file__).with_name("cases.yml")
SHORT = {"H": "hosts.yml", "G": "group_vars/all/sparkctl.yml"}
CASES: list[dict[str, Any]] = yaml.safe_load(CASES_FILE.read_text())


def _file(inv: Path, name: str) -> Path:
    return inv / SHORT.get(name, name)


def _walk(doc: Any, at: list[Any]) -> Any:
    for key in at:
        doc = doc[key]
    return doc


def apply_op(inv: Path, op: dict[str, Any]) -> None:
    ((kind, arg),) = op.items()
    if kind == "remove":
        _file(inv, arg).unlink()
        return
    path = _file(inv, arg["file"])
    if kind == "write":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(arg["text"])
        return
    if kind == "replace":
        text = path.read_text()
        assert arg["old"] in text, f"{arg['old']!r} not in {path}"
        path.write_text(text.replace(arg["old"], arg["new"], 1))
        return
    doc = yaml.safe_load(path.read_text())
    parent = _walk(doc, arg["at"][:-1])
    last = arg["at"][-1]
    if kind == "set":
        parent[last] = arg["value"]
    elif kind == "delete":
        del parent[last]
    else:
        raise AssertionError(f"unknown op {kind}")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_there_are_at_least_35_distinct_cases() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) >= 35
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_hostile_inventory_exits_2_naming_the_field(
    case: dict[str, Any], example_copy: Path, run_cli: Any, no_network: list[str]
) -> None:
    for op in case["ops"]:
        apply_op(example_copy, op)
    result = run_cli("--inventory", str(example_copy), "--json", "validate")
    assert result.code == EXIT_USAGE, result.out + result.err
    doc = json.loads(result.out)
    assert doc["ok"] is False
    matching = [e for e in doc["errors"] if e.startswith(case["field"]) and case["says"] in e]
    assert matching, f"no error starts with {case['field']!r} and says {case['says']!r}: {doc['errors']}"
    # Every line names a field and says what to do.
    for line in doc["errors"]:
        assert " — " in line, line


def test_all_problems_are_reported_together(example_copy: Path, run_cli: Any, no_network: list[str]) -> None:
    for case_id in ("duplicate-mgmt-ip", "host-mtu-1500", "port-80", "mutable-image-tag", "single-pcie-half"):
        case = next(c for c in CASES if c["id"] == case_id)
        for op in case["ops"]:
            apply_op(example_copy, op)
    result = run_cli("-i", str(example_copy), "--json", "validate")
    assert result.code == EXIT_USAGE
    errors = json.loads(result.out)["errors"]
    for field in (
        "sparks.spark-1.ansible_host",
        "sparkctl_fabric.mtu",
        "sparkctl_ports.api",
        "sparkctl_runtime.image",
        "sparks.spark-0.sparkctl_fabric_ports",
    ):
        assert any(e.startswith(field + ":") for e in errors), (field, errors)


def test_panel_lists_every_problem_on_stderr(example_copy: Path, run_cli: Any, no_network: list[str]) -> None:
    apply_op(example_copy, {"set": {"file": "G", "at": ["sparkctl_fabric", "mtu"], "value": 1500}})
    apply_op(example_copy, {"set": {"file": "G", "at": ["sparkctl_ports", "api"], "value": 80}})
    result = run_cli("-i", str(example_copy), "validate")
    assert result.code == EXIT_USAGE
    assert result.out == ""
    flat = " ".join(result.err.replace("│", " ").split())
    assert "has 2 problems" in flat
    assert "sparkctl_fabric.mtu: 1500 is below 9000" in flat
    assert "sparkctl_ports.api: 80 is outside 1024–65535" in flat
