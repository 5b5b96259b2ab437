"""`sparkctl upgrade` on the lab, over real SSH.

upgrade: a tiny .deb built here (dpkg-deb) is the pinned update, installed one node at a time; an
identity field changed on spark-2 before the run reaches it (its OS name) stops the run at spark-2
with spark-3 untouched and the group down; with spark-2 put back, a second run resumes, changes
nothing on the nodes already done, and ends with stage verification and the gated up (ready).
(`reset` is tested under a running supervisor: tests/integration/test_watch_lifecycle.py.)

The lab inventory gets its sparkctl_upgrade section in a copy (the lab's own stays as `lab up`
wrote it); the lab does not reboot nodes from inside (`reboot: false`, a choice of the inventory).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from conftest import Lab  # tests/integration/conftest.py: the session fixture's handle

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PKG = "sparkctl-lab-fw"
NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]


def _deb(where: Path, version: str) -> Path:
    root = where / f"{PKG}_{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {PKG}\nVersion: {version}\nArchitecture: all\nMaintainer: sparkctl lab <lab@localhost>\n"
        "Description: stand-in firmware bundle for the lab's rolling upgrade\n")
    (root / "usr" / "share" / PKG).mkdir(parents=True)
    (root / "usr" / "share" / PKG / "VERSION").write_text(version + "\n")
    out = where / f"{PKG}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)], check=True,
                   capture_output=True)
    return out


def _sparkctl(lab: Lab, inv: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """sparkctl against the copy of the lab inventory (run_sparkctl's environment and working dir)."""
    return subprocess.run([sys.executable, "-m", "sparkctl", "-i", str(inv), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=dict(os.environ))


def _said(proc: subprocess.CompletedProcess[str]) -> str:
    """What a failed sparkctl said, its start (what failed, where) and its end (what to do)."""
    text = proc.stderr or proc.stdout
    return text if len(text) <= 4000 else f"{text[:2000]}\n[…]\n{text[-2000:]}"


def _first_json(text: str) -> dict[str, Any]:
    doc, _ = json.JSONDecoder().raw_decode(text.lstrip())
    return doc


def _installed(lab: Lab, node: str) -> str | None:
    proc = lab.ssh(node, f"dpkg-query -W -f='${{Version}}' {PKG} 2>/dev/null", check=False)
    return proc.stdout.strip() or None


def _events(artifact_dir: str, task: str) -> list[tuple[int, str]]:
    """(counter, host) of the ok/changed events of one task, from the run's job events."""
    out = []
    for f in Path(artifact_dir, "job_events").glob("*.json"):
        ev = json.loads(f.read_text())
        data = ev.get("event_data") or {}
        if ev.get("event") in ("runner_on_ok",) and data.get("task") == task:
            out.append((ev["counter"], data["host"]))
    return sorted(out)


@pytest.fixture(scope="module")
def upgrade_inventory(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A copy of the lab inventory pinning the stand-in .deb at 1.1 (no reboot in the lab)."""
    work = tmp_path_factory.mktemp("lifecycle")
    deb = _deb(work, "1.1")
    inv = work / "inventory"
    shutil.copytree(lab.inventory, inv)
    gv = inv / "group_vars" / "all" / "sparkctl.yml"
    doc = yaml.safe_load(gv.read_text())
    doc["sparkctl_upgrade"] = {"debs": [str(deb)], "update_cache": False, "reboot": False,
                               "reboot_timeout_s": 120}
    gv.write_text(yaml.safe_dump(doc, sort_keys=False))
    yield inv, deb


@pytest.fixture(scope="module")
def served(lab: Lab) -> None:
    """Provisioned and staged (kit, image, weights, engram): what the gated up at the end needs."""
    proc = lab.run_sparkctl("provision", timeout=1800)
    assert proc.returncode == 0, f"sparkctl provision: {_said(proc)}"
    lab.ensure_staged()


def _os_release_differs(lab: Lab, node: str) -> None:
    lab.ssh(node, "cp --remove-destination \"$(readlink -f /etc/os-release)\" /etc/os-release && "
                  "sed -i 's/^PRETTY_NAME=\"/PRETTY_NAME=\"held back /' /etc/os-release")


def _os_release_back(lab: Lab, node: str) -> None:
    lab.ssh(node, "rm -f /etc/os-release && ln -s ../usr/lib/os-release /etc/os-release")


def test_upgrade_walks_the_nodes_one_at_a_time_and_stops_at_an_identity_mismatch(
        lab: Lab, served: None, upgrade_inventory: tuple[Path, Path]) -> None:
    inv, _deb_file = upgrade_inventory
    for node in NODES:  # a clean start: the stand-in package on no node
        lab.ssh(node, f"dpkg --purge {PKG} >/dev/null 2>&1 || true")

    # Check mode: says what every node would get, installs nothing, stops nothing.
    check = _sparkctl(lab, inv, "--json", "upgrade", "--check")
    assert check.returncode == 0, _said(check)
    assert _first_json(check.stdout)["check"] is True
    assert [_installed(lab, n) for n in NODES] == [None] * 4

    _os_release_differs(lab, "spark-2")
    try:
        run = _sparkctl(lab, inv, "--json", "upgrade", "--yes")
        assert run.returncode == 1, _said(run)
        doc = _first_json(run.stdout)
        assert doc["failed_node"] == "spark-2", doc
        assert doc["untouched"] == ["spark-3"]
        assert sorted(doc["nodes"]) == ["spark-0", "spark-1"]
        assert "spark-2 came back with a different identity: os is" in json.dumps(doc["run"]["failures"])
        assert [_installed(lab, n) for n in NODES] == ["1.1", "1.1", "1.1", None]  # spark-3 untouched
        # One node at a time: each node's install comes after the previous node passed its fabric check.
        installs = _events(doc["run"]["artifact_dir"], "Install the .deb files")
        fabric = _events(doc["run"]["artifact_dir"], "Require the fabric of this node to pass")
        assert [h for _, h in installs] == ["spark-0", "spark-1", "spark-2"]
        assert [h for _, h in fabric] == ["spark-0", "spark-1"]
        assert installs[0][0] < fabric[0][0] < installs[1][0] < fabric[1][0] < installs[2][0]
        # The group stays down.
        status = lab.run_sparkctl("status", json_out=True)
        assert status.returncode == 3
    finally:
        _os_release_back(lab, "spark-2")

    # Put right, a second run resumes: nothing moves on the nodes already done, spark-3 gets the
    # update, every node agrees, the staged files verify and the gated up serves.
    again = _sparkctl(lab, inv, "--json", "upgrade", "--yes")
    assert again.returncode == 0, _said(again)
    doc = _first_json(again.stdout)
    assert doc["nodes"]["spark-0"]["installed"] == [] and doc["nodes"]["spark-3"]["installed"] == [PKG]
    assert doc["mismatched"] == []
    assert [_installed(lab, n) for n in NODES] == ["1.1"] * 4
    assert lab.run_sparkctl("status", json_out=True).returncode == 0
