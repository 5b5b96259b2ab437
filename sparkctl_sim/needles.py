"""Needles: facts planted anywhere in the conversation, and the answers to questions about them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from sparkctl_sim.knobs import Knobs
from sparkctl_sim.prompt import Prompt

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


