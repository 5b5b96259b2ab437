"""`pytest` from the repository root collects every layer: unique test file basenames (the test
directories are not packages, so two `test_x.py` collide), integration tests marked so the default
run deselects them, and a collection without errors."""

from __future__ import annotations

import ast
import io
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

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


def test_every_integration_module_is_named_in_a_stream() -> None:
    """A lab module left out of `STREAMS` falls into the last stream by default and unbalances the
    two (that is how `make test` went past its 20 minutes): each one is placed on purpose."""
    tree = ast.parse((TESTS / "integration" / "conftest.py").read_text())
    streams = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == "STREAMS" for t in node.targets))
    named = {name for stream in ast.literal_eval(ast.unparse(streams)) for name in stream}
    heavy = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "HEAVY" for t in node.targets))
    left_out = set(ast.literal_eval(ast.unparse(heavy)))
    assert not named & left_out, f"modules both in a stream and left out as heavy: {sorted(named & left_out)}"
    named |= left_out  # placed on purpose: `make integration-heavy`
    modules = {p.stem for p in (TESTS / "integration").glob("test_*.py")}
    assert modules - named == set(), f"lab modules not placed in a stream: {sorted(modules - named)}"
    assert named - modules == set(), f"streams name modules that do not exist: {sorted(named - modules)}"


def test_plain_pytest_collects_everything_and_deselects_the_lab() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
    assert proc.returncode == 0, f"collection failed: {tail}\n{proc.stdout[-3000:]}"
    assert "error" not in tail and "deselected" in tail, tail
    assert "tests/integration/" not in proc.stdout  # none selected by default


