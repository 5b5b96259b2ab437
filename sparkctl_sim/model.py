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
6. images: what it sees in each (count, size, shapes and colours left to right), and the printed
   code of a probe image it recognises ("read the printed code": the codes, or the object asked for);
7. otherwise deterministic pseudo-text of exactly the token budget (for benchmarks).
Temperature and seeds are ignored: the same request always gets the same answer (unless the
``unstable-output`` fault is set). ``ignore_eos`` pads any answer with pseudo-text up to max_tokens.

The request is read by ``prompt``; the readers are ``arithmetic``, ``needles`` and ``schema_values``
(and ``images``); this module holds the reply and the responder that chooses between them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from dataclasses import dataclass
from typing import Any

from sparkctl_sim import images, tokenizer
from sparkctl_sim.arithmetic import find_arithmetic, format_number
from sparkctl_sim.knobs import Knobs
from sparkctl_sim.needles import answer_needle, find_facts
from sparkctl_sim.prompt import Prompt, RequestError, content_parts
from sparkctl_sim.schema_values import Context, build_value

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



# The garbage-at-batch answer's text, repeated: a CJK character and a symbol in turn (one token each).
GARBAGE = "的#"


@dataclass
class Reply:
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str = "stop"
    kind: str = "text"



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
            # What a GB10 boot once answered at bs >= 3 (NaN target logits): CJK and symbol runs,
            # one token each, as many as the answer had.
            n = max(1, min(max_tokens, tokenizer.count(reply.content)))
            reply.content = (GARBAGE * (n // 2 + 1))[:n]
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
        if "printed code" in text:
            codes = [self._read_code(info) for info in seen]
            if "json object" in text:
                return json.dumps(self._code_and_shapes(prompt.user_text, seen[0], codes[0]))
            if "json" in text and "array" in text:
                return json.dumps(codes)
            return " ".join(f"Image {info.index}: {code or 'no printed code I can read'}."
                            for info, code in zip(seen, codes, strict=True))
        if "json" in text and "array" in text:
            if len(seen) == 1:
                return json.dumps(seen[0].colours)
            return json.dumps([info.colours[0] if len(info.colours) == 1 else info.colours for info in seen])
        n = len(seen)
        head = f"I see {n} image{'s' if n != 1 else ''}."
        return " ".join([head, *(info.describe() for info in seen)])

    def _read_code(self, info: images.ImageInfo) -> str | None:
        """The printed code as read; the ``misread-code`` fault gets its last digit wrong."""
        code = info.code
        if code and self.knobs.has("misread-code"):
            digits = [i for i, ch in enumerate(code) if ch.isdigit()]
            if digits:
                at = digits[-1]
                code = code[:at] + str((int(code[at]) + 1) % 10) + code[at + 1 :]
        return code

    @staticmethod
    def _code_and_shapes(question: str, info: images.ImageInfo, code: str | None) -> dict[str, str]:
        """The object a "read the code and name the shapes" question asks for, keyed as it asks.

        Keys are the quoted names in the question: one naming the code gets the code, one naming
        left/right (or first/last) gets that shape as "<colour> <shape>".
        """
        keys = [k for k in re.findall(r'"([A-Za-z_][\w]*)"', question) if " " not in k]
        shapes = [f"{s.colour} {s.kind}" for s in info.shapes]
        out: dict[str, str] = {}
        for key in dict.fromkeys(keys):
            name = key.lower()
            if "code" in name:
                out[key] = code or ""
            elif shapes and ("left" in name or "first" in name):
                out[key] = shapes[0]
            elif shapes and ("right" in name or "last" in name):
                out[key] = shapes[-1]
        return out

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
            text, _ = content_parts(message.get("content"))
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
