"""The built wheel carries what an installed sparkctl needs beside its code, under
``sparkctl/_content/``: the example site (``sparkctl init --example``), every playbook, every role
file (symlinks as real files), ``ansible.cfg``, and the pinned collections of
``collections/requirements.yml`` at their pinned versions (so the first run downloads nothing).

The wheel is built once for the module, from a clean copy of the working tree as
``scripts/wheel_check.sh`` builds it (tracked and untracked-but-not-ignored files; the collections
from this tree's ``collections/``, where ``make`` installs them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SHIPPED = "sparkctl/_content/"


def _tree_files(*paths: str) -> list[str]:
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard",
                          "--", *paths], capture_output=True, text=True, check=True).stdout.split()
    return sorted(p for p in out if "__pycache__" not in p and not p.endswith(".pyc")
                  and (REPO / p).exists())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for rel in _tree_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel, follow_symlinks=False)
    env = {**os.environ, "SPARKCTL_COLLECTIONS_PATH": str(REPO / "collections"),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"),
                           str(src)], capture_output=True, text=True, env=env, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (built,) = (tmp / "dist").glob("sparkctl_dgx-*.whl")
    return zipfile.ZipFile(built)


def test_the_example_site_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    example = _tree_files("inventory/example")
    assert "inventory/example/hosts.yml" in example
    assert [p for p in example if SHIPPED + p not in names] == []
    assert "sparkctl/resources.py" in names


def test_every_playbook_role_file_and_the_config_are_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    wanted = _tree_files("playbooks", "roles", "plugins", "ansible.cfg", "collections/requirements.yml")
    assert any(p.startswith("roles/") and p.endswith("/tasks/main.yml") for p in wanted)
    # A symlinked directory (a role's module_utils reaching code under sparkctl/) ships as its files.
    missing = [p for p in wanted if SHIPPED + p not in names
               and not ((REPO / p).is_dir() and any(n.startswith(SHIPPED + p + "/") for n in names))]
    assert missing == []


def test_the_pinned_collections_are_in_the_wheel_at_their_versions(wheel: zipfile.ZipFile) -> None:
    pinned = yaml.safe_load((REPO / "collections" / "requirements.yml").read_text())["collections"]
    assert pinned
    names = set(wheel.namelist())
    for item in pinned:
        ns, coll = item["name"].split(".")
        base = f"{SHIPPED}collections/ansible_collections/{ns}/{coll}/"
        manifest = json.loads(wheel.read(base + "MANIFEST.json"))
        assert manifest["collection_info"]["version"] == str(item["version"]), item["name"]
        assert any(n.startswith(base + "plugins/") for n in names), f"{item['name']}: no plugins shipped"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
