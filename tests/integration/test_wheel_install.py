"""The built wheel, installed into a fresh venv outside the repository, works on the lab.

`scripts/wheel_check.sh --lab` builds the wheel from a clean copy of the tree, installs it with
constraints.txt into a venv of which only `sparkctl` is on PATH, and from a temp directory runs
`sparkctl --help`, `init --example`, `validate` and `plan --json`, `status --format prometheus`
against unreachable nodes, `ansible-command provision` and a `--syntax-check` of its line, then
`sparkctl -i <lab> provision --check`: the playbooks, roles, vars plugin, collections and
ansible.cfg all come from the installed package (nothing downloaded), and the run record lands in
the state directory the script gives it, not in the repository, holding the runnable line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_the_installed_wheel_provisions_the_lab_in_check_mode(lab, tmp_path: Path) -> None:
    before = sorted(p.name for p in REPO.iterdir())
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "wheel_check.sh"), "--lab", str(lab.inventory)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
        # The default TMPDIR: SSH control sockets of the run must fit in a short path.
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(Path.home()), "PY": sys.executable},
    )
    sys.stderr.write(proc.stdout[-3000:])
    assert proc.returncode == 0, (
        f"wheel check failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-3000:]}"
    )
    assert "provision --check" in proc.stdout and "wheel check passed" in proc.stdout
    assert "ansible-command provision" in proc.stdout and "init --example" in proc.stdout
    # The installed tool wrote nothing into the checkout (no .sparkctl/, no build droppings).
    assert sorted(p.name for p in REPO.iterdir()) == before
