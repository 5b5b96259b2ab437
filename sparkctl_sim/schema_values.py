"""Values for a JSON schema, each field filled from what the prompt says (response_format and tool
call arguments)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sparkctl_sim import images
from sparkctl_sim.arithmetic import format_number
from sparkctl_sim.needles import Facts

_STOP = {
    "the",
    "a",
    "an",
    "is",
    "to",
    "of",
    "for",
    "be",
    "should",
    "as",
    "with",
    "equal",
    "equals",
    "set",
    "named",
    "called",
    "integer",
    "number",
    "string",
    "value",
    "word",
    "exactly",
}


def _mentioned(text: str, name: str) -> list[str]:
    """Words that follow a mention of ``name`` ("key alpha", "answer is the integer 42", "city: Paris")."""
    variants = {name, name.replace("_", " "), name.replace("_", "-")}
    found: list[str] = []
    for variant in variants:
        for match in re.finditer(rf"\b{re.escape(variant)}\b", text, re.I):
            tail = text[match.end() : match.end() + 120]
            for word in re.finditer(r"\"([^\"]*)\"|'([^']*)'|(-?\d+(?:\.\d+)?)|([A-Za-z][\w-]*)", tail):
                value = next(g for g in word.groups() if g is not None)
                if word.group(4) is not None and value.lower() in _STOP:
                    continue
                found.append(value)
                break
    return found


@dataclass
class Context:
    text: str
    facts: Facts
    arithmetic: Fraction | None
    images: list[images.ImageInfo]

    def lookup(self, name: str) -> list[str]:
        lname = name.lower()
        for key, value in self.facts.records.items():
            if key.lower() == lname:
                return [value]
        for key, value in self.facts.phrases.items():
            if lname in key.replace(" ", "_") or lname == key.split()[-1]:
                return [value]
        return _mentioned(self.text, name)


def _resolve_ref(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema and seen < 32:
        ref = str(schema["$ref"])
        node: Any = root
        if not ref.startswith("#/"):
            return {}
        for part in ref[2:].split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        schema = node
        seen += 1
    return schema if isinstance(schema, dict) else {}


def _schema_type(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return kinds[0] if kinds else "null"
    if kind is None:
        if "properties" in schema:
            return "object"
        if "items" in schema:
            return "array"
    return kind if isinstance(kind, str) else None


def _clamp(value: float, schema: dict[str, Any]) -> float:
    if "minimum" in schema:
        value = max(value, schema["minimum"])
    if "maximum" in schema:
        value = min(value, schema["maximum"])
    if "exclusiveMinimum" in schema and isinstance(schema["exclusiveMinimum"], int | float):
        value = max(value, schema["exclusiveMinimum"] + 1)
    if "exclusiveMaximum" in schema and isinstance(schema["exclusiveMaximum"], int | float):
        value = min(value, schema["exclusiveMaximum"] - 1)
    return value


def build_value(schema: Any, name: str, ctx: Context, root: dict[str, Any], depth: int = 0) -> Any:
    """A value valid against ``schema``, filled from the context where the prompt says what it is."""
    if not isinstance(schema, dict) or depth > 16:
        return None
    schema = _resolve_ref(schema, root)
    if "const" in schema:
        return schema["const"]
    for combinator in ("anyOf", "oneOf"):
        options = schema.get(combinator)
        if isinstance(options, list) and options:
            usable = [o for o in options if _schema_type(_resolve_ref(o, root)) != "null"] or options
            return build_value(usable[0], name, ctx, root, depth + 1)
    if isinstance(schema.get("allOf"), list):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            part = _resolve_ref(part, root)
            for key, value in part.items():
                if key in ("properties",) and isinstance(value, dict):
                    merged.setdefault("properties", {}).update(value)
                elif key == "required" and isinstance(value, list):
                    merged.setdefault("required", []).extend(value)
                else:
                    merged[key] = value
        return build_value(merged, name, ctx, root, depth + 1)
    said = ctx.lookup(name) if name else []
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        for candidate in said:
            for option in enum:
                if str(option).lower() == candidate.lower():
                    return option
        for option in enum:
            if isinstance(option, str) and re.search(rf"\b{re.escape(option)}\b", ctx.text, re.I):
                return option
        return enum[0]
    kind = _schema_type(schema)
    lname = name.lower()
    if kind == "object":
        props = schema.get("properties") or {}
        out: dict[str, Any] = {}
        for prop, sub in props.items():
            out[prop] = build_value(sub, prop, ctx, root, depth + 1)
        return out
    if kind == "array":
        item_schema = schema.get("items") or {}
        values: list[Any] = []
        if "colo" in lname and ctx.images:
            per_image = [info.colours for info in ctx.images]
            values = per_image[0] if len(ctx.images) == 1 else [c[0] if c else "none" for c in per_image]
        elif "shape" in lname and ctx.images:
            values = [s.kind for info in ctx.images for s in info.shapes]
        elif "image" in lname and ctx.images:
            values = [info.describe() for info in ctx.images]
        if values and _schema_type(_resolve_ref(item_schema, root)) in (None, "string"):
            items: list[Any] = list(values)
        else:
            count = max(int(schema.get("minItems", 1)), 1)
            items = [build_value(item_schema, name.rstrip("s"), ctx, root, depth + 1) for _ in range(count)]
        if "maxItems" in schema:
            items = items[: int(schema["maxItems"])]
        while len(items) < int(schema.get("minItems", 0)):
            items.append(build_value(item_schema, "", ctx, root, depth + 1))
        return items
    if kind in ("integer", "number"):
        for candidate in said:
            try:
                number = float(candidate)
            except ValueError:
                continue
            return int(_clamp(number, schema)) if kind == "integer" else _clamp(number, schema)
        if ctx.arithmetic is not None and (kind == "number" or ctx.arithmetic.denominator == 1):
            value = ctx.arithmetic
            return int(value) if kind == "integer" else float(value)
        if ctx.images and re.search(r"count|number|num_|shapes|images", lname):
            total = len(ctx.images) if "image" in lname else sum(len(i.shapes) for i in ctx.images)
            return total
        base = schema.get("default", 0)
        return int(_clamp(base, schema)) if kind == "integer" else float(_clamp(base, schema))
    if kind == "boolean":
        for candidate in said:
            if candidate.lower() in ("true", "yes"):
                return True
            if candidate.lower() in ("false", "no"):
                return False
        return bool(schema.get("default", True))
    if kind == "null":
        return None
    # string (or untyped)
    if ctx.images and "colo" in lname:
        colours = [c for info in ctx.images for c in info.colours]
        if colours:
            return colours[0]
    if ctx.images and "shape" in lname:
        kinds = [s.kind for info in ctx.images for s in info.shapes]
        if kinds:
            return kinds[0]
    if said:
        value = said[0]
    elif ctx.arithmetic is not None and lname in ("answer", "result", "value"):
        value = format_number(ctx.arithmetic)
    elif "default" in schema:
        value = str(schema["default"])
    else:
        value = _default_string(schema, name)
    max_len = schema.get("maxLength")
    if isinstance(max_len, int):
        value = value[:max_len]
    min_len = schema.get("minLength")
    if isinstance(min_len, int) and len(value) < min_len:
        value = value + "x" * (min_len - len(value))
    return value


def _default_string(schema: dict[str, Any], name: str) -> str:
    fmt = schema.get("format")
    return {
        "date": "2026-01-01",
        "date-time": "2026-01-01T00:00:00Z",
        "time": "00:00:00",
        "email": "user@example.org",
        "uri": "https://example.org/",
        "uuid": "00000000-0000-4000-8000-000000000000",
        "ipv4": "192.0.2.1",
    }.get(str(fmt), name or "text")


