"""`sparkctl validate` on the publishers' rules: exit 2, every broken rule in one run, each on its field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from sparkctl.errors import EXIT_USAGE


def test_every_publication_rule_is_reported_in_one_validate(
    example_copy: Path, run_cli: Any, no_network: list[str]
) -> None:
    hosts = example_copy / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    del doc["all"]["children"]["switches"]
    hosts.write_text(yaml.safe_dump(doc))
    path = example_copy / "group_vars/all/sparkctl.yml"
    site = yaml.safe_load(path.read_text())
    site["sparkctl_runtime"] = {"kind": "venv", "venv_path": "/opt/sparkctl/venv"}
    del site["sparkctl_kit"]
    site["sparkctl_profile_overrides"] = {"args": {"--min-free-slots-delay": 4}}
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    result = run_cli("-i", str(example_copy), "--json", "validate")
    assert result.code == EXIT_USAGE
    out = json.loads(result.out)
    assert out["ok"] is False
    fields = [e.split(":", 1)[0] for e in out["errors"]]
    for field in ("sparkctl_runtime.kind", "sparkctl_profile_overrides.args.--min-free-slots-delay",
                  "all.children.switches"):
        assert field in fields, (field, out["errors"])
    assert no_network == []


def test_a_negative_context_length_is_refused_by_validate(
    example_copy: Path, run_cli: Any, no_network: list[str]
) -> None:
    path = example_copy / "group_vars/all/sparkctl.yml"
    site = yaml.safe_load(path.read_text())
    site["sparkctl_profile_overrides"] = {"args": {"--context-length": -5}}
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    result = run_cli("-i", str(example_copy), "validate")
    assert result.code == EXIT_USAGE
    flat = " ".join(result.err.replace("│", " ").split())
    assert "sparkctl_profile_overrides.args.--context-length: -5 must be positive" in flat
