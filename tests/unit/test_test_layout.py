"""`pytest` from the repository root collects every layer: unique test file basenames (the test
directories are not packages, so two `test_x.py` collide), integration tests marked so the default
run deselects them, and a collection without errors."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


def test_test_file_basenames_are_unique_across_layers() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert not [n for n, c in names.items() if c > 1], "test files sharing a basename"


def _marks_integration(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return "integration" in ast.unparse(node.value)
    return False


def test_every_integration_module_is_marked() -> None:
    modules = sorted((TESTS / "integration").glob("test_*.py"))
    unmarked = [p.name for p in modules if not _marks_integration(p)]
    assert not unmarked, f"integration tests without pytestmark = pytest.mark.integration: {unmarked}"


def test_plain_pytest_collects_everything_and_deselects_the_lab() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
    assert proc.returncode == 0, f"collection failed: {tail}\n{proc.stdout[-3000:]}"
    assert "error" not in tail and "deselected" in tail, tail
    assert "tests/integration/" not in proc.stdout  # none selected by default


def test_the_side_jobs_run_in_a_session_of_their_own_niced_as_a_whole() -> None:
    """What `make test` runs beside the lab tests (lint, unit/CLI) yields to them: with autogroup
    scheduling a plain `nice` ranks a task only within its own session, so the script gives the
    command a session of its own and nices that session's group too; the exit code passes through."""
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("this kernel has no autogroup scheduling (the script is plain nice here)")
    probe = "import os; print(os.getsid(0), os.nice(0), open('/proc/self/autogroup').read().split()[-1])"
    script = str(REPO / "scripts" / "idle_only.sh")
    proc = subprocess.run(["bash", script, sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    sid, nice, group_nice = proc.stdout.split()
    assert int(sid) != os.getsid(0) and nice == "19" and group_nice == "19"
    assert subprocess.run(["bash", script, "sh", "-c", "exit 7"]).returncode == 7
