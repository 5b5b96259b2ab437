"""The published probes the simulator recognises, read from sparkctl's probe file (never imported).

``sparkctl/qa/probes/r4.json`` sits beside this package in the source tree and in the wheel, and the
lab's engine image copies it to the same place, so one rule finds it: ``<site>/sparkctl/qa/probes``.
From it the simulator learns which drawn PNG (by SHA-256) carries which printed code. It reads the
shapes itself from the pixels; the code is what it cannot read from pixels, so the digest stands in
for reading the print. Without the file it recognises nothing and reads shapes only.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

PATH = Path(__file__).resolve().parent.parent / "sparkctl" / "qa" / "probes" / "r4.json"


@functools.cache
def _data(path: Path = PATH) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data


def printed_codes(path: Path = PATH) -> dict[str, str]:
    """SHA-256 of a drawn probe PNG -> the code printed at its top."""
    vision = _data(path).get("vision") or {}
    codes: dict[str, str] = {}
    for number, code in zip(
        (vision.get("four") or {}).get("images", []), (vision.get("four") or {}).get("expected", []),
        strict=False,
    ):
        digest = (vision.get("drawn") or {}).get(str(number))
        if digest:
            codes[str(digest)] = str(code)
    single = vision.get("single") or {}
    for number in single.get("images", []):
        digest = (vision.get("drawn") or {}).get(str(number))
        code = (single.get("expected") or {}).get("code")
        if digest and code:
            codes[str(digest)] = str(code)
    return codes
