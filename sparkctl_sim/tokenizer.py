"""The simulator's tokenizer: deterministic, documented, and cheap.

A token is a run of up to six word characters (letters, digits, underscore, any script) or a single
other non-space character. Whitespace belongs to the token after it and is never a token on its own.
So ``" the" * n`` is ``n`` tokens, ``"12345678"`` is two, and ``"f(x)"`` is four.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\w{1,6}|[^\w\s]")
_PIECE = re.compile(r"\s*(?:\w{1,6}|[^\w\s])|\s+$")


def count(text: str) -> int:
    """Number of tokens in ``text``."""
    return sum(1 for _ in _TOKEN.finditer(text))


def pieces(text: str) -> list[str]:
    """``text`` cut into token pieces (leading whitespace attached); ``"".join(pieces(t)) == t``."""
    out = _PIECE.findall(text)
    if out and not out[-1].strip():
        # trailing whitespace rides on the last real token
        tail = out.pop()
        if out:
            out[-1] += tail
        else:
            out.append(tail)
    return out
