"""The simulator's "model": a deterministic responder for the checks qualification makes.

Given a chat request it answers, in this order of precedence:
1. after a ``tool`` message: a final answer quoting the tool result;
2. with ``tools`` offered and a user turn naming one (or ``tool_choice`` forcing one): a tool call
   whose JSON arguments are read from the user's words and the tool's parameter schema;
3. with ``response_format`` ``json_schema``/``json_object``: an object built by walking the schema,
   each field filled from what the prompt says (needle records, "answer is 42", image colours …);
4. a needle question ("What is the secret passphrase?", "Return the three recorded values …")
   answered from facts planted anywhere in the conversation;
5. integer arithmetic after a question cue ("What is 37*41?" → ``1517``), parsed without eval;
6. images: what it sees in each (count, size, shapes and colours left to right);
7. otherwise deterministic pseudo-text of exactly the token budget (for benchmarks).
Temperature and seeds are ignored: the same request always gets the same answer (unless the
``unstable-output`` fault is set). ``ignore_eos`` pads any answer with pseudo-text up to max_tokens.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from sparkctl_sim import images, tokenizer
from sparkctl_sim.config import Knobs

IMAGE_TOKENS = 256
MESSAGE_OVERHEAD = 4
REPLY_PRIMING = 3

_VOCAB = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "at",
    "by",
    "from",
    "this",
    "be",
    "are",
    "was",
    "we",
    "can",
    "will",
    "not",
    "but",
    "all",
    "or",
    "an",
    "one",
    "two",
    "new",
    "each",
    "when",
    "more",
    "into",
    "time",
    "data",
    "value",
    "model",
    "node",
    "rank",
    "token",
    "fabric",
    "link",
    "spark",
    "engine",
    "batch",
    "cache",
    "layer",
    "weight",
    "shard",
    "route",
    "switch",
    "port",
    "frame",
    "queue",
    "state",
    "check",
    "gate",
    "load",
    "serve",
    "ready",
    "start",
    "stop",
    "trace",
    "graph",
    "kernel",
    "stream",
    "block",
    "draft",
    "accept",
    "memory",
    "page",
    "disk",
    "path",
    "file",
    "line",
    "text",
    "word",
    "list",
    "map",
    "set",
    "key",
    "field",
    "type",
    "code",
    "test",
    "case",
    "run",
    "step",
    "loop",
    "call",
    "ret",
    "sum",
    "count",
    "first",
    "last",
    "next",
    "then",
    "also",
    "only",
    "just",
    "still",
    "very",
    "well",
    "fast",
    "slow",
    "small",
    "large",
    "short",
    "long",
    "high",
    "low",
]
assert all(len(w) <= 6 for w in _VOCAB), "every filler word must be a single token"


class RequestError(ValueError):
    """A malformed chat request (HTTP 400)."""


@dataclass
class Reply:
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str = "stop"
    kind: str = "text"


@dataclass
class Prompt:
    """The parts of a chat request the responder reads."""

    messages: list[dict[str, Any]]
    user_text: str  # the last user message's text
    all_text: str  # every message's text, in order
    image_urls: list[str] = field(default_factory=list)  # in the last user message
    prompt_tokens: int = 0


def _content_parts(content: Any) -> tuple[str, list[str]]:
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise RequestError("message content must be a string or a list of content parts")
    texts: list[str] = []
    urls: list[str] = []
    for part in content:
        if not isinstance(part, dict):
            raise RequestError("each content part must be an object")
        kind = part.get("type")
        if kind == "text":
            texts.append(str(part.get("text", "")))
        elif kind == "image_url":
            ref = part.get("image_url")
            url = ref.get("url") if isinstance(ref, dict) else ref
            if not isinstance(url, str):
                raise RequestError("image_url content parts need an image_url.url string")
            urls.append(url)
        else:
            raise RequestError(f"unsupported content part type {kind!r}")
    return "\n".join(texts), urls


def read_prompt(messages: Any, tools: Any = None) -> Prompt:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list")
    texts: list[str] = []
    user_text = ""
    user_urls: list[str] = []
    tokens = REPLY_PRIMING
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError("each message must be an object with a role")
        text, urls = _content_parts(message.get("content"))
        calls = message.get("tool_calls")
        if calls:
            text += "\n" + json.dumps(calls, sort_keys=True)
        texts.append(text)
        tokens += MESSAGE_OVERHEAD + tokenizer.count(text) + IMAGE_TOKENS * len(urls)
        if message["role"] == "user":
            user_text, user_urls = text, urls
    if tools:
        tokens += tokenizer.count(json.dumps(tools, sort_keys=True)) + 8
    return Prompt(messages, user_text, "\n".join(texts), user_urls, tokens)


# ---------------------------------------------------------------------------------------------
# Arithmetic


_CUE = re.compile(
    r"\b(what\s+is|what's|whats|compute|calculate|evaluate|how\s+much\s+is|solve)\b|=\s*\?", re.I
)
_WORD_OPS = (
    (re.compile(r"\bmultiplied\s+by\b", re.I), "*"),
    (re.compile(r"\btimes\b", re.I), "*"),
    (re.compile(r"\bdivided\s+by\b", re.I), "/"),
    (re.compile(r"\bplus\b", re.I), "+"),
    (re.compile(r"\bminus\b", re.I), "-"),
    (re.compile(r"(?<=\d)\s*[x×]\s*(?=\d)"), "*"),
    (re.compile(r"÷"), "/"),
    (re.compile(r"[−–]"), "-"),
)
_SPAN = re.compile(r"[-(\d][\d\s+\-*/().]*[\d)]")


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = re.findall(r"\d+(?:\.\d+)?|[-+*/()]", text)
        if "".join(self.tokens) != re.sub(r"\s+", "", text):
            raise ValueError("not an expression")
        self.pos = 0
        self.ops = 0
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def parse(self) -> Fraction:
        value = self.expr()
        if self.pos != len(self.tokens):
            raise ValueError("trailing tokens")
        return value

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            self.ops += 1
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.factor()
            self.ops += 1
            if op == "*":
                value *= rhs
            else:
                if rhs == 0:
                    raise ZeroDivisionError("division by zero")
                value /= rhs
        return value

    def factor(self) -> Fraction:
        token = self.peek()
        if token is None:
            raise ValueError("unexpected end")
        self.depth += 1
        if self.depth > 64:
            raise ValueError("too deeply nested")
        try:
            if token == "-":
                self.take()
                return -self.factor()
            if token == "(":
                self.take()
                value = self.expr()
                if self.peek() != ")":
                    raise ValueError("missing )")
                self.take()
                return value
            if token[0].isdigit():
                self.take()
                if len(token) > 40:
                    raise ValueError("number too long")
                return Fraction(token)
            raise ValueError(f"unexpected {token}")
        finally:
            self.depth -= 1


def find_arithmetic(text: str) -> tuple[str, Fraction] | None:
    """The first arithmetic expression after a question cue, and its exact value."""
    cue = _CUE.search(text)
    if not cue:
        return None
    rest = text[cue.start() :]
    for pattern, op in _WORD_OPS:
        rest = pattern.sub(op, rest)
    for span in _SPAN.finditer(rest):
        candidate = span.group(0).strip()
        while candidate:
            try:
                parser = _Parser(candidate)
                value = parser.parse()
            except (ValueError, ZeroDivisionError):
                value = None
                parser = None
            if parser is not None and value is not None and parser.ops >= 1:
                return re.sub(r"\s+", " ", candidate), value
            # drop a dangling leading "-" or unbalanced "(" / trailing ")" and retry
            trimmed = candidate[1:].strip() if candidate[0] in "-(" else candidate[:-1].strip()
            if trimmed == candidate:
                break
            candidate = trimmed
    return None


def format_number(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.6f}".rstrip("0").rstrip(".")
    return text


# ---------------------------------------------------------------------------------------------
# Needles: facts planted in the context

_RECORD = re.compile(r"\bRECORD\s+([A-Za-z_][\w-]*)\s*=\s*([^\s,;]+?)(?=[.,;]?(?:\s|$))")
_VALUE = r"(?:\"([^\"]+)\"|'([^']+)'|“([^”]+)”|([\w][\w-]*))"
_FACT = re.compile(
    r"\b((?:(?:secret|magic|special|hidden)\s+(?:[A-Za-z][\w-]*\s+){0,2}?[A-Za-z][\w-]*)"
    r"|pass\s?phrase|password|code\s?word)\s+(?:is|was)\s*:?\s*" + _VALUE,
    re.I,
)


@dataclass
class Facts:
    records: dict[str, str]
    phrases: dict[str, str]  # lower-cased key phrase -> value
    question: str  # the last user text with the planted statements removed


def find_facts(prompt: Prompt) -> Facts:
    records: dict[str, str] = {}
    phrases: dict[str, str] = {}
    for match in _RECORD.finditer(prompt.all_text):
        records.setdefault(match.group(1), match.group(2))
    for match in _FACT.finditer(prompt.all_text):
        key = re.sub(r"\s+", " ", match.group(1).lower())
        value = next(g for g in match.groups()[1:] if g)
        phrases.setdefault(key, value)
    question = _RECORD.sub(" ", prompt.user_text)
    question = _FACT.sub(" ", question)
    return Facts(records, phrases, question)


def answer_needle(prompt: Prompt, knobs: Knobs, want_json: bool) -> str | None:
    facts = find_facts(prompt)
    question = facts.question.lower()
    if facts.records and re.search(r"\brecord", question):
        values = dict(facts.records)
        if knobs.has("lose-needle"):
            values = {k: v[::-1] for k, v in values.items()}
        if want_json or "json" in question:
            return json.dumps(values)
        return ", ".join(f"{k}={v}" for k, v in values.items())
    for key, value in facts.phrases.items():
        last_word = key.split()[-1]
        if key in question or re.search(rf"\b{re.escape(last_word)}\b", question):
            if knobs.has("lose-needle"):
                return f"I could not find the {key} in the text."
            if re.search(r"\bonly\b", question):
                return value
            return f"The {key} is {value}."
    return None


# ---------------------------------------------------------------------------------------------
# Schema-driven values


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


# ---------------------------------------------------------------------------------------------


def pseudo_text(seed_material: str, n_tokens: int) -> str:
    """Deterministic filler of exactly ``n_tokens`` tokens (each word and each full stop is one token)."""
    rng = random.Random(hashlib.sha256(seed_material.encode()).digest())
    words: list[str] = []
    left = n_tokens
    capital = True
    since_stop = 0
    while left > 0:
        if since_stop >= 6 and left >= 2 and rng.random() < 0.15:
            words[-1] += "."
            left -= 1
            capital = True
            since_stop = 0
            continue
        word = rng.choice(_VOCAB)
        words.append(word.capitalize() if capital else word)
        capital = False
        since_stop += 1
        left -= 1
    return " ".join(words)


class Responder:
    """Produces one reply per request; thread-safe (the only shared state is a counter)."""

    def __init__(self, knobs: Knobs, model_name: str) -> None:
        self.knobs = knobs
        self.model_name = model_name
        self._counter = itertools.count(1)

    def reply(self, body: dict[str, Any], prompt: Prompt, max_tokens: int, running: int = 1) -> Reply:
        reply = self._answer(body, prompt, max_tokens)
        if self.knobs.has("garbage-at-batch") and running >= 3 and reply.content is not None:
            reply.content = "!" * max(1, min(max_tokens, tokenizer.count(reply.content)))
            reply.kind = "garbage"
        if reply.content is not None:
            reply = self._fit(reply, body, prompt, max_tokens)
        return reply

    # -- budget ---------------------------------------------------------------------------------

    def _fit(self, reply: Reply, body: dict[str, Any], prompt: Prompt, max_tokens: int) -> Reply:
        assert reply.content is not None
        used = tokenizer.count(reply.content)
        if used > max_tokens:
            kept = tokenizer.pieces(reply.content)
            text = ""
            n = 0
            for piece in kept:
                if piece.strip():
                    if n == max_tokens:
                        break
                    n += 1
                text += piece
            reply.content = text
            reply.finish_reason = "length"
        elif body.get("ignore_eos") and used < max_tokens and reply.kind != "pseudo":
            pad = pseudo_text(self._seed(body, prompt) + "|pad", max_tokens - used)
            reply.content = (reply.content + " " + pad) if reply.content else pad
            reply.finish_reason = "length"
        return reply

    def _seed(self, body: dict[str, Any], prompt: Prompt) -> str:
        material = json.dumps(
            {"model": self.model_name, "messages": prompt.messages, "tools": body.get("tools")},
            sort_keys=True,
            default=str,
        )
        if self.knobs.has("unstable-output"):
            material += f"|{next(self._counter)}"
        return material

    # -- answers --------------------------------------------------------------------------------

    def _answer(self, body: dict[str, Any], prompt: Prompt, max_tokens: int) -> Reply:
        messages = prompt.messages
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise RequestError("tools must be a list")
        if messages[-1].get("role") == "tool":
            return Reply(self._after_tool(messages), kind="tool-result")
        tool_choice = body.get("tool_choice", "auto")
        if tools and tool_choice != "none" and messages[-1].get("role") == "user":
            call = self._tool_call(tools, tool_choice, prompt)
            if call is not None:
                return Reply(None, tool_calls=[call], finish_reason="tool_calls", kind="tool-call")
        response_format = body.get("response_format") or {}
        if not isinstance(response_format, dict):
            raise RequestError("response_format must be an object")
        rf_type = response_format.get("type", "text")
        want_json = rf_type in ("json_schema", "json_object")
        arithmetic = find_arithmetic(prompt.user_text)
        if self.knobs.has("wrong-arithmetic") and arithmetic is not None:
            arithmetic = (arithmetic[0], arithmetic[1] + 1)
        seen = self._look(prompt)
        if rf_type == "json_schema":
            spec = response_format.get("json_schema") or {}
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                raise RequestError("response_format.json_schema.schema must be an object")
            ctx = Context(prompt.user_text, find_facts(prompt), arithmetic[1] if arithmetic else None, seen)
            value = build_value(schema, "", ctx, schema)
            if self.knobs.has("bad-json"):
                return Reply(self._break_json(value), kind="json")
            return Reply(json.dumps(value), kind="json")
        needle = answer_needle(prompt, self.knobs, want_json)
        if needle is not None:
            if rf_type == "json_object" and not needle.startswith("{"):
                needle = json.dumps({"answer": needle})
            return Reply(needle, kind="needle")
        if arithmetic is not None:
            expr, value = arithmetic
            text = format_number(value)
            if rf_type == "json_object":
                return Reply(
                    json.dumps({"answer": value.numerator if value.denominator == 1 else float(value)}),
                    kind="json",
                )
            if not re.search(r"\bonly\b", prompt.user_text, re.I):
                text = f"{expr} = {text}"
            return Reply(text, kind="arithmetic")
        if prompt.image_urls:
            return Reply(self._describe_images(seen, prompt, rf_type), kind="images")
        if rf_type == "json_object":
            return Reply(
                json.dumps({"response": pseudo_text(self._seed(body, prompt), min(max_tokens, 32))}),
                kind="json",
            )
        return Reply(pseudo_text(self._seed(body, prompt), max_tokens), finish_reason="length", kind="pseudo")

    def _look(self, prompt: Prompt) -> list[images.ImageInfo]:
        if self.knobs.has("blind"):
            return []
        return [images.analyse(url, i + 1) for i, url in enumerate(prompt.image_urls)]

    def _describe_images(self, seen: list[images.ImageInfo], prompt: Prompt, rf_type: str) -> str:
        if not seen:
            return "I do not see any image."
        text = prompt.user_text.lower()
        if "json" in text and "array" in text:
            if len(seen) == 1:
                return json.dumps(seen[0].colours)
            return json.dumps([info.colours[0] if len(info.colours) == 1 else info.colours for info in seen])
        n = len(seen)
        head = f"I see {n} image{'s' if n != 1 else ''}."
        return " ".join([head, *(info.describe() for info in seen)])

    @staticmethod
    def _break_json(value: Any) -> str:
        if isinstance(value, dict):
            broken = {k: (str(v) + "?" if not isinstance(v, str) else 12345) for k, v in value.items()}
            broken["unexpected_field"] = True
            return json.dumps(broken)
        return json.dumps({"unexpected_field": value})

    def _tool_call(self, tools: list[Any], tool_choice: Any, prompt: Prompt) -> dict[str, Any] | None:
        if self.knobs.has("no-tool-call"):
            return None
        functions: list[dict[str, Any]] = [
            t["function"]
            for t in tools
            if isinstance(t, dict)
            and isinstance(t.get("function"), dict)
            and isinstance(t["function"].get("name"), str)
        ]
        if not functions:
            raise RequestError("tools must be a list of {type: function, function: {name, parameters}}")
        chosen: dict[str, Any] | None = None
        if isinstance(tool_choice, dict):
            wanted = (tool_choice.get("function") or {}).get("name")
            chosen = next((f for f in functions if f["name"] == wanted), None)
            if chosen is None:
                raise RequestError(f"tool_choice names an unknown function {wanted!r}")
        else:
            text = prompt.user_text.lower()
            for fn in functions:
                name = fn["name"].lower()
                if name in text or name.replace("_", " ") in text:
                    chosen = fn
                    break
            if chosen is None and tool_choice == "required":
                chosen = functions[0]
        if chosen is None:
            return None
        params = chosen.get("parameters") or {"type": "object", "properties": {}}
        ctx = Context(prompt.user_text, find_facts(prompt), None, [])
        arguments = build_value(params, "", ctx, params if isinstance(params, dict) else {})
        digest = hashlib.sha256((chosen["name"] + json.dumps(arguments, sort_keys=True)).encode()).hexdigest()
        return {
            "id": f"call_{digest[:24]}",
            "type": "function",
            "function": {"name": chosen["name"], "arguments": json.dumps(arguments)},
        }

    @staticmethod
    def _after_tool(messages: list[dict[str, Any]]) -> str:
        names: dict[str, str] = {}
        for message in messages:
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict):
                    fn = call.get("function") or {}
                    names[str(call.get("id"))] = str(fn.get("name", "the tool"))
        results: list[str] = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            text, _ = _content_parts(message.get("content"))
            name = names.get(str(message.get("tool_call_id")), "the tool")
            try:
                data = json.loads(text)
            except ValueError:
                data = None
            if isinstance(data, dict) and data:
                facts = " and ".join(
                    f"the {k} is {json.dumps(v) if not isinstance(v, str) else v}" for k, v in data.items()
                )
                results.append(f"According to {name}, {facts}.")
            else:
                results.append(f"{name} returned: {text.strip()}")
        return " ".join(reversed(results))
