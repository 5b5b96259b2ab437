"""Problems found in an inventory, collected rather than raised one by one.

Every problem reads ``<field path>: <what is wrong> — <what to do>``, so an admin can fix a whole
inventory from one run of ``sparkctl validate``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from sparkctl.errors import InputError


@dataclass(frozen=True)
class Problem:
    path: str  # e.g. "sparks.spark-2.sparkctl_fabric_ports[0].address"
    what: str  # what is wrong, with the offending value
    todo: str  # what to do about it
    where: str = ""  # the file (and line) the value came from, when known

    def __str__(self) -> str:
        at = f" ({self.where})" if self.where else ""
        return f"{self.path}: {self.what}{at} — {self.todo}"


@dataclass
class Problems:
    """An ordered, de-duplicated list of problems."""

    items: list[Problem] = field(default_factory=list)

    def add(self, path: str, what: str, todo: str) -> None:
        problem = Problem(path, what, todo)
        if problem not in self.items:
            self.items.append(problem)

    def extend(self, problems: Iterable[Problem]) -> None:
        for problem in problems:
            self.add(problem.path, problem.what, problem.todo)

    def drop_missing_where_reported(self) -> None:
        """A value that could not be read (decrypted, templated) is not also 'missing'."""
        other = {p.path for p in self.items if p.what != "missing"}
        self.items = [p for p in self.items if not (p.what == "missing" and p.path in other)]

    def locate(self, origins: dict[str, str]) -> None:
        """Name the file (and line) of each problem's field: its own origin or its nearest parent's."""
        for i, problem in enumerate(self.items):
            if problem.where:
                continue
            path = problem.path
            while path and path not in origins:
                cut = max(path.rfind("."), path.rfind("["))
                path = path[:cut] if cut > 0 else ""
            if path:
                self.items[i] = Problem(problem.path, problem.what, problem.todo, origins[path])

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def raise_if_any(self, inventory: str) -> None:
        if not self.items:
            return
        count = len(self.items)
        noun = "problem" if count == 1 else "problems"
        raise InputError(
            f"inventory {inventory} has {count} {noun}; nothing was contacted",
            hint="fix every line above, then run `sparkctl validate` again",
            details=[str(p) for p in self.items],
        )


class FieldError(ValueError):
    """Raised by field validators: carries the 'what' and the 'todo' separately."""

    def __init__(self, what: str, todo: str):
        super().__init__(f"{what} \x1f {todo}")
        self.what = what
        self.todo = todo


def join_path(prefix: str, loc: Sequence[int | str]) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out:
            out += f".{part}"
        else:
            out = str(part)
    return out


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    return f"{value!r} ({type(value).__name__})"


def suggest(word: str, known: Iterable[str]) -> str:
    """' (did you mean X?)' when a close known word exists."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def from_validation_error(
    exc: ValidationError, prefix: str, known_keys: Sequence[str] | None = None
) -> list[Problem]:
    """Turn pydantic's errors into problems with inventory field paths and a thing to do."""
    out: list[Problem] = []
    for err in exc.errors(include_url=False):
        loc = [p for p in err["loc"] if not (isinstance(p, str) and "[" in p)]
        path = join_path(prefix, loc)
        kind = err["type"]
        value = err.get("input")
        ctx = err.get("ctx") or {}
        if kind == "value_error" and isinstance(ctx.get("error"), FieldError):
            fe: FieldError = ctx["error"]
            out.append(Problem(path, fe.what, fe.todo))
            continue
        if kind == "missing":
            out.append(Problem(path, "missing", "add it (the example site shows every key, commented: "
                                                "`sparkctl init --example DIR`)"))
        elif kind == "extra_forbidden":
            key = str(loc[-1]) if loc else "?"
            names = ", ".join(known_keys) if known_keys else ""
            hint = suggest(key, known_keys or [])
            out.append(
                Problem(path, f"unknown key{hint}", f"remove it or fix its spelling (known here: {names})")
            )
        elif kind in {"int_type", "int_parsing", "int_from_float"}:
            out.append(Problem(path, f"expected a whole number, got {_show(value)}", "write an integer"))
        elif kind in {"float_type", "float_parsing"}:
            out.append(Problem(path, f"expected a number, got {_show(value)}", "write a number"))
        elif kind in {"bool_type", "bool_parsing"}:
            out.append(Problem(path, f"expected true or false, got {_show(value)}", "write true or false"))
        elif kind in {"string_type"}:
            out.append(Problem(path, f"expected text, got {_show(value)}", "write a string"))
        elif kind in {"list_type"}:
            out.append(Problem(path, f"expected a list, got {_show(value)}", "write a YAML list"))
        elif kind in {"dict_type", "model_type", "model_attributes_type"}:
            out.append(
                Problem(path, f"expected a mapping, got {_show(value)}", "write a YAML mapping (key: value)")
            )
        elif kind == "literal_error":
            expected = str(ctx.get("expected", "")).replace("'", "")
            out.append(Problem(path, f"{_show(value)} is not one of {expected}", "use one of them"))
        elif kind in {"greater_than_equal", "greater_than", "less_than_equal", "less_than"}:
            out.append(Problem(path, f"{_show(value)}: {err['msg'].lower()}", "pick a value in range"))
        elif kind in {"ip_v4_interface", "ip_any_interface"}:
            out.append(
                Problem(
                    path, f"{_show(value)} is not an IPv4 address with prefix", "write it like 10.77.0.10/24"
                )
            )
        elif kind in {"ip_v4_network", "ip_any_network"}:
            out.append(
                Problem(
                    path,
                    f"{_show(value)} is not an IPv4 network",
                    "write it like 10.77.0.0/24 (host bits zero)",
                )
            )
        elif kind in {"ip_v4_address", "ip_any_address"}:
            out.append(Problem(path, f"{_show(value)} is not an IPv4 address", "write it like 192.168.7.10"))
        elif kind in {"too_short", "too_long"}:
            out.append(Problem(path, err["msg"].lower(), "fix the number of entries"))
        else:
            out.append(Problem(path, f"{err['msg']} (got {_show(value)})", "fix the value"))
    return out
