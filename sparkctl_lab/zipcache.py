"""Runs on the lab's nodes, not on the controller: a bytecode cache for modules imported from zips.

Every Ansible task runs its module as a zip of Python sources (AnsiballZ). Python compiles the
sources of a zip import on every run and never caches them, so each task spent about 0.2 s of CPU
compiling the same ``ansible.module_utils`` again — on the lab the four nodes and the controller
share the controller's cores, and that compile was two thirds of a provision's CPU. A real Spark
has twenty cores of its own; this file exists only on lab nodes (written by ``machines.py`` into
each machine's overlay with a ``.pth`` line that calls ``install()`` when Python starts).

The cache is keyed by the interpreter's bytecode magic and the SHA-256 of the source, so a changed
source compiles afresh; the file name recorded in the code is the importing zip's, as without the
cache. Anything unexpected (unwritable directory, corrupt entry) falls back to a plain compile.
"""

from __future__ import annotations

# This file loads with every Python process on a node: it imports only small modules at start-up
# (``typing`` alone would cost each process more than 10 ms).
import os
import zipimport
from types import CodeType

CACHE_DIR = os.environ.get("SPARKCTL_LAB_ZIPCACHE_DIR", "/var/cache/sparkctl-lab-zipcache")
_compile = getattr(zipimport, "_compile_source", None)


def _with_filename(code: CodeType, filename: str) -> CodeType:
    consts = tuple(_with_filename(c, filename) if isinstance(c, CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _entry(source: bytes, cache_dir: str) -> str:
    import hashlib
    import importlib.util

    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER + bytes(source)).hexdigest()
    return os.path.join(cache_dir, digest)


def compile_source(pathname: str, source: bytes, cache_dir: str | None = None) -> CodeType:
    """``zipimport._compile_source`` with a cache: load the code of this exact source if a run
    before compiled it, else compile it and keep it for the next run."""
    assert _compile is not None
    directory = cache_dir or CACHE_DIR
    try:
        entry = _entry(source, directory)
    except Exception:  # the cache must never break an import
        return _compile(pathname, source)
    import marshal

    try:
        with open(entry, "rb") as f:
            code = marshal.load(f)
        if isinstance(code, CodeType):
            return _with_filename(code, pathname)
    except Exception:  # missing or unreadable: compile below
        pass
    code = _compile(pathname, source)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        tmp = f"{entry}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            marshal.dump(code, f)
        os.replace(tmp, entry)
    except Exception:  # a read-only or full disk just means no cache
        pass
    return code


def install() -> None:
    """Route zip imports' compiles through the cache (the node's ``.pth`` line calls this)."""
    if _compile is not None:
        zipimport._compile_source = compile_source  # type: ignore[attr-defined]
