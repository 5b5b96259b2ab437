"""Integer arithmetic after a question cue ("What is 37*41?" → ``1517``), parsed without eval."""

from __future__ import annotations

import re
from fractions import Fraction

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


