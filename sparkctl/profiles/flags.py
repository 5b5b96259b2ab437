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
from decimal import Decimal
from importlib import resources
from typing import Any

CATALOGUE = "sglang-flags.json"

# Flags that hold secrets: never in a profile, an override, argv or the unit.
SECRET_FLAGS: dict[str, str] = {
    "--api-key": "from sparkctl_secrets.api_key, in a 0600 file, never on the command line",
    "--admin-api-key": "a secret: it would sit in argv, the 0644 unit and `plan`; not supported",
}

# Ranges of the flags sparkctl's own arithmetic and gates rely on, and of every count, size and
# timeout that must be positive: (low, high, inclusive-low). SGLang's parser takes any number for
# them (a negative --context-length or a zero --max-running-requests passes it) and the rank then
# fails at boot, or quietly serves something else. A flag with several values (--cuda-graph-bs-*)
# holds each value to the range. Aliases SGLang accepts for the same setting carry the same range.
_SIZE = (1, 1 << 31, True)
_TOKENS = (1, 1 << 40, True)
_PARALLEL = (1, 1024, True)
_BATCH = (1, 1 << 16, True)
RANGES: dict[str, tuple[float, float, bool]] = {
    "--mem-fraction-static": (0.0, 1.0, False),
    "--tp-size": _PARALLEL,
    "--tensor-parallel-size": _PARALLEL,
    "--ep-size": _PARALLEL,
    "--expert-parallel-size": _PARALLEL,
    "--pp-size": _PARALLEL,
    "--pipeline-parallel-size": _PARALLEL,
    "--context-length": _SIZE,
    "--max-prefill-tokens": _SIZE,
    "--max-total-tokens": _TOKENS,
    "--max-running-requests": (1, 1 << 20, True),
    "--cuda-graph-max-bs-decode": _BATCH,
    "--cuda-graph-max-bs-prefill": _BATCH,
    "--cuda-graph-bs-decode": _BATCH,
    "--cuda-graph-bs-prefill": _BATCH,
    "--watchdog-timeout": (0, 1 << 31, False),
    "--speculative-num-steps": (1, 64, True),
    "--speculative-num-draft-tokens": (1, 256, True),
    "--speculative-dspark-block-size": (1, 256, True),
    "--speculative-dflash-block-size": (1, 256, True),
}
# --chunked-prefill-size: a positive size, or -1 (SGLang: off).
_CHUNKED = "--chunked-prefill-size"
# SGLang's human_readable_int (catalogue ``suffixes``): 1k = 1000, 1M = 10**6, 1Mi = 2**20, ...
_SUFFIXED = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)$")
_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_PLACEHOLDER = re.compile(r"\{[a-z_]+\}")


@functools.cache
def catalogue() -> dict[str, Any]:
    text = resources.files("sparkctl.profiles").joinpath(CATALOGUE).read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def sglang_version() -> str:
    return str(catalogue()["sglang"])


def _number(value: Any, kind: str, suffixes: bool = False) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value if kind == "float" or float(value).is_integer() else None
    if isinstance(value, str):
        text = value.strip()
        match = _SUFFIXED.match(text) if suffixes else None
        if match:
            digits, suffix = match.groups()
            if suffix in _IEC:
                return int(digits) * _IEC[suffix] if "." not in digits else None
            return int(Decimal(digits) * _SI[suffix])
        try:
            return int(text) if kind == "int" else float(text)
        except ValueError:
            return None
    return None


def number(flag: str, value: Any) -> float | None:
    """The number SGLang reads from ``flag: value`` (suffixes included), None when it is not one."""
    spec = catalogue()["flags"].get(flag) or {}
    return _number(value, spec.get("type", "float"), bool(spec.get("suffixes")))


def plain(flag: str, value: Any) -> Any:
    """``value`` as SGLang reads it when written with a size suffix ("1M" -> 1000000), so the argv,
    the memory arithmetic and the /server_info gate all see the number; any other value unchanged."""
    spec = catalogue()["flags"].get(flag) or {}
    if spec.get("suffixes") and isinstance(value, str) and _SUFFIXED.match(value.strip()):
        num = _number(value, "int", True)
        return value if num is None else int(num)
    return value


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
            num = _number(v, spec["type"], bool(spec.get("suffixes")))
            if num is None:
                what = "a whole number" if spec["type"] == "int" else "a number"
                if spec.get("suffixes"):
                    what += " (or with a suffix: 1k, 1M, 1Mi)"
                out.append(f"{flag}: expected {what}, got {v!r}")
                continue
            if flag in RANGES:
                low, high, inclusive = RANGES[flag]
                if not (num >= low if inclusive else num > low):
                    least = "positive" if (low, inclusive) in ((1, True), (0, False)) else \
                        f"{'>=' if inclusive else '>'} {low:g}"
                    out.append(f"{flag}: {v!r} must be {least}"
                               + (f" and at most {high:g}" if isinstance(high, float) else ""))
                elif num > high:
                    most = f"{high:,}" if isinstance(high, int) else f"{high:g}"
                    out.append(f"{flag}: {v!r} is out of range (must be at most {most})")
            if flag == _CHUNKED and not (num > 0 or num == -1):
                out.append(f"{flag}: {v!r} must be a positive size, or -1 to turn chunking off")
        elif isinstance(v, bool):
            out.append(f"{flag}: expected a value, got {v!r}")
        if spec.get("choices") and str(v) not in spec["choices"]:
            out.append(f"{flag}: {v!r} is not one of {', '.join(spec['choices'])}")
    return out