def test_the_side_jobs_run_in_a_niced_session_of_their_own() -> None:
    """`make test` runs lint beside the lab tests through $(BESIDE): a session of its own whose
    autogroup is niced to SIDE_NICE (a plain nice ranks a task only within its session), the
    command's failure passing through to make."""
    probe = 'beside-probe: ; @$(BESIDE) sh -c "cat /proc/self/autogroup 2>/dev/null; nice; exit 3"'
    proc = subprocess.run(["make", "--no-print-directory", "-s", "--eval", probe, "beside-probe"],
                          capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert proc.returncode != 0 and "Error 3" in proc.stderr, proc.stderr
    side_nice = next(line.split(":=")[1].strip() for line in (REPO / "Makefile").read_text().splitlines()
                     if line.startswith("SIDE_NICE :="))
    lines = proc.stdout.split()
    # `nice -n` adds to the caller's niceness (this test itself runs beside the lab tests in CI)
    assert lines[-1] == str(min(19, os.nice(0) + int(side_nice))), proc.stdout  # `nice` inside the session
    ours = autogroup_of_this_process()
    if ours:  # kernels with autogroup scheduling
        assert proc.stdout.startswith("/autogroup-") and f"nice {side_nice}" in proc.stdout, proc.stdout
        assert proc.stdout.split()[0] != ours  # not ours (compared whole: /autogroup-1 is a prefix of -11729)


def autogroup_of_this_process() -> str:
    """This process's autogroup ("/autogroup-N"), or "" where the kernel has none to show: no file
    without CONFIG_SCHED_AUTOGROUP, and an empty one in some sandboxed kernels."""
    try:
        words = Path("/proc/self/autogroup").read_text().split()
    except OSError:
        return ""
    return words[0] if words and words[0].startswith("/autogroup-") else ""


def test_autogroup_of_this_process_reads_an_empty_file_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI's kernel showed /proc/self/autogroup empty; the niced-session test must not fail on it."""
    real = Path.read_text

    def fake(self: Path, *args: object, **kwargs: object) -> str:
        return "" if str(self) == "/proc/self/autogroup" else real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", fake)
    assert autogroup_of_this_process() == ""


def test_make_test_runs_the_unit_tests_alone_before_the_lab_tests(tmp_path: Path) -> None:
    """Beside the lab tests (both cores busy) a unit test bound to a few seconds failed now and then,
    a different one each run: `make test` runs them alone, after the wall-clock tests and before the
    lab build and the lab tests, at the caller's niceness; only lint runs beside the lab tests. The
    Makefile runs with every phase's target replaced by one that logs it (and a stand-in sparkctl)."""
    log = tmp_path / "phases.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sparkctl").write_text(f"#!/bin/sh\necho lab-build >> {log}\n")
    (bin_dir / "sparkctl").chmod(0o755)
    stubs = "".join(
        f"\n{name}:\n\t@echo \"{name} $$(nice)\" >> {log}; sleep 0.2; echo \"{name}-end\" >> {log}\n"
        for name in ("venv", "sglang", "apt", "timing", "unit", "lint", "integration"))
    makefile = tmp_path / "Makefile"
    makefile.write_text((REPO / "Makefile").read_text() + stubs)
    for given in ("pyproject.toml", "setup.py", "constraints.txt", "constraints-sglang.txt",
                  "collections/requirements.yml"):  # the installs' inputs, then their stamps: up to date
        (tmp_path / given).parent.mkdir(exist_ok=True)
        (tmp_path / given).touch()
        os.utime(tmp_path / given, (1, 1))
    for done in ("venv/.installed", "sglang/.installed"):
        (tmp_path / done).parent.mkdir()
        (tmp_path / done).touch()
    proc = subprocess.run(["make", "--no-print-directory", "-f", str(makefile), "test", f"BIN={bin_dir}",
                           f"STAMP={tmp_path / 'venv/.installed'}", f"SGL_VENV={tmp_path / 'sglang'}"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entries = log.read_text().split("\n")
    order = [e.split()[0] for e in entries if e and not e.endswith("-end")]
    at = {name: entries.index(next(e for e in entries if e.startswith(name + " ") or e == name))
          for name in ("timing", "unit", "integration", "lint")}
    ends = {name: entries.index(name + "-end") for name in ("timing", "unit")}
    assert ends["timing"] < at["unit"], order
    assert ends["unit"] < at["integration"] and ends["unit"] < at["lint"], order
    if os.getuid() == 0:
        assert ends["unit"] < entries.index("lab-build") < at["integration"], order
    unit_nice = next(e for e in entries if e.startswith("unit ")).split()[1]
    assert unit_nice == str(os.nice(0)), entries  # not in the niced session of the side jobs


def test_the_makefile_runs_one_lab_per_stream() -> None:
    """`make integration` starts LAB_STREAMS workers (worker gwN drives lab N) and `make lab-down-all`
    takes down that many labs: as many as tests/integration/conftest.py has STREAMS."""
    conftest = ast.parse((TESTS / "integration" / "conftest.py").read_text())
    streams = next(node.value for node in conftest.body if isinstance(node, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == "STREAMS" for t in node.targets))
    assert isinstance(streams, ast.Tuple)
    lab_streams = next(line.split(":=")[1].strip() for line in (REPO / "Makefile").read_text().splitlines()
                       if line.startswith("LAB_STREAMS :="))
    assert int(lab_streams) == len(streams.elts), (lab_streams, ast.unparse(streams))



def _helper_problems(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each way around tests/support: sys.path edited, another test module imported,
    a fake runner or fake NVML of its own."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in ("FakeRunner", "FakeNvml"):
            out.append((node.lineno, f"its own {node.name} (support.runner, support.nvml have one)"))
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            callee, first = ast.unparse(node.func), node.args[0] if node.args else None
            if callee in ("sys.path.insert", "sys.path.append", "sys.path.extend"):
                out.append((node.lineno, "sys.path edited"))
            if callee.endswith("import_module") and isinstance(first, ast.Constant):
                modules = [str(first.value)]
        out += [(node.lineno, f"imports the test module {m}") for m in modules if m.startswith("test_")]
    return out


def test_unit_and_cli_tests_take_their_helpers_from_tests_support() -> None:
    """Shared fakes live once, in tests/support (imported as `support`): no test edits sys.path to
    reach a helper, imports another test module, or writes its own fake runner or fake NVML."""
    found = [f"{path.relative_to(REPO)}:{line}: {what}"
             for path in sorted([*(TESTS / "unit").glob("*.py"), *(TESTS / "cli").glob("*.py")])
             for line, what in _helper_problems(ast.parse(path.read_text()))]
    assert not found, "\n".join(found)


def test_rich_output_is_read_flat_by_one_helper() -> None:
    """Every test that reads a message out of a rich panel uses support.text.flat; none keeps a copy
    (there were six, in two variants)."""
    copies = [f"{path.relative_to(REPO)}:{node.lineno}"
              for path in sorted(TESTS.rglob("test_*.py"))
              for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.FunctionDef) and node.name in ("_flat", "flat")]
    assert not copies, copies


def test_flat_reads_a_wrapped_panel_as_the_line_the_product_wrote() -> None:
    from rich.console import Console
    from rich.panel import Panel
    from support.text import flat

    message = "spark-1: kit 0123abcd fails verification: lib/row_store.so differs — run `sparkctl stage kit`"
    console = Console(width=40, record=True, file=io.StringIO())
    console.print(Panel(message, title="error"))
    drawn = console.export_text()
    assert message not in drawn and "│" in drawn  # wrapped inside the box
    assert message in flat(drawn)


def test_a_shape_module_declares_its_shape_and_leaves_the_lab_in_it() -> None:
    """The integration conftest brings the four-node lab back before a test of a module without a
    module-level SHAPE: each shape module must declare one, and none rebuilds the lab back itself
    (that rebuild, at the end of a stream, was paid for nothing)."""
    for path in sorted((TESTS / "integration").glob("test_shape_*.py")):
        tree = ast.parse(path.read_text())
        shape = [node for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "SHAPE" for t in node.targets)]
        assert shape, f"{path.name} declares no SHAPE"
        assert "recorded_shape()" not in path.read_text(), f"{path.name} still rebuilds the shape it found"


def _integration_conftest(monkeypatch: pytest.MonkeyPatch) -> Any:
    import importlib.util

    monkeypatch.setenv("SPARKCTL_LAB_INSTANCE", "0")  # what the conftest sets on import, put back after
    monkeypatch.syspath_prepend(str(TESTS))
    spec = importlib.util.spec_from_file_location("integration_conftest",
                                                  TESTS / "integration" / "conftest.py")
    assert spec is not None and spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "integration_conftest", conftest)
    spec.loader.exec_module(conftest)
    return conftest


