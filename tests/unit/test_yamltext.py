"""sparkctl reads YAML through one helper, with libyaml's parser: the same data as PyYAML's
pure-Python safe loader, for a fraction of the CPU every command spends reading a profile and the
role defaults."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from sparkctl import yamltext

REPO = Path(__file__).resolve().parents[2]


def test_libyaml_is_used_where_pyyaml_has_it() -> None:
    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML built without libyaml")
    assert yamltext.SafeLoader is yaml.CSafeLoader


@pytest.mark.parametrize("path", sorted([*(REPO / "sparkctl" / "profiles").glob("*.yml"),
                                         *(REPO / "roles").glob("*/defaults/main.yml")]),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_yaml_reads_the_same_as_with_the_pure_python_loader(path: Path) -> None:
    text = path.read_text()
    assert yamltext.safe_load(text) == yaml.load(text, Loader=yaml.SafeLoader)


def test_no_module_reads_yaml_past_the_helper() -> None:
    calls = []
    for source in sorted((REPO / "sparkctl").rglob("*.py")):
        if source.name == "yamltext.py":
            continue
        for node in ast.walk(ast.parse(source.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "yaml"
                    and node.func.attr in ("safe_load", "load", "safe_load_all", "load_all")):
                calls.append(f"{source.relative_to(REPO)}:{node.lineno}")
    assert calls == []
