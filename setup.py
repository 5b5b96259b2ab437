"""Build hook: the wheel carries the Ansible content and the example site as package data,
``sparkctl/_content/``.

``playbooks/``, ``roles/``, ``plugins/``, ``collections/``, ``ansible.cfg`` and
``inventory/example/`` stay at the top of the repository (a manual
``ansible-playbook -i inventory/<site> playbooks/<verb>.yml`` runs from there); ``build_py`` copies
them into the built package under the same relative paths, dereferencing symlinks (role
``module_utils`` link to code under ``sparkctl/``), so an installed sparkctl finds them through
``importlib.resources`` (``sparkctl.ansible.content``, ``sparkctl.resources``). Editable installs
copy nothing: they use the repository itself. Everything else is declared in pyproject.toml.

The pinned collections of ``collections/requirements.yml`` go into the wheel too
(``_content/collections/ansible_collections/``), so an installed sparkctl downloads nothing on its
first run. They are taken, already installed, from the first collections path that holds every
one at its pinned version: ``$SPARKCTL_COLLECTIONS_PATH`` (colon-separated), else this tree's
``collections/`` (where ``make`` installs them with ``collections/install.py``, and which an sdist
carries). The build stops, saying what to run, when none does: a wheel without them would fetch
them on first use.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
CONTENT = ("ansible.cfg", "playbooks", "roles", "plugins", "collections", "inventory/example")
COLLECTIONS_ENV = "SPARKCTL_COLLECTIONS_PATH"
INSTALLED = "ansible_collections"
# Never shipped: installed collections, caches and bytecode.
IGNORE = shutil.ignore_patterns("ansible_collections", "__pycache__", "*.pyc", ".cache")
IGNORE_BUILT = shutil.ignore_patterns("__pycache__", "*.pyc")


def pinned_collections(requirements: Path) -> dict[str, str]:
    """``{name: version}`` of requirements.yml (the build has no YAML parser: the file is a list of
    ``- name:`` / ``version:`` pairs, and the wheel test checks the result against PyYAML's)."""
    pinned: dict[str, str] = {}
    name = None
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        found = re.match(r"^(?:-\s*)?(name|version):\s*[\"']?([^\"'\s]+)[\"']?$", line)
        if not found:
            continue
        key, value = found.groups()
        if key == "name":
            name = value
        elif name is not None:
            pinned[name] = value
            name = None
    if not pinned:
        raise SystemExit(f"setup.py: {requirements} pins no collection")
    return pinned


def installed_version(path: Path, name: str) -> str | None:
    ns, coll = name.split(".", 1)
    try:
        doc = json.loads((path / INSTALLED / ns / coll / "MANIFEST.json").read_text())
        return str(doc["collection_info"]["version"])
    except (OSError, ValueError, KeyError):
        return None


def collections_source(pinned: dict[str, str]) -> Path:
    """The first collections path holding every pinned collection at its pinned version."""
    given = [Path(p) for p in os.environ.get(COLLECTIONS_ENV, "").split(os.pathsep) if p]
    candidates = [*given, HERE / "collections"]
    for cand in candidates:
        if all(installed_version(cand, n) == v for n, v in pinned.items()):
            return cand
    names = ", ".join(f"{n} {v}" for n, v in pinned.items())
    raise SystemExit(
        f"setup.py: the pinned collections ({names}) are not installed in {', '.join(map(str, candidates))}; "
        f"run `python3 collections/install.py` (what `make` runs) or point {COLLECTIONS_ENV} at a "
        "collections path holding them"
    )


def vendor_collections(dest: Path) -> None:
    """Copy the pinned collections into ``dest/ansible_collections/`` (nothing else found there)."""
    pinned = pinned_collections(HERE / "collections" / "requirements.yml")
    source = collections_source(pinned)
    for name in pinned:
        ns, coll = name.split(".", 1)
        shutil.copytree(source / INSTALLED / ns / coll, dest / INSTALLED / ns / coll,
                        symlinks=False, ignore=IGNORE_BUILT)


class build_py_with_content(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "sparkctl" / "_content"
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for name in CONTENT:
            src = HERE / name
            if not src.exists():
                raise SystemExit(f"setup.py: {name} is missing from {HERE}; the wheel would ship no {name}")
            if src.is_dir():
                shutil.copytree(src, dest / name, symlinks=False, ignore=IGNORE)
            else:
                shutil.copy2(src, dest / name)
        vendor_collections(dest / "collections")


setup(cmdclass={"build_py": build_py_with_content})
