"""The dependency-free JSON Schema checker agrees with the reference implementation."""

from __future__ import annotations

from typing import Any

import pytest

from sparkctl.qa.qualify import JSON_SCHEMA
from sparkctl.qa.schema import validate

CASES: list[tuple[Any, bool]] = [  # R4's structured check: {"answer": integer}, nothing else
    ({"answer": 42}, True),
    ({"answer": 42.0}, True),  # 42.0 is an integer in JSON Schema
    ({"answer": "42"}, False),
    ({"answer": True}, False),  # booleans are not integers
    ({}, False),
    ({"answer": 42, "extra": 1}, False),
    ([42], False),
    (None, False),
    ({"answer": 4.5}, False),
]


@pytest.mark.parametrize(("instance", "valid"), CASES)
def test_answer_schema(instance: Any, valid: bool) -> None:
    assert (validate(instance, JSON_SCHEMA) == []) is valid


@pytest.mark.parametrize(("instance", "valid"), CASES)
def test_agrees_with_jsonschema(instance: Any, valid: bool) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    assert jsonschema.Draft202012Validator(JSON_SCHEMA).is_valid(instance) is valid


def test_nested_keywords_and_error_paths() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "minLength": 2}, "maxItems": 2},
            "level": {"enum": ["low", "high"]},
            "n": {"type": ["integer", "null"], "minimum": 0, "maximum": 9},
        },
        "additionalProperties": {"type": "boolean"},
    }
    assert validate({"tags": ["ab"], "level": "low", "n": None, "flag": True}, schema) == []
    errors = validate({"tags": ["a", "bc", "de"], "level": "mid", "n": 12, "flag": "yes"}, schema)
    assert errors == [
        "$.tags: more than 2 items",
        "$.tags[0]: shorter than 2",
        "$.level: 'mid' is not one of ['low', 'high']",
        "$.n: 12 > maximum 9",
        "$.flag: expected boolean, got str",
    ]
