"""SGLang's own flags (0.5.23), checked without SGLang: every profile and override flag must exist,
and its value must have the flag's type, choices and (for the flags sparkctl reasons about) range.

The catalogue (``sglang-flags.json``) is read from SGLang's parser by ``scripts/sglang_flags.py``;
``validate`` can therefore always refuse an unknown or mistyped flag, with or without the
``sglang`` extra that runs the whole parser.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from importlib import resources
from typing import Any

CATALOGUE = "sglang-flags.json"

# Flags that hold secrets: never in a profile, an override, argv or the unit.
SECRET_FLAGS: dict[str, str] = {
    "--api-key": "from sparkctl_secrets.api_key, in a 0600 file, never on the command line",
    "--admin-api-key": "a secret: it would sit in argv, the 0644 unit and `plan`; not supported",
}

# Ranges of the flags sparkctl's own arithmetic and gates rely on: (low, high, inclusive-low).
RANGES: dict[str, tuple[float, float, bool]] = {
    "--mem-fraction-static": (0.0, 1.0, False),
    "--tp-size": (1, 1024, True),
    "--ep-size": (1, 1024, True),
    "--context-length": (1, 1 << 31, True),
    "--max-total-tokens": (1, 1 << 40, True),
    "--max-running-requests": (1, 1 << 20, True),
    "--cuda-graph-max-bs": (1, 1 << 16, True),
    "--watchdog-timeout": (1, 1 << 31, True),
    "--speculative-num-steps": (1, 64, True),
    "--speculative-num-draft-tokens": (1, 256, True),
}
# --chunked-prefill-size: a positive size, or -1 (SGLang: off).
_CHUNKED = "--chunked-prefill-size"
_PLACEHOLDER = re.compile(r"\{[a-z_]+\}")


@functools.cache
def catalogue() -> dict[str, Any]:
    text = resources.files("sparkctl.profiles").joinpath(CATALOGUE).read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def sglang_version() -> str:
    return str(catalogue()["sglang"])


def _number(value: Any, kind: str) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value if kind == "float" or float(value).is_integer() else None
    if isinstance(value, str):
        try:
            return int(value) if kind == "int" else float(value)
        except ValueError:
            return None
    return None


def problems(flag: str, value: Any) -> list[str]:
    """What is wrong with ``flag: value`` for SGLang ([] when nothing)."""
    if flag in SECRET_FLAGS:
        return [f"{flag}: {SECRET_FLAGS[flag]}"]
    flags = catalogue()["flags"]
    spec = flags.get(flag)
    if spec is None:
        close = difflib.get_close_matches(flag, list(flags), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return [f"{flag}: SGLang {sglang_version()} has no such flag{hint}"]
    if value is None:
        return []
    kind = spec["kind"]
    if kind == "switch":
        if value is True:
            return []
        return [f"{flag}: a switch takes true (or false to remove it), got {value!r}"]
    values = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not spec.get("many"):
        return [f"{flag}: takes one value, got a list"]
    out: list[str] = []
    for v in values:
        if isinstance(v, str) and _PLACEHOLDER.search(v):
            continue  # filled per runtime by the renderer
        if isinstance(v, dict):
            continue  # JSON-valued flags (e.g. --json-model-override-args) are rendered as JSON
        if spec.get("type") in ("int", "float"):
            num = _number(v, spec["type"])
            if num is None:
                out.append(f"{flag}: expected {'a whole number' if spec['type'] == 'int' else 'a number'}, "
                           f"got {v!r}")
                continue
            if flag in RANGES:
                low, high, inclusive = RANGES[flag]
                if not ((num >= low if inclusive else num > low) and num <= high):
                    bound = f"{'>=' if inclusive else '>'} {low:g} and <= {high:g}"
                    out.append(f"{flag}: {v!r} is out of range (must be {bound})")
            if flag == _CHUNKED and not (num > 0 or num == -1):
                out.append(f"{flag}: {v!r} must be a positive size, or -1 to turn chunking off")
        elif isinstance(v, bool):
            out.append(f"{flag}: expected a value, got {v!r}")
        if spec.get("choices") and str(v) not in spec["choices"]:
            out.append(f"{flag}: {v!r} is not one of {', '.join(spec['choices'])}")
    return out
