"""Secrets out of text that leaves a node (logs, bundles, messages); the rules live in
``sparkctl.model.redaction`` (shared with the run records and results)."""

from __future__ import annotations

from collections.abc import Iterable

from sparkctl.model.redaction import redact_text


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret value (and any bearer token) in ``text``."""
    return redact_text(text, secrets)
