"""Code that runs on the nodes imports the standard library only, whatever the package's name.

lint-imports' forbidden contract names the third-party packages sparkctl knows of; this reads the
import graph (grimp, import-linter's own) against the standard library's list, so a package that
is new to the project is caught as well."""

from __future__ import annotations

import sys

import grimp

from sparkctl.serve import fastup
from sparkctl.stage import faststage

# Modules of a service of its own on the node, with its one third-party import (see pyproject.toml).
EXCEPTIONS = {("sparkctl.nodeside.exporter", "prometheus_client")}


def test_node_code_imports_only_the_standard_library_and_itself() -> None:
    graph = grimp.build_graph("sparkctl", include_external_packages=True, cache_dir=None)
    shipped = {f"sparkctl.{m}" for m in (*fastup.NODE_MODULES, *faststage.NODE_MODULES)}
    node_code = shipped | graph.find_descendants("sparkctl.nodeside")
    assert {m for m in shipped if m.startswith("sparkctl.nodeside.")} >= {"sparkctl.nodeside.upcheck",
                                                                         "sparkctl.nodeside.stagecheck"}
    bad = []
    for module in sorted(node_code):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            top = imported.split(".")[0]
            if (module, imported) in EXCEPTIONS or top in sys.stdlib_module_names or top == "__future__":
                continue
            if imported in node_code:
                continue
            bad.append(f"{module} -> {imported}")
    assert not bad, f"node-side code imports beyond the standard library and itself: {', '.join(bad)}"
