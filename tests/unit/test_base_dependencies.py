"""What the product imports is what a plain install brings: every third-party module imported
anywhere under ``sparkctl/`` belongs to a distribution listed in ``[project] dependencies``, not
only in an extra (``status --format prometheus`` once failed from the wheel with "No module named
'prometheus_client'", which only the dev extra installed).

``sparkctl/nodeside`` is the exception it names: those modules run on the nodes with Debian's
packages (the exporter's ``python3-prometheus-client``), never from the wheel's dependencies."""

from __future__ import annotations

import ast
import functools
import sys
import tomllib
from collections.abc import Mapping
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PRODUCT = REPO / "sparkctl"
NODE_SIDE = PRODUCT / "nodeside"
# Imports made where the module runs, not from the controller's install (each named with its place).
ELSEWHERE = {
    ("sparkctl/qa/nccl_allreduce.py", "torch"): "copied to the nodes and run inside the engine container",
    ("sparkctl/qa/sglang_check.py", "sglang"): "SGLang's parser, .venv-sglang (`make sglang`)",
}


def _top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _base_distributions() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {canonicalize_name(Requirement(spec).name) for spec in project["dependencies"]}


@functools.cache
def _provided() -> Mapping[str, list[str]]:
    # Once per worker: it reads every installed distribution's file list (once per product module, it
    # was the slowest unit test).
    return packages_distributions()


def _third_party(modules: set[str]) -> dict[str, set[str]]:
    """module -> the distributions that provide it, for modules not in the standard library and not
    the project's own packages."""
    provided = _provided()
    own = {"sparkctl", "sparkctl_lab", "sparkctl_sim", "ansible_collections"}
    return {
        mod: {canonicalize_name(d) for d in provided.get(mod, [])}
        for mod in modules
        if mod not in sys.stdlib_module_names and mod not in own and mod != "__future__"
    }


def test_every_product_import_comes_with_a_plain_install() -> None:
    base = _base_distributions()
    missing: list[str] = []
    for path in sorted(PRODUCT.rglob("*.py")):
        if NODE_SIDE in path.parents:
            continue
        rel = str(path.relative_to(REPO))
        for mod, dists in sorted(_third_party(_top_level_imports(path)).items()):
            if not dists & base and (rel, mod) not in ELSEWHERE:
                missing.append(f"{rel}: {mod} ({', '.join(sorted(dists)) or 'not installed'})")
    assert not missing, "imported by the product but not in [project] dependencies:\n" + "\n".join(missing)


def test_the_exceptions_are_still_true() -> None:
    stale = [f"{rel}: {mod}" for rel, mod in ELSEWHERE if mod not in _top_level_imports(REPO / rel)]
    assert not stale, f"exceptions for imports that no longer exist: {stale}"


def test_the_check_sees_an_import_outside_the_base() -> None:
    # The rule itself: a module only the dev extra brings is reported (pytest is one).
    assert not _third_party({"pytest"})["pytest"] & _base_distributions()
