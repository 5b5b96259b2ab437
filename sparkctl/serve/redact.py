"""Secrets out of text that leaves a node (logs, bundles, messages)."""

from __future__ import annotations

import re
from collections.abc import Iterable


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret value (and nothing else) in ``text``."""
    for s in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(s, "<redacted>")
    return re.sub(r"(?i)(authorization:\s*bearer\s+)\S+", r"\1<redacted>", text)
