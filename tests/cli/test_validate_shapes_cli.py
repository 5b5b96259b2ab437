"""`sparkctl validate` on every shape: the shipped example of each passes (exit 0), each impossible
shape is refused with exit 2 and the field it names in the --json document."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import EXIT_OK, EXIT_USAGE

EXAMPLES = Path(__file__).resolve().parents[2] / "inventory" / "examples"


@pytest.mark.parametrize("shape", ["triangle-tp3", "ring-tp4", "switch-tp8", "switch-2xtp4"])
def test_validate_accepts_each_shapes_example(shape: str, run_cli: Any, no_network: list[str]) -> None:
    result = run_cli("-i", str(EXAMPLES / shape), "--json", "validate")
    assert result.code == EXIT_OK, result.out
    assert json.loads(result.out)["ok"] is True


def _copy(shape: str, tmp_path: Path) -> Path:
    dest = tmp_path / shape
    shutil.copytree(EXAMPLES / shape, dest)
    return dest


def _edit(path: Path, change: Any) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _drop_switch(doc: dict[str, Any]) -> None:
    del doc["all"]["children"]["switches"]


def _ring_site(doc: dict[str, Any]) -> None:
    doc.update(sparkctl_topology="ring", sparkctl_profile="mia-ring-tp4")


def _seven(doc: dict[str, Any]) -> None:
    del doc["all"]["children"]["sparks"]["hosts"]["spark-7"]
    del doc["all"]["children"]["switches"]["hosts"]["crs812"]["sparkctl_switch_ports"]["spark-7"]


def _overlap(doc: dict[str, Any]) -> None:
    doc["sparkctl_groups"][1]["nodes"][0] = "spark-3"


def _refused(inv: Path, run_cli: Any) -> list[str]:
    result = run_cli("-i", str(inv), "--json", "validate")
    assert result.code == EXIT_USAGE, result.out
    doc = json.loads(result.out)
    assert doc["ok"] is False
    return [str(e) for e in doc["errors"]]


def test_validate_refuses_the_impossible_shapes(tmp_path: Path, run_cli: Any, no_network: list[str]) -> None:
    ring8 = _copy("switch-tp8", tmp_path)
    _edit(ring8 / "hosts.yml", _drop_switch)
    _edit(ring8 / "group_vars/all/sparkctl.yml", _ring_site)
    assert any("sparkctl_topology" in e and "ring needs exactly 4 nodes" in e
               for e in _refused(ring8, run_cli))

    four = _copy("ring-tp4", tmp_path)
    _edit(four / "group_vars/all/sparkctl.yml", lambda d: d.update(sparkctl_topology="switch",
                                                                   sparkctl_profile="m1-1m"))
    assert any("all.children.switches" in e and "4 nodes and no switch" in e for e in _refused(four, run_cli))

    seven = _copy("switch-tp8", tmp_path / "seven")
    _edit(seven / "hosts.yml", _seven)
    assert any("all.children.sparks.hosts" in e and "7 nodes is not a multiple of --tp-size 8" in e
               for e in _refused(seven, run_cli))

    overlap = _copy("switch-2xtp4", tmp_path)
    _edit(overlap / "group_vars/all/sparkctl.yml", _overlap)
    assert any("sparkctl_groups[1].nodes[0]" in e and "groups overlap" in e
               for e in _refused(overlap, run_cli))
