"""What a placeholder is: a value written to show the shape of a real one, never to be used.

An example inventory, a copied template or a half-finished site carries values that pass every type
check — a 40-hex "commit" that is ``0123456789abcdef…``, an image ID of 64 zeros, ``<64 hex>``,
``changeme`` — and fail one command later, far from the line that holds them (a checkpoint
revision the Hub does not know, after minutes of setup). ``why`` says whether a value is one;
``FIELDS`` lists the inventory fields `sparkctl validate` refuses them in. One definition, here.
"""

from __future__ import annotations

import re

# Inventory fields (site keys, dotted) that must hold a real value. A digest or commit pins what
# runs; a placeholder there pins nothing that exists.
FIELDS: tuple[str, ...] = (
    "sparkctl_checkpoint.revision",
    "sparkctl_kit.commit",
    "sparkctl_kit.sha256",
    "sparkctl_runtime.image",      # its @sha256: digest
    "sparkctl_runtime.image_id",
)

_HEX = "0123456789abcdef"
_WORDS = re.compile(r"^(changeme|change-me|placeholder|todo|tbd|fixme|example|secret|password|"
                    r"your[-_ ].*|x{3,}|\*{3,}|\.{3,})$", re.I)
_MARKED = re.compile(r"<[^<>]*>|\{\{\s*\}\}|REPLACE[_ ]?ME", re.I)
_MIN_RUN = 8  # a shorter run of one hex digit can be a real value


def _hex_pattern(text: str) -> bool:
    """One digit repeated, or the hex alphabet counted up (or down) and repeated."""
    if len(text) < _MIN_RUN or any(c not in _HEX for c in text):
        return False
    if len(set(text)) == 1:
        return True
    for alphabet in (_HEX, _HEX[::-1]):
        start = alphabet.index(text[0])
        if all(c == alphabet[(start + i) % 16] for i, c in enumerate(text)):
            return True
    return False


def why(value: object) -> str | None:
    """Why ``value`` is a placeholder (a few words), or None when it may be real."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if _MARKED.search(text):
        return "a marked placeholder"
    if _WORDS.match(text):
        return "a placeholder word"
    digest = text.rsplit("@sha256:", 1)[-1] if "@sha256:" in text else text.removeprefix("sha256:")
    if _hex_pattern(digest.lower()):
        return "a made-up hex pattern, not a real commit or digest"
    return None
