"""The rank's 0600 --config file holds any key exactly: no quoting trick adds or changes a setting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.model import load_inventory
from sparkctl.render import rank

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example"

HOSTILE = [
    'abc"def',                                   # a quote closes a naive "..." value
    'x"\napi-key: "attacker',                    # a newline injects a second key
    "x\nhost: 0.0.0.0",                          # ... or another SGLang argument
    "back\\slash\\\"",                           # escapes
    "  leading and trailing  ",                  # spaces kept
    "#not-a-comment",                            # a comment marker at the start
    "{flow: mapping}",                           # YAML flow syntax
    "tab\tand\u00e9\u2603 unicode",
    "- a list item",
    "null",                                      # would read back as None unquoted
]


@pytest.fixture(scope="module")
def example() -> Any:
    return load_inventory(EXAMPLE)


@pytest.mark.parametrize("key", HOSTILE)
def test_a_hostile_key_reads_back_as_itself_and_nothing_else(example: Any, key: str) -> None:
    names = rank.rank_secret_names(example)
    assert names, "the example inventory has an api_key"
    text = rank.rank_secrets_text(example, dict.fromkeys(names, key))
    doc = yaml.safe_load(text)
    assert doc == {"api-key": key}
