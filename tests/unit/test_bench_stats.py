"""bench/_stats.py: the one median/min/max summary the benchmarks print, with each script's
options giving exactly the dictionary its own copy of ``spread`` used to return."""

from __future__ import annotations

import ast
import importlib.util
import statistics
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _stats() -> Any:
    spec = importlib.util.spec_from_file_location("bench_stats", BENCH / "_stats.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SAMPLES = [[3.14159], [2.0, 1.0], [9.87654, 1.23456, 5.55555, 2.22222, 7.77777],
           [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]


# The copies the scripts had, as they were (the reference for "the same numbers").
def _runs_2(xs: list[float]) -> dict[str, Any]:  # down_stop, provision_strategy
    return {"median": round(statistics.median(xs), 2), "min": round(min(xs), 2), "max": round(max(xs), 2),
            "runs": [round(x, 2) for x in xs]}


def _runs_2_s(xs: list[float]) -> dict[str, Any]:  # provision_noop, stage_noop (and down_noop through it)
    return {"median_s": round(statistics.median(xs), 2), "min_s": round(min(xs), 2),
            "max_s": round(max(xs), 2), "runs_s": [round(x, 2) for x in xs]}


def _raw(values: list[float]) -> dict[str, float]:  # exporter_scrape
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _three(values: list[float]) -> dict[str, float]:  # stage_bench (and image_fanout_bench through it)
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def _iqr(values: list[float]) -> dict[str, float]:  # up_overhead
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "iqr": round(q[2] - q[0], 3)}


@pytest.mark.parametrize(
    ("old", "options"),
    [
        (_runs_2, {"runs": True}),
        (_runs_2_s, {"runs": True, "unit": "_s"}),
        (_raw, {"digits": None}),
        (_three, {"digits": 3}),
        (_iqr, {"digits": 3, "iqr": True}),
    ],
)
@pytest.mark.parametrize("xs", SAMPLES)
def test_each_scripts_options_give_what_its_own_copy_gave(
    old: Any, options: dict[str, Any], xs: list[float]
) -> None:
    new = _stats().spread(xs, **options)
    assert new == old(xs) and list(new) == list(old(xs))  # the same keys in the same order, the same numbers


def test_one_definition_and_every_caller_imports_it() -> None:
    callers = []
    for path in sorted(BENCH.glob("*.py")):
        tree = ast.parse(path.read_text())
        defs = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "spread"]
        assert path.name == "_stats.py" or not defs, f"{path.name} defines its own spread()"
        calls = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "spread"
                    for n in ast.walk(tree))
        if calls and path.name != "_stats.py":
            imported = any(isinstance(n, ast.ImportFrom) and n.module == "_stats"
                           and any(a.name == "spread" for a in n.names) for n in tree.body)
            assert imported, f"{path.name} calls spread() without importing it from _stats"
            callers.append(path.stem)
    assert len(callers) >= 9, callers
