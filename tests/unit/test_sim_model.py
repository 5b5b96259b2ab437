"""The simulator's deterministic model answers what qualification asks (no network, no processes)."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

import pytest

from sparkctl_sim import images, tokenizer
from sparkctl_sim.arithmetic import find_arithmetic
from sparkctl_sim.knobs import Knobs
from sparkctl_sim.model import Responder, pseudo_text
from sparkctl_sim.prompt import RequestError, read_prompt


def ask(body: dict[str, Any], knobs: Knobs | None = None, max_tokens: int = 256, running: int = 1) -> Any:
    responder = Responder(knobs or Knobs(), "sim-model")
    prompt = read_prompt(body["messages"], body.get("tools"))
    return responder.reply(body, prompt, max_tokens, running=running)


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("What is 37*41? Answer with only the number.", "1517"),
        ("What is 17 times 19? Return only the integer.", "323"),
        ("What is 19 plus 23? Reply with only the result.", "42"),
        ("Compute (12 - 4) * (3 + 2) - 6 / 3. Only the number.", "38"),
        ("What is 7 x 6? only digits", "42"),
        ("Calculate -(5 - 12) * 3, only the value", "21"),
        ("What is 1 / 8? only", "0.125"),
    ],
)
def test_arithmetic_is_exact(question: str, answer: str) -> None:
    assert ask(user(question)).content == answer


def test_arithmetic_needs_a_question_and_never_evaluates_code() -> None:
    assert find_arithmetic("[bench v1 tag math c1 s0] Write about 2024-01-01") is None
    assert find_arithmetic("What is __import__('os').system('true')?") is None
    assert ask(user("What is 6*7?")).content == "6*7 = 42"


def test_wrong_arithmetic_fault() -> None:
    assert (
        ask(
            user("What is 17 times 19? Return only the integer."),
            Knobs(faults=frozenset({"wrong-arithmetic"})),
        ).content
        == "324"
    )


LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup_fixture",
        "description": "Return the stored value for a key",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"],
            "additionalProperties": False,
        },
    },
}


def test_tool_call_round_trip() -> None:
    body = {
        "messages": [
            {
                "role": "user",
                "content": "Use lookup_fixture to retrieve the value for key alpha. Do not guess.",
            }
        ],
        "tools": [LOOKUP],
    }
    reply = ask(body)
    assert reply.finish_reason == "tool_calls" and reply.content is None
    (call,) = reply.tool_calls
    assert call["function"]["name"] == "lookup_fixture"
    assert json.loads(call["function"]["arguments"]) == {"key": "alpha"}
    body["messages"] += [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": '{"value":42}'},
    ]
    final = ask(body)
    assert final.tool_calls is None and "42" in final.content and "lookup_fixture" in final.content
    assert (
        ask({**body, "messages": body["messages"][:1]}, Knobs(faults=frozenset({"no-tool-call"}))).tool_calls
        is None
    )


def test_tool_choice_forced_and_none() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1},
        },
        "required": ["city", "unit", "days"],
    }
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": parameters}}
    body = {
        "messages": [{"role": "user", "content": "Weather for city Paris in fahrenheit"}],
        "tools": [weather],
    }
    assert ask({**body, "tool_choice": "none"}).tool_calls is None
    forced = ask({**body, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
    assert json.loads(forced.tool_calls[0]["function"]["arguments"]) == {
        "city": "Paris",
        "unit": "fahrenheit",
        "days": 1,
    }
    with pytest.raises(RequestError, match="unknown function"):
        ask({**body, "tool_choice": {"type": "function", "function": {"name": "nope"}}})


def _validate(value: Any, schema: dict[str, Any], root: dict[str, Any]) -> None:
    """A small JSON-schema checker for what the tests use (type, required, enum, items, bounds)."""
    if "$ref" in schema:
        node: Any = root
        for part in schema["$ref"][2:].split("/"):
            node = node[part]
        schema = node
    if "enum" in schema:
        assert value in schema["enum"]
    if "anyOf" in schema:
        assert any(_valid(value, option, root) for option in schema["anyOf"])
    kind = schema.get("type")
    if isinstance(kind, list):
        assert any(_valid(value, {**schema, "type": k}, root) for k in kind)
        return
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int,
             "number": (int, float), "null": type(None)}  # fmt: skip
    if kind:
        assert isinstance(value, types[kind]), (value, kind)
        if kind in ("integer", "number"):
            assert not isinstance(value, bool)
            assert schema.get("minimum", value) <= value <= schema.get("maximum", value)
    if kind == "object":
        assert set(schema.get("required", [])) <= set(value)
        if schema.get("additionalProperties") is False:
            assert set(value) <= set(schema.get("properties", {}))
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                _validate(value[key], sub, root)
    if kind == "array":
        assert schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value))
        for item in value:
            _validate(item, schema.get("items", {}), root)


def _valid(value: Any, schema: dict[str, Any], root: dict[str, Any]) -> bool:
    try:
        _validate(value, schema, root)
    except AssertionError:
        return False
    return True


def test_json_schema_answer() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
              "additionalProperties": False}  # fmt: skip
    body = {
        **user("Return an object whose answer is the integer 42."),
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "a", "schema": schema, "strict": True},
        },
    }
    assert json.loads(ask(body).content) == {"answer": 42}
    broken = json.loads(ask(body, Knobs(faults=frozenset({"bad-json"}))).content)
    with pytest.raises(AssertionError):
        _validate(broken, schema, schema)


def test_json_schema_walk_is_valid_for_a_rich_schema() -> None:
    schema = {
        "type": "object",
        "$defs": {"level": {"type": "string", "enum": ["low", "medium", "high"]}},
        "properties": {
            "name": {"type": "string", "minLength": 3},
            "level": {"$ref": "#/$defs/level"},
            "score": {"type": "number", "minimum": 10, "maximum": 20},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3},
            "nested": {
                "type": "object",
                "properties": {"n": {"type": ["integer", "null"]}},
                "required": ["n"],
            },
            "maybe": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
        },
        "required": ["name", "level", "score", "ok", "tags", "nested", "maybe"],
        "additionalProperties": False,
    }
    body = {
        **user("Describe the item. The level is high and ok is false."),
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    }
    value = json.loads(ask(body).content)
    _validate(value, schema, schema)
    assert value["level"] == "high" and value["ok"] is False


def test_needle_records_and_passphrase() -> None:
    filler = " ".join(["the river and the garden"] * 3000)
    prompt = (
        f"Three records are hidden below. RECORD alpha=11112222. {filler} RECORD beta=33334444. {filler} "
        "RECORD gamma=55556666. Return the three recorded values as a JSON object with string values."
    )
    reply = ask(user(prompt))
    assert json.loads(reply.content) == {"alpha": "11112222", "beta": "33334444", "gamma": "55556666"}
    planted = (
        f"{filler} The secret passphrase is violet-otter-seventeen. {filler}\nWhat is the secret passphrase?"
    )
    assert "violet-otter-seventeen" in ask(user(planted)).content
    lost = ask(user(planted), Knobs(faults=frozenset({"lose-needle"}))).content
    assert "violet-otter-seventeen" not in lost


def test_prompt_tokens_follow_the_documented_tokenizer() -> None:
    assert tokenizer.count(" the" * 1000) == 1000
    assert tokenizer.count("12345678") == 2 and tokenizer.count("f(x)") == 4
    text = "Hello,  world! Überraschung\n"
    assert "".join(tokenizer.pieces(text)) == text
    prompt = read_prompt([{"role": "user", "content": " the" * 1000}])
    assert 1000 < prompt.prompt_tokens < 1010


def test_plain_text_is_deterministic_and_exactly_the_budget() -> None:
    body = user("Write a short story about a lighthouse.")
    a, b = ask(body, max_tokens=200), ask(body, max_tokens=200)
    assert a.content == b.content and tokenizer.count(a.content) == 200 and a.finish_reason == "length"
    unstable = Knobs(faults=frozenset({"unstable-output"}))
    responder = Responder(unstable, "m")
    prompt = read_prompt(body["messages"])
    assert responder.reply(body, prompt, 50).content != responder.reply(body, prompt, 50).content
    for n in (1, 2, 17, 256):
        assert tokenizer.count(pseudo_text("seed", n)) == n


def test_ignore_eos_pads_short_answers_and_budget_cuts() -> None:
    body = {**user("What is 2+2? Only the number."), "ignore_eos": True}
    padded = ask(body, max_tokens=50)
    assert padded.content.startswith("4 ") and tokenizer.count(padded.content) == 50
    cut = ask(user("Return the tale. " + "What is 2+2?"), max_tokens=2)
    assert tokenizer.count(cut.content) == 2 and cut.finish_reason == "length"


def test_garbage_at_batch_fault_only_under_load() -> None:
    knobs = Knobs(faults=frozenset({"garbage-at-batch"}))
    body = user("What is 17 times 19? Return only the integer.")
    assert ask(body, knobs, running=2).content == "323"
    assert ask(body, knobs, running=3).content != "323"


# --- images ------------------------------------------------------------------------------------


def _png(width: int, height: int, pixel: Any, filter_type: int, colour_type: int = 2) -> bytes:
    """Encode with a given row filter (all five are exercised) to test the decoder."""
    channels = {2: 3, 6: 4}[colour_type]
    rows = [bytes(v for x in range(width) for v in pixel(x, y)[:channels]) for y in range(height)]
    out = bytearray()
    prev = bytes(len(rows[0]))
    for row in rows:
        filtered = bytearray()
        for i, value in enumerate(row):
            left = row[i - channels] if i >= channels else 0
            up = prev[i]
            upleft = prev[i - channels] if i >= channels else 0
            predictor = [0, left, up, (left + up) // 2, images._paeth(left, up, upleft)][filter_type]
            filtered.append((value - predictor) & 0xFF)
        out += bytes([filter_type]) + filtered
        prev = row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0)
    return (
        images.PNG_SIGNATURE
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(out)))
        + chunk(b"IEND", b"")
    )


def _scene(x: int, y: int) -> tuple[int, int, int, int]:
    if 10 <= x < 40 and 10 <= y < 40:
        return (220, 30, 30, 255)  # red square
    if (x - 75) ** 2 + (y - 25) ** 2 <= 15**2:
        return (30, 70, 220, 255)  # blue circle
    return (255, 255, 255, 255)


@pytest.mark.parametrize("filter_type", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("colour_type", [2, 6])
def test_png_shapes_and_colours_left_to_right(filter_type: int, colour_type: int) -> None:
    data = _png(100, 50, _scene, filter_type, colour_type)
    info = images.analyse("data:image/png;base64," + base64.b64encode(data).decode(), 1)
    assert (info.width, info.height, info.background) == (100, 50, "white")
    assert [(s.colour, s.kind) for s in info.shapes] == [("red", "square"), ("blue", "circle")]


def test_images_in_a_chat_are_counted_and_described() -> None:
    url = "data:image/png;base64," + base64.b64encode(_png(100, 50, _scene, 4)).decode()
    parts = [{"type": "image_url", "image_url": {"url": url}}] * 2 + [
        {"type": "text", "text": "What do you see?"}
    ]
    reply = ask({"messages": [{"role": "user", "content": parts}]})
    assert (
        reply.content.startswith("I see 2 images.")
        and reply.content.count("a red square, a blue circle") == 2
    )
    prompt = read_prompt([{"role": "user", "content": parts}])
    assert prompt.prompt_tokens >= 2 * 256
    assert ask(
        {"messages": [{"role": "user", "content": parts}]}, Knobs(faults=frozenset({"blind"}))
    ).content == ("I do not see any image.")
    remote = images.analyse("https://example.org/cat.png", 3)
    assert "not fetched" in remote.describe()


def test_malformed_requests_are_refused() -> None:
    for messages in (None, [], [{"content": "no role"}], [{"role": "user", "content": [{"type": "video"}]}]):
        with pytest.raises(RequestError):
            read_prompt(messages)


def _probe(prompt: str, pngs: list[bytes]) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
    for png in pngs:
        url = "data:image/png;base64," + base64.b64encode(png).decode()
        content.append({"type": "image_url", "image_url": {"url": url}})
    return {"messages": [{"role": "user", "content": content}]}


def test_r4_vision_probes_are_answered_from_the_probe_file() -> None:
    """The simulator reads sparkctl's probe file (not sparkctl): the drawn images' digests give the
    printed codes; the shapes are read from the pixels below the print."""
    from sparkctl.qa import images as drawn
    from sparkctl.qa import probedata

    vision = probedata.r4()["vision"]
    one = ask(_probe(vision["single"]["prompt"], [drawn.one_image().png])).content
    assert json.loads(one) == vision["single"]["expected"]
    four = ask(_probe(vision["four"]["prompt"], [f.png for f in drawn.four_images()])).content
    assert json.loads(four) == vision["four"]["expected"]
    wrong = ask(_probe(vision["four"]["prompt"], [f.png for f in drawn.four_images()]),
                Knobs(faults=frozenset({"misread-code"}))).content
    assert json.loads(wrong) == ["NORTH 7315", "SOUTH 8266", "EAST 1949", "WEST 5621"]
    # an image it does not recognise has no code to read
    other = drawn.draw("NORTH 7314", (), 960, 640)
    assert json.loads(ask(_probe(vision["four"]["prompt"], [other])).content) == [None]
