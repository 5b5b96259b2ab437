"""One broken lab never takes the rest of its stream with it: sparkctl_lab.guard, and the
integration conftest's hooks that run it before every lab test (ahead of the module's fixtures)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sparkctl_lab import guard, state
from sparkctl_lab import inventory as lab_inventory

REPO = Path(__file__).resolve().parents[2]


def test_damage_names_the_state_file_the_inventory_files_and_machines_that_are_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKCTL_LAB_RUN_DIR", str(tmp_path / "run"))
    inv = tmp_path / "inventory"
    found = guard.damage(inv)
    assert found[0] == f"the lab's state file {tmp_path / 'run' / 'state.json'} is gone"
    assert f"{inv / 'hosts.yml'} is gone" in found
    inv.mkdir()
    for name in lab_inventory.render_files_names():
        (inv / name).parent.mkdir(parents=True, exist_ok=True)
        (inv / name).write_text("x")
    st = state.LabState(rootfs="/nowhere", inventory_dir=str(inv))
    st.machines["spark-0"] = state.MachineState()
    state.save(st)
    machines = ("lab-switch", "spark-0", "spark-1", "spark-2", "spark-3")
    assert sorted(guard.damage(inv)) == [f"{m} is off" for m in machines]


def test_a_lab_lost_after_a_test_is_rebuilt_and_the_line_says_after_which() -> None:
    whole = {"yes": True}
    rebuilds: list[int] = []
    g = guard.Guard(check=lambda: [] if whole["yes"] else ["inventory/lab1/hosts.yml is gone"],
                    rebuild=lambda: (rebuilds.append(1), whole.update(yes=True)))
    assert g.before("t1") is None
    g.after("t1")
    whole["yes"] = False  # t2 took the lab away
    g.after("t2")
    line = g.before("t3")
    assert line == "lab rebuilt before t3: after t2, inventory/lab1/hosts.yml is gone"
    assert rebuilds == [1] and g.rebuilt == [line] and g.broken is None
    assert g.before("t4") is None and rebuilds == [1]


def test_a_lab_that_cannot_be_rebuilt_is_one_reason_for_the_rest() -> None:
    def fail() -> None:
        raise RuntimeError("spark-2 is not reachable over SSH")

    g = guard.Guard(check=lambda: ["spark-2 is off"], rebuild=fail)
    g.after("t2")
    with pytest.raises(guard.LabLost) as first:
        g.before("t3")
    assert str(first.value) == (
        "the lab broke after t2 (spark-2 is off) and rebuilding it failed "
        "(RuntimeError: spark-2 is not reachable over SSH): the rest of this stream is skipped"
    )
    with pytest.raises(guard.LabLost) as later:
        g.before("t4")
    assert str(later.value) == str(first.value)


def test_a_rebuild_that_leaves_damage_is_a_failure_too() -> None:
    g = guard.Guard(check=lambda: ["spark-1 is off"], rebuild=lambda: None)
    with pytest.raises(guard.LabLost, match=r"rebuilding it failed \(spark-1 is off\)"):
        g.before("t1")


# --- the integration conftest's hooks, in a pytest run of their own --------------------------------

CONFTEST = """
    import importlib.util
    import sys
    from pathlib import Path

    import pytest

    spec = importlib.util.spec_from_file_location("lab_conftest", {conftest!r})
    lab_conftest = importlib.util.module_from_spec(spec)
    sys.modules["lab_conftest"] = lab_conftest
    spec.loader.exec_module(lab_conftest)
    pytest_runtest_setup = lab_conftest.pytest_runtest_setup
    pytest_runtest_teardown = lab_conftest.pytest_runtest_teardown

    from sparkctl_lab.guard import Guard

    MARK = Path(__file__).with_name("lab-is-up")  # the fake lab: whole while this file exists


    def rebuild():
        if Path(__file__).with_name("rebuild-fails").exists():
            raise RuntimeError("spark-2 is not reachable over SSH")
        MARK.write_text("up")


    @pytest.fixture(scope="session")
    def lab():
        MARK.write_text("up")
        lab_conftest._guard = Guard(check=lambda: [] if MARK.exists() else [f"{{MARK.name}} is gone"],
                                    rebuild=rebuild)
        yield MARK
        lab_conftest._guard = None
"""

TESTS = {
    "test_a.py": """
        def test_one(lab):
            assert lab.exists()

        def test_two_fails_and_takes_the_lab_away(lab):
            lab.unlink()
            assert False, "a failing test"
    """,
    "test_b.py": """
        import pytest

        @pytest.fixture(scope="module")
        def provisioned(lab):
            assert lab.exists(), "the module's fixture found no lab"
            return lab

        def test_three(provisioned):
            assert provisioned.exists()

        def test_four(lab):
            assert lab.exists()

        def test_not_a_lab_test():
            pass
    """,
}


def _run(tmp_path: Path, rebuild_fails: bool) -> str:
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(CONFTEST.format(conftest=str(REPO / "tests/integration/conftest.py")))
    )
    for name, body in TESTS.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
    if rebuild_fails:
        (tmp_path / "rebuild-fails").write_text("")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-o", "addopts=", str(tmp_path / "test_a.py"), str(tmp_path / "test_b.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={k: v for k, v in __import__("os").environ.items() if not k.startswith("PYTEST_")},
    )
    return proc.stdout + proc.stderr


def test_a_failing_test_does_not_take_the_lab_from_the_tests_after_it(tmp_path: Path) -> None:
    out = _run(tmp_path, rebuild_fails=False)
    assert "1 failed, 4 passed" in out, out
    assert "FAILED test_a.py::test_two_fails_and_takes_the_lab_away" in out
    line = ("lab rebuilt before test_b.py::test_three: "
            "after test_a.py::test_two_fails_and_takes_the_lab_away, lab-is-up is gone")
    assert line in out, out


def test_a_lab_that_cannot_be_rebuilt_skips_the_rest_with_one_reason(tmp_path: Path) -> None:
    out = _run(tmp_path, rebuild_fails=True)
    assert "1 failed, 2 passed, 1 skipped, 1 error" in out, out
    reason = ("the lab broke after test_a.py::test_two_fails_and_takes_the_lab_away (lab-is-up is gone) "
              "and rebuilding it failed (RuntimeError: spark-2 is not reachable over SSH): "
              "the rest of this stream is skipped")
    assert out.count(reason) >= 2, out  # test_three's error, test_four's skip
    assert "PASSED test_b.py::test_not_a_lab_test" in out


def test_an_up_for_another_inventory_keeps_the_one_a_running_session_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clones (or sessions) on one host share lab N: the second `lab up` writes its own
    inventory and no longer removes the first one's, which that session's next test needs; `down`
    removes both (they are recorded in the state file)."""
    monkeypatch.setenv("SPARKCTL_LAB_RUN_DIR", str(tmp_path / "run"))
    first, second = tmp_path / "a" / "inventory" / "lab1", tmp_path / "b" / "inventory" / "lab1"
    st = state.LabState(rootfs="/nowhere")
    st.adopt_inventory(first)
    st.adopt_inventory(second)
    st.adopt_inventory(second)
    assert st.inventory_dir == str(second) and st.other_inventories == [str(first)]
    state.save(st)
    again = state.load()
    assert again is not None and again.inventories() == [first, second]
    again.adopt_inventory(first)  # back to the first: it is the current one, listed once
    assert again.inventories() == [second, first]
