"""`sparkctl validate` with m1-1m: exit 2 naming sparkctl_runtime.image_source when the image is not
Mia's build; exit 0 when it is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from sparkctl.errors import EXIT_OK, EXIT_USAGE

MIA_KIT = {"source": "git", "url": "https://github.com/MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks.git",
           "commit": "e0985205caea5a3afd43e88bebb076eeefdec8b5"}


def _m1(site: Path, runtime: dict[str, Any]) -> None:
    path = site / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(path.read_text())
    doc.update(sparkctl_profile="m1-1m", sparkctl_kit=MIA_KIT, sparkctl_runtime=runtime)
    path.write_text(yaml.safe_dump(doc))


def test_validate_refuses_m1_on_a_stock_image(example_copy: Path, run_cli: Any,
                                              no_network: list[str]) -> None:
    _m1(example_copy, {"kind": "container", "image_source": "pull",
                       "image": "lmsysorg/sglang@sha256:" + "3f" * 32})
    result = run_cli("-i", str(example_copy), "--json", "validate")
    assert result.code == EXIT_USAGE
    (error,) = json.loads(result.out)["errors"]
    assert "sparkctl_runtime.image_source" in json.dumps(error)
    assert "MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks" in json.dumps(error)
    plain = run_cli("-i", str(example_copy), "validate")
    assert plain.code == EXIT_USAGE and "sparkctl_runtime.image_source" in plain.out + plain.err


def test_validate_accepts_m1_built_from_mias_repository(example_copy: Path, run_cli: Any,
                                                        no_network: list[str]) -> None:
    _m1(example_copy, {"kind": "container", "image_source": "build", "image": "dsv41-4x-spark:local"})
    result = run_cli("-i", str(example_copy), "validate")
    assert result.code == EXIT_OK, result.out + result.err
