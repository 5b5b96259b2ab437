"""The typed model flows through every signature: no module under sparkctl/ aliases the model's
``Cluster`` or ``Node`` to ``Any``, and no parameter named ``cluster`` or ``node`` is typed ``Any``
(they take ``sparkctl.model.Cluster`` / ``Node``, under ``if TYPE_CHECKING:`` where layering needs it)."""

from __future__ import annotations

import ast
from pathlib import Path

SPARKCTL = Path(__file__).resolve().parents[2] / "sparkctl"
MODEL_NAMES = {"Cluster", "Node"}
PARAM_NAMES = {"cluster", "node"}


def _is_any(expr: ast.expr | None) -> bool:
    """``Any``, ``typing.Any`` or the string ``"Any"`` (a quoted annotation)."""
    if isinstance(expr, ast.Name):
        return expr.id == "Any"
    if isinstance(expr, ast.Attribute):
        return expr.attr == "Any"
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value.strip() in ("Any", "typing.Any")
    return False


def _targets(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def untyped_model(source: str, where: str = "<source>") -> list[str]:
    """Every ``Cluster = Any`` / ``Node = Any`` and every ``cluster: Any`` / ``node: Any`` parameter."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign | ast.AnnAssign) and _is_any(node.value):
            names = [name for name in _targets(node) if name in MODEL_NAMES]
            found += [f"{where}:{node.lineno}: {name} = Any" for name in names]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None and arg.arg in PARAM_NAMES and _is_any(arg.annotation):
                    found.append(f"{where}:{arg.lineno}: {arg.arg}: Any")
    return found


def test_the_check_finds_each_untyped_form() -> None:
    source = (
        "from typing import Any\nimport typing\n"
        "Cluster = Any\nNode: typing.TypeAlias = Any\n"
        "def f(cluster: Any, *, node: 'Any') -> None: ...\n"
        "def g(cluster: Cluster, node: Node, other: Any) -> Any: ...\n"
    )
    assert [f.split(": ", 1)[1] for f in untyped_model(source)] == [
        "Cluster = Any", "Node = Any", "cluster: Any", "node: Any"]


def test_no_cluster_or_node_is_typed_any_under_sparkctl() -> None:
    found = []
    for path in sorted(SPARKCTL.rglob("*.py")):
        found += untyped_model(path.read_text(), str(path.relative_to(SPARKCTL.parent)))
    assert not found, "use sparkctl.model.Cluster / Node (under TYPE_CHECKING where layering needs it):\n" + \
        "\n".join(found)
