"""The lab's waits for a machine to start are polls long enough for a loaded machine.

On a 2-core machine at load ~25 (three labs' tests, two busy loops, other test sessions), the
nodes' systemd-nspawn forked PID 1 later than the 15 s the lab once waited, and `lab up` failed
with "did not boot (no init process)" while the boot went on fine.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkctl_lab import machines, state


def test_wait_booted_gives_pid_1_more_than_a_loaded_machine_took(monkeypatch: pytest.MonkeyPatch) -> None:
    waited: list[float] = []

    def wait_until(predicate: Any, timeout: float, interval: float = 0.1) -> bool:
        waited.append(timeout)
        return False  # never came: the error names the machine

    monkeypatch.setattr(machines.host, "wait_until", wait_until)
    st = state.LabState(version=1, rootfs="/nonexistent", inventory_dir="/nonexistent", machines={})
    with pytest.raises(machines.SparkctlError, match="spark-1 did not boot"):
        machines.wait_booted("spark-1", st)
    assert waited == [machines.START_TIMEOUT_S] and machines.START_TIMEOUT_S >= 60


def test_the_waits_return_as_soon_as_the_machine_is_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll, not a sleep: host.wait_until returns at the first true answer."""
    calls = iter([False, False, True])
    assert machines.host.wait_until(lambda: next(calls), machines.START_TIMEOUT_S, interval=0.01)


def test_lab_down_kills_what_is_left_in_its_cgroups_and_retries_their_removal(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """`lab down` once failed with "left things behind: cgroup …" on a loaded machine: a killed
    node's last process had not exited yet when its cgroup was removed, once."""
    from sparkctl_lab import control

    top = tmp_path / "sparkctl-lab2"
    (top / "spark-1").mkdir(parents=True)
    (top / "spark-1" / "cgroup.procs").write_text("4242\n")
    killed: list[int] = []
    tries = {"n": 0}

    def remove(tree: Any) -> None:
        tries["n"] += 1
        if tries["n"] >= 2 and killed:  # the process is gone the second time round
            for p in sorted(tree.rglob("*"), reverse=True):
                p.unlink() if p.is_file() else p.rmdir()
            tree.rmdir()

    monkeypatch.setattr(control.host, "cgroup_dirs", lambda name: [top] if top.exists() else [])
    monkeypatch.setattr(control.host, "kill", lambda pid, sig: killed.append(pid))
    monkeypatch.setattr(control.host, "remove_cgroup_tree", remove)
    assert control.host.wait_until(control._cgroups_removed, control.CGROUP_REMOVE_S, 0.01)
    assert killed and set(killed) == {4242} and tries["n"] == 2 and not top.exists()
