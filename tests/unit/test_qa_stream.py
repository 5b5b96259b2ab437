"""The timed request path: the SSE parser and the chunked coding on recorded streams split at every
byte, and ``stream_one`` against a loopback server that sends recorded answers in pieces (what it
measures, what it sends, and the errors it names as the OpenAI client named them)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from support.sse_server import ScriptedServer, chunked, plain, scripted, sse

from sparkctl.qa.endpoint import Endpoint
from sparkctl.qa.request import ChunkedDecoder, SSEParser, stream_client, stream_one


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """A chat.completion.chunk as SGLang 0.5 streams it."""
    return {"id": "r1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"role": None, "reasoning_content": None, "tool_calls": None,
                                               **delta},
                         "logprobs": None, "finish_reason": finish, "matched_stop": None}],
            "usage": None}


USAGE = {"id": "r1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
         "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}

# A recorded stream: the role chunk (empty content), a reasoning delta, two content deltas, the
# finish chunk, the usage chunk, a keep-alive comment, [DONE]; CRLF line ends in one event.
EVENTS = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"reasoning_content": "hmm"}),
    _chunk({"content": "Hel"}),
    _chunk({"content": "lo"}),
    _chunk({}, "length"),
    USAGE,
]
RECORDED = (
    b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in EVENTS[:3])
    + b": keep-alive\n\n"
    + b"data: " + json.dumps(EVENTS[3]).encode() + b"\r\n\r\n"
    + b"\n"  # a stray blank line: no event
    + b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in EVENTS[4:])
    + b"data: [DONE]\n\n"
)


def _parse(pieces: Sequence[bytes]) -> list[tuple[str | None, bytes]]:
    parser = SSEParser()
    return [event for piece in pieces for event in parser.feed(piece)]


def test_the_parser_gives_every_event_of_a_recorded_stream() -> None:
    events = _parse([RECORDED])
    assert [json.loads(d) for _, d in events[:-1]] == EVENTS
    assert events[-1] == (None, b"[DONE]")
    assert all(name is None for name, _ in events)


def test_an_event_split_across_reads_at_any_byte_is_the_same_event() -> None:
    whole = _parse([RECORDED])
    for cut in range(1, len(RECORDED)):
        assert _parse([RECORDED[:cut], RECORDED[cut:]]) == whole, cut
    assert _parse([RECORDED[i:i + 7] for i in range(0, len(RECORDED), 7)]) == whole


def test_named_events_multiline_data_and_a_line_without_its_end_yet() -> None:
    parser = SSEParser()
    assert parser.feed(b'event: error\ndata: {"error":\ndata:  {"message": "x"}}\n') == []  # not ended
    assert parser.feed(b"\n") == [("error", b'{"error":\n {"message": "x"}}')]
    assert parser.feed(b"id: 7\nretry: 10\ndata:[DONE]") == []  # unknown fields dropped; line not ended
    assert parser.feed(b"\n\n") == [(None, b"[DONE]")]


def test_the_chunked_coding_is_read_whatever_the_reads_split() -> None:
    payloads = [b"data: x\n\n", b"y" * 300, b"z"]
    wire = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"
    for cut in range(1, len(wire)):
        decoder = ChunkedDecoder()
        assert decoder.feed(wire[:cut]) + decoder.feed(wire[cut:]) == b"".join(payloads), cut
        assert decoder.complete
    decoder = ChunkedDecoder()
    assert b"".join(decoder.feed(wire[i : i + 1]) for i in range(len(wire))) == b"".join(payloads)
    with_extension = ChunkedDecoder()
    assert with_extension.feed(b"3;name=value\r\nabc\r\n") == b"abc" and not with_extension.complete


def _endpoint(server: ScriptedServer, key: str = "sk-secret") -> Endpoint:
    return Endpoint(server.root, key, "m", False)


def _run(server: ScriptedServer, timeout: float = 10.0, **kwargs: Any) -> Any:
    client = stream_client(_endpoint(server), timeout=timeout)
    return asyncio.run(stream_one(client, "m", "Say hello.", 3, **kwargs))


def _pieces(script: list[bytes], size: int) -> list[bytes | float]:
    """The same bytes in ``size``-byte pieces, a pause between them (each its own read)."""
    wire = b"".join(script)
    out: list[bytes | float] = []
    for i in range(0, len(wire), size):
        out += [wire[i : i + size], 0.002]
    return out


RECORDED_EVENTS = sse(EVENTS)


def test_stream_one_measures_a_stream_split_across_reads() -> None:
    with scripted(lambda body: _pieces(chunked(RECORDED_EVENTS), 50)) as server:
        t = _run(server)
    assert t.ok and t.error is None
    assert (t.completion_tokens, t.prompt_tokens, t.finish_reason) == (3, 12, "length")
    # The reasoning delta is the first token (the role chunk's empty content is not); the last content
    # delta is the window's end; [DONE] ends the request.
    assert t.sent < t.first_token < t.last_token <= t.done
    assert t.ttft == t.first_token - t.sent and t.decode_tps > 0


def test_one_clock_reading_per_read_times_every_token_of_that_read() -> None:
    with scripted(lambda body: [b"".join(chunked(RECORDED_EVENTS))]) as server:
        t = _run(server)
    assert t.ok and t.first_token == t.last_token == t.done


def test_keep_alive_comments_and_blank_lines_are_not_tokens() -> None:
    events = [b": keep-alive\n\n", *RECORDED_EVENTS[:2], b"\n", b": ping\n\n", *RECORDED_EVENTS[2:]]
    with scripted(lambda body: chunked(events)) as server:
        t = _run(server)
    assert t.ok and t.completion_tokens == 3


def test_the_request_sends_the_body_and_the_key_in_a_header_only() -> None:
    with scripted(lambda body: chunked(RECORDED_EVENTS)) as server:
        assert _run(server, extra={"min_tokens": 3, "ignore_eos": True}).ok
        (headers, body), = server.requests
    assert headers["authorization"] == "Bearer sk-secret"
    assert headers["host"] == server.root.removeprefix("http://")
    assert headers["accept-encoding"] == "identity" and headers["content-type"] == "application/json"
    assert "sk-secret" not in json.dumps(body)
    assert body == {"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 3,
                    "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
                    "chat_template_kwargs": {"thinking": False}, "min_tokens": 3, "ignore_eos": True}
    keyless = stream_client(Endpoint("http://127.0.0.1:1", "", "m", False))
    assert b"authorization" not in keyless.head.lower() and b"POST /v1/chat/completions " in keyless.head


def test_a_body_framed_by_its_length_or_the_close_is_read_as_a_chunked_one() -> None:
    wire = b"".join(RECORDED_EVENTS)
    length = f"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {len(wire)}\r\n\r\n"
    to_close = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    for head in (length, to_close):
        with scripted(lambda body, head=head: _pieces([head.encode(), wire], 64)) as server:
            t = _run(server)
        assert t.ok and (t.completion_tokens, t.finish_reason) == (3, "length"), head


def test_rank_0_is_reached_directly_whatever_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A proxy would sit inside every timed window.
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:1")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with scripted(lambda body: chunked(RECORDED_EVENTS)) as server:
        t = _run(server)
    assert t.ok and len(server.requests) == 1


def test_a_stream_without_content_or_usage_fails_with_the_reason() -> None:
    with scripted(lambda body: chunked(sse([_chunk({"role": "assistant", "content": ""})]))) as server:
        t = _run(server)
    assert not t.ok and t.error == "no content was streamed"
    with scripted(lambda body: chunked(sse(EVENTS[:-1]))) as server:
        t = _run(server)
    assert not t.ok and t.error == "the stream carried no usage block (stream_options.include_usage)"


ERROR_EVENT = [EVENTS[2], {"error": {"message": "the request was aborted", "code": 500}}]

FAILURES: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    ("400", lambda b: plain(400, json.dumps({"object": "error", "message": "min_tokens > max_tokens",
                                               "type": "BadRequestError", "code": 400}).encode()),
     "BadRequestError: Error code: 400 - min_tokens > max_tokens"),
    ("401", lambda b: plain(401, b'{"error": {"message": "Unauthorized"}}'),
     "AuthenticationError: Error code: 401 - Unauthorized"),
    ("404 text", lambda b: plain(404, b"no such route"), "NotFoundError: Error code: 404"),
    ("429 chunked", lambda b: chunked([b"{}"], status=429), "RateLimitError: Error code: 429"),
    ("503", lambda b: plain(503, b'{"message": "lost node_rank 2"}'),
     "InternalServerError: Error code: 503 - lost node_rank 2"),
    ("418", lambda b: plain(418, b""), "APIStatusError: Error code: 418"),
    ("error event", lambda b: chunked(sse(ERROR_EVENT)), "APIError: the request was aborted"),
    ("quiet", lambda b: [chunked([])[0], 3.0], "APITimeoutError: Request timed out."),
    ("cut mid-body", lambda b: chunked(sse(EVENTS[:3]), end=False)[:-1],
     "APIConnectionError: Connection error."),
    ("no answer", lambda b: [], "APIConnectionError: Connection error."),
]


# Both clients get 1 s: beside the lab tests a starved machine let the OpenAI client's timeout pass
# before the server's closing reached it ("no answer" read as a timeout). `make test` runs it first, alone.
@pytest.mark.timing
@pytest.mark.parametrize(("case", "answer", "expected"), FAILURES, ids=[f[0] for f in FAILURES])
def test_failures_are_named_as_the_openai_client_named_them(
    case: str, answer: Callable[[dict[str, Any]], Any], expected: str
) -> None:
    with scripted(answer) as server:
        t = _run(server, timeout=1.0)
        assert not t.ok and t.error == expected
        # The same answer to the OpenAI client (what the timed path used before): the same words.
        openai = pytest.importorskip("openai")

        async def through_openai() -> str:
            client = openai.AsyncOpenAI(base_url=f"{server.root}/v1", api_key="k", max_retries=0, timeout=1.0)
            try:
                stream = await client.chat.completions.create(model="m", messages=[], stream=True)
                async for _ in stream:
                    pass
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}"
            finally:
                await client.close()
            return "no error"

        assert asyncio.run(through_openai()) == expected


def test_nothing_listening_is_a_connection_error() -> None:
    with scripted(lambda body: []) as server:
        endpoint = _endpoint(server)
    t = asyncio.run(stream_one(stream_client(endpoint, timeout=5), "m", "hi", 3))
    assert not t.ok and t.error == "APIConnectionError: Connection error."


def test_a_malformed_event_fails_the_request_not_the_run() -> None:
    with scripted(lambda body: chunked([b"data: {not json\n\n"])) as server:
        t = _run(server)
    assert not t.ok and t.error is not None and t.error.startswith("JSONDecodeError: ")


def test_a_cancelled_request_leaves_no_connection_open() -> None:
    with scripted(lambda body: [chunked([])[0], 5.0]) as server:

        async def cancel() -> None:
            task = asyncio.create_task(stream_one(stream_client(_endpoint(server)), "m", "hi", 3))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0)
            assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

        asyncio.run(cancel())
