"""The publishers' probe definitions, read from data (``sparkctl/qa/probes/r4.json``), never re-typed.

The file holds R4's vision prompts and expected answers, its long-context template pieces, sizes and
published cases, each with the repository, commit, path and (where published) SHA-256 of the file it
was extracted from (``scripts/r4_probes.py`` extracts and checks them). The rank simulator reads the
same file (it may not import this package) to recognise the probes.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

PATH = Path(__file__).parent / "probes" / "r4.json"


@functools.cache
def r4() -> dict[str, Any]:
    """The parsed probe file (read once)."""
    data: dict[str, Any] = json.loads(PATH.read_text())
    return data


def digest() -> str:
    """SHA-256 of the probe file, recorded in qualify's evidence."""
    return hashlib.sha256(PATH.read_bytes()).hexdigest()


def source(name: str) -> dict[str, Any]:
    """Where one quoted value comes from (``{"repo", "commit", "path"[, "sha256"]}``)."""
    sources: dict[str, Any] = r4()["sources"]
    return dict(sources[name])
