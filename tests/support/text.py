"""Rich output read as plain text."""

from __future__ import annotations

# What rich draws around and inside a panel or a table.
_BOX = str.maketrans(dict.fromkeys("│┃╭╮╰╯─━┼┬┴├┤", " "))


def flat(text: str) -> str:
    """``text`` on one line: box drawing dropped, wrapped lines joined at their spaces, so a message
    rich wrapped inside a panel reads as the one line the product wrote."""
    return " ".join(text.translate(_BOX).split())
