"""Build hook: the wheel carries the Ansible content as package data, ``sparkctl/_content/``.

``playbooks/``, ``roles/``, ``plugins/``, ``collections/`` and ``ansible.cfg`` stay at the top of
the repository (a manual ``ansible-playbook -i inventory/<site> playbooks/<verb>.yml`` runs from
there); ``build_py`` copies them into the built package, dereferencing symlinks (role
``module_utils`` link to code under ``sparkctl/``), so an installed sparkctl finds them through
``importlib.resources`` (``sparkctl.ansible.content``). Editable installs copy nothing: they use
the repository itself. Everything else is declared in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
CONTENT = ("ansible.cfg", "playbooks", "roles", "plugins", "collections")
# Never shipped: installed collections, caches and bytecode.
IGNORE = shutil.ignore_patterns("ansible_collections", "__pycache__", "*.pyc", ".cache")


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


setup(cmdclass={"build_py": build_py_with_content})
