"""What sparkctl ships beside its code, found the same way in a clone and in an installed wheel.

A clone keeps ``inventory/example/``, ``playbooks/``, ``roles/``, ``collections/`` and
``ansible.cfg`` at the top of the repository; a wheel carries a copy of the same tree as package
data, ``sparkctl/_content/`` (``setup.py`` copies it at build time, symlinks dereferenced, with the
pinned Ansible collections of ``collections/requirements.yml`` installed under
``collections/ansible_collections/``). Which of the two is used is decided in one place,
:func:`sparkctl.ansible.content.root`; every function here is a path under that root.

Callers that need the documented four-Spark site (``sparkctl init --example``, an error's hint)
take :func:`example_dir`; nothing outside this module spells the layout of the shipped tree.
"""

from __future__ import annotations

from pathlib import Path

from sparkctl.ansible import content
from sparkctl.errors import SparkctlError

# Paths under the content root (the repository's top level, or sparkctl/_content/ in a wheel).
EXAMPLE = Path("inventory") / "example"
PLAYBOOKS = Path("playbooks")
ROLES = Path("roles")
COLLECTIONS = Path("collections")
ANSIBLE_CFG = Path("ansible.cfg")
# Where the pinned collections are installed inside a collections path (Ansible's own layout).
INSTALLED_COLLECTIONS = "ansible_collections"


def root() -> Path:
    """The directory every other path here is under (``content.root``: package data, else the clone)."""
    return content.root()


def _shipped(rel: Path, what: str) -> Path:
    path = root() / rel
    if not path.exists():
        raise SparkctlError(
            f"{what} is missing from this installation: {path} does not exist",
            hint="reinstall sparkctl from a wheel built by `make wheel-check` (or use a clone)",
            exit_code=2,
        )
    return path


def example_dir() -> Path:
    """The documented example site (``hosts.yml``, ``group_vars/all/sparkctl.yml``)."""
    return _shipped(EXAMPLE, "the example inventory (inventory/example)")


def playbooks_dir() -> Path:
    """One playbook per verb (``provision.yml``, ``stage.yml``, …)."""
    return _shipped(PLAYBOOKS, "the playbooks")


def playbook(name: str) -> Path:
    """The absolute path of one playbook (``name`` as a plan gives it: ``provision.yml``)."""
    path = playbooks_dir() / name
    if not path.is_file():
        raise SparkctlError(f"playbook not found: {path}", exit_code=2)
    return path


def roles_dir() -> Path:
    """The ``spark_*`` roles the playbooks use."""
    return _shipped(ROLES, "the roles")


def collections_dir() -> Path:
    """The shipped collections path: ``requirements.yml`` and, in a wheel (or a clone after
    ``make``), the pinned collections under ``ansible_collections/``."""
    return _shipped(COLLECTIONS, "the collections directory")


def ansible_cfg() -> Path:
    """The ``ansible.cfg`` shared by sparkctl's own runs and manual ``ansible-playbook`` runs."""
    return _shipped(ANSIBLE_CFG, "ansible.cfg")
