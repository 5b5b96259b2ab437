"""The rank unit's start frees the container name first, however long the engine takes with it."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from sparkctl.model import load_inventory
from sparkctl.render import common as c
from sparkctl.render import rank

FAKE_DOCKER = """#!/bin/sh
# A container engine that keeps the name taken for the first TAKEN `inspect` calls (a removal or a
# create still in progress), and refuses the first `rm` (removal already in progress).
state={state}
n=$(cat "$state/inspect" 2>/dev/null || echo 0)
case "$1 $2" in
  "container inspect")
    echo $((n + 1)) > "$state/inspect"
    echo "inspect" >> "$state/calls"
    if [ "$n" -lt {taken} ]; then echo exited; exit 0; fi
    echo "Error: No such container: $3" >&2; exit 1 ;;
  "rm --force")
    echo "rm" >> "$state/calls"
    r=$(grep -c rm "$state/calls")
    if [ "$r" -eq 1 ]; then
      echo "Error response from daemon: removal of container $3 is already in progress" >&2; exit 1
    fi
    echo "$3"; exit 0 ;;
esac
exit 2
"""


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: int,
         tries: int) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    state = tmp_path / "state"
    state.mkdir()
    fake = tmp_path / "docker"
    fake.write_text(FAKE_DOCKER.format(state=state, taken=taken))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(c, "DOCKER", str(fake))
    # `sleep` noted among the engine's calls (and returning at once): where the script waits
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sleep").write_text(f'#!/bin/sh\necho "sleep" >> {state}/calls\n')
    (bin_dir / "sleep").chmod(0o755)
    script = rank.free_name_script("sparkctl-lab-r3", tries=tries)
    proc = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"})
    calls = (state / "calls").read_text().split() if (state / "calls").exists() else []
    return proc, calls


def test_a_name_still_taken_after_a_refused_removal_is_freed_before_the_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc, calls = _run(tmp_path, monkeypatch, taken=3, tries=10)
    assert proc.returncode == 0, proc.stderr
    # removed until the engine no longer knows the name (a single `rm --force`, refused, was not
    # enough), a second apart while it still does
    assert calls == ["inspect", "rm", "inspect", "sleep", "rm", "inspect", "sleep", "rm", "inspect"]
    assert "removed the earlier container sparkctl-lab-r3" in proc.stdout


def test_a_container_removed_at_once_costs_the_start_no_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual case, an exited container from the last run: one removal, the name free at the
    next check, no second waited (each `up` used to wait 1 s per rank wave here)."""
    proc, calls = _run(tmp_path, monkeypatch, taken=1, tries=10)
    assert proc.returncode == 0, proc.stderr
    assert calls == ["inspect", "rm", "inspect"]
    (tmp_path / "free").mkdir()
    proc, calls = _run(tmp_path / "free", monkeypatch, taken=0, tries=10)  # no container left at all
    assert proc.returncode == 0 and calls == ["inspect"]


def test_a_name_that_never_frees_fails_the_start_naming_the_container(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc, calls = _run(tmp_path, monkeypatch, taken=1000, tries=3)
    assert proc.returncode == 1
    assert calls.count("rm") == 3
    assert "container sparkctl-lab-r3 still exists after 3 removals: exited" in proc.stderr


def test_the_rank_unit_runs_the_check_before_docker_run() -> None:
    cluster = load_inventory(Path(__file__).resolve().parents[2] / "inventory" / "example")
    unit = rank.rank_unit(cluster, cluster.nodes[1])
    pre = next(line for line in unit.splitlines() if line.startswith("ExecStartPre="))
    assert pre.startswith('ExecStartPre=/bin/sh -c "i=0; while /usr/bin/docker container inspect '
                          'sparkctl-example-r1')
    assert "$$((i + 1))" in pre  # systemd passes one $ to the shell
    assert unit.index("ExecStartPre=") < unit.index("ExecStart=/usr/bin/docker run")
