"""The Makefile's router-wheels step: SGLang's gateway wheel downloaded once into a cache directory
for the lab's router tests, kept there, and never a failure of `make integration` when pip cannot
fetch it (the router tests then skip with their reason); `integration` hands the directory to the
lab tests as SPARKCTL_ROUTER_WHEELS."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WHEEL = "smg-1.13.0-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _fake_bin(tmp_path: Path, downloads: bool) -> Path:
    """A BIN whose pip records each call and either writes the wheel into -d DIR or fails."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    body = 'while [ $# -gt 0 ]; do [ "$1" = -d ] && dir=$2; shift; done\n'
    body += f'touch "$dir/{WHEEL}"\n' if downloads else 'echo "ERROR: no route" >&2; exit 1\n'
    pip = bin_dir / "pip"
    pip.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/pip-calls\n{body}')
    pip.chmod(0o755)
    return bin_dir


def _make(tmp_path: Path, bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "SPARKCTL_"))}
    return subprocess.run(["make", "--no-print-directory", "-o", "venv", f"BIN={bin_dir}",
                           f"ROUTER_WHEELS={tmp_path / 'wheels'}", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=env)


def test_the_wheel_is_downloaded_once_then_kept(tmp_path: Path) -> None:
    first = _make(tmp_path, _fake_bin(tmp_path, downloads=True), "router-wheels")
    assert first.returncode == 0, first.stdout + first.stderr
    assert (tmp_path / "wheels" / WHEEL).is_file()
    assert not (tmp_path / "wheels.part").exists()
    calls = (tmp_path / "pip-calls").read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith("download ") and "--no-deps" in calls[0]
    assert "smg==1.13.0" in calls[0] and "--only-binary=:all:" in calls[0]
    again = _make(tmp_path, tmp_path / "bin", "router-wheels")
    assert again.returncode == 0, again.stdout + again.stderr
    assert len((tmp_path / "pip-calls").read_text().splitlines()) == 1  # present: pip not asked again


def test_a_failed_download_fails_nothing_and_leaves_no_directory(tmp_path: Path) -> None:
    res = _make(tmp_path, _fake_bin(tmp_path, downloads=False), "router-wheels")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "not downloaded: the router lab tests will skip" in res.stdout
    assert not (tmp_path / "wheels").exists() and not (tmp_path / "wheels.part").exists()


def test_integration_hands_the_directory_to_the_lab_tests(tmp_path: Path) -> None:
    res = _make(tmp_path, tmp_path, "-n", "-o", "apt", "-o", "router-wheels", "integration")
    assert res.returncode == 0, res.stdout + res.stderr
    line = next(ln for ln in res.stdout.splitlines() if "SPARKCTL_ROUTER_WHEELS" in ln)
    assert f"SPARKCTL_ROUTER_WHEELS=${{SPARKCTL_ROUTER_WHEELS:-{tmp_path / 'wheels'}}}" in line
    assert "-m integration tests/integration" in res.stdout
