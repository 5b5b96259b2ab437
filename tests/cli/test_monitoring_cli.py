"""`sparkctl monitoring config|dashboard` through the real entry point: output, files, exit codes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

EXAMPLE = str(Path(__file__).resolve().parents[2] / "inventory" / "example")
KEY = "sk-cli-monitoring-never-printed"


def test_config_needs_a_key_file_for_an_env_reference(run_cli: Callable[..., Any],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", KEY)
    res = run_cli("monitoring", "config", "-i", EXAMPLE)
    assert res.code == 2
    assert "sparkctl_secrets.api_key is env:SPARKCTL_API_KEY" in res.err and "--api-key-file" in res.err
    assert res.out == "" and KEY not in res.err


def test_config_prints_prometheus_yaml(run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", KEY)
    res = run_cli("monitoring", "config", "-i", EXAMPLE, "--api-key-file", "/etc/prometheus/key",
                  "--interval", "30")
    assert res.code == 0, res.err
    assert KEY not in res.out
    doc = yaml.safe_load(res.out)
    assert doc["global"]["scrape_interval"] == "30s"
    assert [j["job_name"] for j in doc["scrape_configs"]] == ["sparkctl-nodes", "sglang"]
    assert doc["scrape_configs"][1]["authorization"]["credentials_file"] == "/etc/prometheus/key"


def test_config_key_file_from_the_inventory_and_output_file(
    run_cli: Callable[..., Any], example_copy: Path, tmp_path: Path
) -> None:
    gv = example_copy / "group_vars" / "all" / "sparkctl.yml"
    gv.write_text(gv.read_text().replace("api_key: {env: SPARKCTL_API_KEY}", "api_key: {file: api-key}"))
    (example_copy / "api-key").write_text(KEY)
    out = tmp_path / "prometheus.yml"
    res = run_cli("monitoring", "config", "-i", str(example_copy), "-o", str(out))
    assert res.code == 0, res.err
    assert res.out == "" and "written to" in res.err
    text = out.read_text()
    assert KEY not in text
    auth = yaml.safe_load(text)["scrape_configs"][1]["authorization"]
    assert auth == {"type": "Bearer", "credentials_file": str((example_copy / "api-key").absolute())}


def test_config_bad_input(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    assert run_cli("monitoring", "config", "-i", str(tmp_path / "nowhere")).code == 2
    res = run_cli("monitoring", "config", "-i", EXAMPLE, "--api-key-file", "/k", "--interval", "0")
    assert res.code == 2 and "--interval" in res.err


def test_dashboard_prints_and_writes(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    res = run_cli("monitoring", "dashboard")
    assert res.code == 0
    doc = json.loads(res.out)
    assert doc["uid"] == "sparkctl-cluster" and doc["panels"]
    out = tmp_path / "d.json"
    assert run_cli("monitoring", "dashboard", "-o", str(out)).code == 0
    assert json.loads(out.read_text()) == doc
    res = run_cli("monitoring", "dashboard", "-o", str(tmp_path / "no" / "such" / "dir" / "d.json"))
    assert res.code == 2 and "--output" in res.err
