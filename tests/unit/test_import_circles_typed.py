"""No two modules of sparkctl import each other, not even for annotations.

import-linter's ``acyclic_siblings`` contract reads the run-time imports only
(``exclude_type_checking_imports``), so a circle closed by an ``if TYPE_CHECKING:`` import, or by an
import inside a function, passes it. Such a circle still ties two modules into one: neither can be
read, typed or moved without the other. This test reads every import of every module (top level,
``TYPE_CHECKING`` blocks and function bodies alike) and fails on any circle between modules; a
package's ``__init__`` (its face, handing names on) is not a module of a circle here.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sparkctl"


def _modules() -> dict[str, tuple[Path, bool]]:
    """dotted name -> (file, is a package's __init__)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        face = parts[-1] == "__init__"
        out[".".join(parts[:-1] if face else parts)] = (path, face)
    return out


def _imports(name: str, path: Path, face: bool, known: dict[str, tuple[Path, bool]]) -> set[str]:
    """The modules of sparkctl (not packages' faces) that ``name`` imports anywhere in its text."""
    package = name if face else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return {m for m in found if m in known and m != name and not known[m][1]}


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_the_circle_finder_finds_a_type_only_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_modules_of_sparkctl_import_each_other_even_for_types() -> None:
    known = _modules()
    edges = {name: _imports(name, path, face, known) for name, (path, face) in known.items()}
    assert _circles(edges) == [], "modules that import each other (move the shared piece down a floor)"
