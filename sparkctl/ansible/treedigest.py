"""One digest of a tree of files on the controller (standard library only).

What decides whether provisioning has anything to do is digested with it on both sides: the
``sparkctl_applied`` action plugin digests each role's input trees (``roles/spark_applied``), and
``sparkctl.serve.provfast`` the controller's content, inventory and package before it repeats that
decision without Ansible. The plugin imports this module as the roles' lookups import theirs.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

# Caches no role or package ships: left out wherever they are.
SKIP_PARTS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


def tree_digest(path: Path, skip: frozenset[str] = frozenset()) -> str:
    """sha256 over the relative names and contents of every file under ``path`` (symlinks followed;
    caches, compiled files and directories named in ``skip`` left out); a file's own content;
    ``absent``."""
    h = hashlib.sha256()
    if path.is_file():
        h.update(path.read_bytes())
        return h.hexdigest()
    if not path.is_dir():
        return "absent"
    for root, dirs, files in os.walk(path, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_PARTS and d not in skip)
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            full = Path(root, name)
            h.update(str(full.relative_to(path)).encode() + b"\0")
            try:
                h.update(full.read_bytes() + b"\0")
            except OSError:
                h.update(b"unreadable\0")
    return h.hexdigest()


__all__ = ["SKIP_PARTS", "tree_digest"]
