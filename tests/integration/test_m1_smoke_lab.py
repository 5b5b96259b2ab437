"""m1-1m's boot smoke, warm-up and garbage-output guard (gates.smoke) in `up` on the lab: the lab
profile with m1-1m's smoke as an override, against four simulated ranks. A clean boot is ready; a
simulator that answers garbage when 3 or more requests are batched fails `up` at the smoke gate.

Needs the lab (tests/integration/conftest.py); the module provisions it and stages the shards once.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from sparkctl.profiles import load_profile

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _ok(proc: Any, what: str) -> None:
    assert proc.returncode == 0, (
        f"{what} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )


def _up_with_m1_smoke(lab: Lab, tmp_path: Path, faults: list[str]) -> subprocess.CompletedProcess[str]:
    _ok(lab.run_sparkctl("down"), "down")
    smoke = load_profile("m1-1m").gates.smoke
    assert smoke is not None
    site = tmp_path / "lab-m1-smoke"
    shutil.copytree(lab.inventory, site)
    group_vars = site / "group_vars" / "all" / "sparkctl.yml"
    doc = yaml.safe_load(group_vars.read_text())
    doc["sparkctl_profile_overrides"] = {"gates": {"smoke": smoke.model_dump()},
                                         "simulator": {"faults": faults}}
    group_vars.write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run([sys.executable, "-m", "sparkctl", "-i", str(site), "up"],
                          capture_output=True, text=True, timeout=900, cwd=REPO)


def test_up_runs_m1s_smoke_and_is_ready(served: Lab, tmp_path: Path) -> None:
    up = _up_with_m1_smoke(served, tmp_path, [])
    _ok(up, "up with m1-1m's smoke")


def test_garbage_from_a_batch_fails_up_at_the_smoke(served: Lab, tmp_path: Path) -> None:
    up = _up_with_m1_smoke(served, tmp_path, ["garbage-at-batch"])
    assert up.returncode != 0, up.stdout + up.stderr
    out = up.stdout + up.stderr
    assert "boot smoke and warm-up" in out and "did not answer Latin prose" in out, out[-3000:]