def test_the_lab_gets_its_default_shape_back_before_a_test_outside_the_shape_modules(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    conftest = _integration_conftest(monkeypatch)

    class Guard:
        broken = None

        def before(self, nodeid: str) -> None:
            return None

    calls: list[str] = []
    monkeypatch.setattr(conftest, "_guard", Guard())
    monkeypatch.setattr(conftest, "_reshape", lambda: calls.append("reshape") or None)

    def item(module: types.SimpleNamespace, nodeid: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(fixturenames=("lab",), module=module, nodeid=nodeid)

    conftest.pytest_runtest_setup(item(types.SimpleNamespace(SHAPE="ring"), "test_shape_ring_lab.py::t"))
    assert calls == []
    conftest.pytest_runtest_setup(item(types.SimpleNamespace(), "test_serve.py::t"))
    assert calls == ["reshape"]


def test_the_lab_summary_adds_each_phase_cpu_to_its_module_costliest_first(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    conftest = _integration_conftest(monkeypatch)
    phases = [("tests/integration/test_kit.py::test_a", 30.0, 50.0),   # setup
              ("tests/integration/test_kit.py::test_a", 10.0, 12.5),   # call
              ("tests/integration/test_lab.py::test_b", 5.0, 4.0),
              ("tests/integration/test_kit.py::test_c[x]", 1.0, 0.5),
              ("tests/integration/test_serve.py::test_d", 60.0, 90.0)]
    assert conftest.module_costs(phases) == [("test_serve.py", 60.0, 90.0), ("test_kit.py", 41.0, 63.0),
                                             ("test_lab.py", 5.0, 4.0)]
    # A machine's tree read lower than before (a process reaped between two reads) is no new use,
    # and its use is counted again only past its highest reading; a machine powered off and on is
    # a new key (another PID and start time), counted from zero.
    acc = conftest.Accumulated()
    for reading, total in ((5.0, 5.0), (7.0, 7.0), (6.5, 7.0), (7.5, 7.5)):
        assert acc.add({"spark-1:100:7": reading}) == pytest.approx(total)
    assert acc.add({"spark-1:100:7": 7.5, "spark-1:300:9": 1.0}) == pytest.approx(8.5)
    # A process tree's CPU: every live process under the root, with what it reaped.
    tick = os.sysconf("SC_CLK_TCK")
    for pid, ppid, ticks in ((10, 1, (1, 1, 0, 0)), (11, 10, (2, 0, 3, 0)), (12, 11, (0, 0, 0, 4)),
                             (13, 1, (50, 0, 0, 0))):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(
            f"{pid} (a (b)) S {ppid} 0 0 0 -1 0 0 0 0 0 {' '.join(map(str, ticks))} 20 0 1 0 5\n")
    assert conftest.process_trees([10, 13], proc=tmp_path) == {10: pytest.approx(11 / tick),
                                                                13: pytest.approx(50 / tick)}
    # The stream's CPU counts what this process and the children it reaped used.
    before = conftest._stream_core_seconds()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    assert conftest._stream_core_seconds() - before >= 0.05
