"""One streamed chat request and its timing: the record (``RequestTiming``), the call that measures
it (``stream_one``) and the statistics every report quotes. The ladder (``bench``) and the prefill
sweep (``prefill``) both measure with these, so neither imports the other for them.

Timed requests do not go through the OpenAI client or httpx: each per-chunk layer of those (pydantic
chunk models, httpcore/h11 events, anyio cancel scopes, a task switch per chunk) cost the client a
share of a timed window that grew with the tokens streamed (``bench/client_overhead.py``: 10 % of a
core at C16 through the OpenAI client, 5 % through a bare httpx reader). ``stream_one`` writes the
request on a connection of its own and reads the answer in asyncio's protocol callbacks: the chunked
coding (``ChunkedDecoder``), the events (``SSEParser``) and the fields timed (``_Reading``), one
clock reading per read. It connects to rank 0 directly: no HTTP proxy from the environment (one
would sit inside every timed window).

Why its own HTTP reading rather than a well-kept library's: aiohttp (3.14, llhttp's C parser), read
with the least per-chunk work (one session, a connection per request, one ``readany()`` and one clock
reading per read into the same ``SSEParser`` and ``_Reading``), passes every test of this path but
costs what this reader does not: an awaited future and a task switch per read, and a ``sock_read``
timer cancelled and set again per read. Same runs of ``bench/client_overhead.py`` (C16 × 256 tokens
on the simulator, 5 rounds each, share of the timed window, medians): this reader 1.69 / 1.73 /
1.93 %, aiohttp 2.89 / 2.64 / 2.72 %, raw httpx 6.04 / 5.66 / 5.78 %; CPU per token 42 / 43 / 49 µs,
72 / 66 / 68 µs and 152 / 143 / 148 µs. aiohttp misses the < 2 % goal by 0.6–0.9 points and adds
0.8–1.2 points to this reader's share (per-round medians); without its read timer (a timeout then
kept by hand) it still took ~2.3 %. The HTTP read here is small and bounded: a response head
(status and framing headers only), the chunked coding (``ChunkedDecoder``), a body framed by its
length or the close; everything else (TLS, connecting) is asyncio's. The aiohttp column of
``bench/client_overhead.py`` keeps the comparison measured.
"""

from __future__ import annotations

import asyncio
import json
import math
import ssl
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from sparkctl.qa.endpoint import Endpoint


# ------------------------------------------------------------------------------------------ metrics
def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0–100) with linear interpolation between closest ranks (NumPy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError("p must be within 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def stats(values: Sequence[float], digits: int = 3) -> dict[str, Any]:
    """mean (what the publications quote), min/median/max, and every sample in measured order."""
    if not values:
        raise ValueError("statistics of no values")
    return {
        "mean": round(statistics.fmean(values), digits),
        "min": round(min(values), digits),
        "median": round(statistics.median(values), digits),
        "max": round(max(values), digits),
        "n": len(values),
        "samples": [round(v, digits) for v in values],
    }


@dataclass
class RequestTiming:
    """One streamed request, times from ``time.perf_counter``."""

    sent: float
    first_token: float | None
    done: float
    completion_tokens: int
    prompt_tokens: int
    error: str | None = None
    last_token: float | None = None  # the last chunk that carried content (sparkDash's window end)
    finish_reason: str | None = None  # the stream's last finish_reason (length, stop, …)

    @property
    def ok(self) -> bool:
        return self.error is None and self.first_token is not None and self.completion_tokens > 0

    @property
    def ttft(self) -> float:
        return (self.first_token or self.done) - self.sent

    @property
    def e2e(self) -> float:
        return self.done - self.sent

    @property
    def last(self) -> float:
        return self.last_token if self.last_token is not None else self.done

    @property
    def decode_tps(self) -> float:
        """(completion_tokens − 1) / (end − first token): the first token belongs to prefill."""
        window = self.done - (self.first_token or self.done)
        return (self.completion_tokens - 1) / window if window > 0 and self.completion_tokens > 1 else 0.0


# ------------------------------------------------------------------------------------------ streams
class SSEParser:
    """Server-sent events from bytes as they arrive: ``feed`` returns the ``(event, data)`` of every
    event its bytes complete (an event ends at a blank line; its ``data:`` lines joined by newlines;
    ``event`` is None unless the event named itself). A line or an event split across reads waits in
    the buffer for its end; comments (``: keep-alive``) and unknown fields are dropped. Line ends are
    ``\\n`` or ``\\r\\n`` (what SGLang and HTTP servers send)."""

    __slots__ = ("_buffer", "_data", "_event")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._event: bytes | None = None

    def feed(self, chunk: bytes) -> list[tuple[str | None, bytes]]:
        buffer = self._buffer + chunk if self._buffer else chunk
        lines = buffer.split(b"\n")
        self._buffer = lines.pop()  # what follows the last newline: a line not complete yet
        events: list[tuple[str | None, bytes]] = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:  # the blank line ends an event
                if self._data:
                    events.append(
                        (None if self._event is None else self._event.decode(), b"\n".join(self._data))
                    )
                self._data, self._event = [], None
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
            elif line.startswith(b"event:"):
                self._event = line[6:].strip()
        return events


class ChunkedDecoder:
    """HTTP/1.1 chunked transfer coding from bytes as they arrive: ``feed`` returns the payload of
    every chunk its bytes complete (a chunk, or its size line, split across reads waits for the rest:
    a streamed server sends one event per chunk, so an event is read when its chunk is whole);
    ``complete`` once the last (zero-size) chunk came."""

    __slots__ = ("_buffer", "complete")

    def __init__(self) -> None:
        self._buffer = b""
        self.complete = False

    def feed(self, data: bytes) -> bytes:
        if self.complete:  # the trailer after the last chunk: nothing more
            return b""
        buffer = self._buffer + data if self._buffer else data
        pos, size, out = 0, len(buffer), []
        while True:
            line_end = buffer.find(b"\r\n", pos)
            if line_end < 0:
                break
            chunk = int(buffer[pos:line_end].partition(b";")[0], 16)  # chunk extensions are ignored
            if chunk == 0:
                self.complete = True
                pos = size
                break
            end = line_end + 2 + chunk
            if end + 2 > size:
                break
            out.append(buffer[line_end + 2 : end])
            pos = end + 2
        self._buffer = buffer[pos:]
        return out[0] if len(out) == 1 else b"".join(out)


@dataclass(frozen=True)
class StreamClient:
    """Where timed requests go: rank 0's chat URL, split once (host, port, path, TLS), the request
    head every request shares (the key in its ``Authorization`` header: never in argv or a log), and
    the timeout for connecting and between two reads (as the OpenAI client's ``timeout``).
    ``close()`` as the OpenAI client's, so a caller closes either the same way (nothing is held
    between requests: each has its own connection)."""

    url: str
    host: str
    port: int
    tls: bool
    head: bytes = field(repr=False)  # the request line and the headers but Content-Length (the key)
    timeout: float
    tls_context: ssl.SSLContext | None = field(default=None, compare=False)  # https only

    async def close(self) -> None:
        return None


def stream_client(endpoint: Endpoint, timeout: float = 600.0) -> StreamClient:
    """The client ``stream_one`` sends with: rank 0's ``/v1/chat/completions``, its key, ``timeout``."""
    url = f"{endpoint.base_url}/chat/completions"
    parts = urlsplit(url)
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    lines = [
        f"POST {parts.path or '/'} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Content-Type: application/json",
        "Accept: text/event-stream",
        "Accept-Encoding: identity",  # the bytes read are the bytes sent: no decoder per chunk
        "Connection: close",
    ]
    if endpoint.api_key:
        lines.append(f"Authorization: Bearer {endpoint.api_key}")
    head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
    context = ssl.create_default_context() if tls else None
    return StreamClient(url, parts.hostname or "", port, tls, head, timeout, context)


# The HTTP status → the error names the OpenAI client raised for them (results keep the same words).
_STATUS_ERRORS = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}


def status_error(status: int, body: bytes) -> str:
    """A refused request in the OpenAI client's words: ``BadRequestError: Error code: 400 - <the
    error's message>`` (its class by status, ``InternalServerError`` from 500, else ``APIStatusError``)."""
    name = _STATUS_ERRORS.get(status) or ("InternalServerError" if status >= 500 else "APIStatusError")
    text = f"Error code: {status}"
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    error = doc.get("error", doc) if isinstance(doc, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if isinstance(message, str) and message:
        text += f" - {message}"
    return f"{name}: {text}"


def event_error(doc: Mapping[str, Any]) -> str:
    """An error event inside the stream (a chunk holding ``error``), as the OpenAI client named it."""
    error = doc.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or not message:
        message = "An error occurred during streaming"
    return f"APIError: {message}"


class _Reading:
    """What one stream has told so far: fed the events of each read with the read's arrival time."""

    __slots__ = ("completion", "ended", "error", "finish_reason", "first", "last", "prompt_tokens")

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.ended: float | None = None  # when ``[DONE]`` arrived
        self.completion = self.prompt_tokens = 0
        self.finish_reason: str | None = None
        self.error: str | None = None

    def take(self, events: list[tuple[str | None, bytes]], now: float) -> None:
        """Read the events of one read, ``now`` the time it arrived."""
        for _, data in events:
            if data == b"[DONE]":
                self.ended = now
                return
            doc = json.loads(data)
            if not isinstance(doc, dict):
                continue
            if doc.get("error"):
                self.error = event_error(doc)
                return
            choices = doc.get("choices")
            if choices:
                choice = choices[0]
                delta = choice.get("delta")
                if delta and (delta.get("content") or delta.get("reasoning_content")):
                    self.last = now
                    if self.first is None:
                        self.first = now
                if choice.get("finish_reason") is not None:
                    self.finish_reason = choice["finish_reason"]
            usage = doc.get("usage")
            if usage:
                self.completion = usage.get("completion_tokens") or 0
                self.prompt_tokens = usage.get("prompt_tokens") or 0


# ------------------------------------------------------------------------------------------ running
FORCE_LENGTH: dict[str, Any] = {"ignore_eos": True}
THINKING_OFF: dict[str, Any] = {"chat_template_kwargs": {"thinking": False}}  # unless ``extra`` says its own


def request_body(
    model: str, prompt: str, max_tokens: int, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The JSON of one streamed chat request: greedy, the usage block asked for, thinking off, and
    ``extra`` beside (default: EOS ignored)."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **THINKING_OFF,
        **(FORCE_LENGTH if extra is None else extra),
    }


_TIMEOUT = "APITimeoutError: Request timed out."
_CONNECTION = "APIConnectionError: Connection error."


class _Exchange(asyncio.Protocol):
    """One request's connection, read as bytes arrive: the response head, then the body (chunked, a
    Content-Length, or to the close); a body below 400 through the SSE parser into ``_Reading`` with one
    clock reading per read, any other kept whole for its error message. ``finished`` resolves once
    ``[DONE]`` came, the body ended, the connection failed or went quiet for ``timeout`` seconds."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self.loop, self.timeout = loop, timeout
        self.finished: asyncio.Future[None] = loop.create_future()
        self.seen = _Reading()
        self.transport: asyncio.Transport | None = None
        self.status = 0  # 0 until the response head came
        self._head = b""
        self._sse = SSEParser()
        self._chunked: ChunkedDecoder | None = None
        self._length: int | None = None  # the body's Content-Length, else None
        self._body: list[bytes] = []  # a refused request's body, for its message
        self._got = 0
        self._active = time.perf_counter()
        self._watch = loop.call_later(timeout, self._quiet)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = self._active = time.perf_counter()
        if self.finished.done():
            return
        try:
            if not self.status:
                data = self._read_head(data)
                if not self.status:
                    return
            if self._chunked is not None:
                data = self._chunked.feed(data)
            self._got += len(data)
            if self.status >= 400:
                self._body.append(data)
            elif data and self.seen.ended is None:
                self.seen.take(self._sse.feed(data), now)
            if self.seen.ended is not None or self.seen.error is not None or self._body_done():
                self._finish(None)
        except Exception as exc:  # a malformed head, chunk or event fails this request, not the run
            self._finish(f"{type(exc).__name__}: {exc}")

    def _read_head(self, data: bytes) -> bytes:
        """The status and the framing headers once the head is whole; what follows it."""
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            return b""
        head, rest = self._head[:end].decode("latin-1"), self._head[end + 4 :]
        lines = head.split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        if 100 <= status < 200:  # an interim answer (100 Continue): the real head follows
            self._head = b""
            return self._read_head(rest)
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "transfer-encoding" and "chunked" in value.lower():
                self._chunked = ChunkedDecoder()
            elif name == "content-length":
                self._length = int(value.strip())
        self.status = status
        return rest

    def _body_done(self) -> bool:
        if self._chunked is not None:
            return self._chunked.complete
        return self._length is not None and self._got >= self._length

    def connection_lost(self, exc: Exception | None) -> None:
        # The body ends with the connection when neither a length nor chunks frame it; otherwise an
        # early close is a broken connection, as httpx (under the OpenAI client) reported it.
        framed = self._chunked is not None or self._length is not None
        self._finish(_CONNECTION if exc is not None or not self.status or framed else None)

    def _quiet(self) -> None:
        idle = time.perf_counter() - self._active
        if idle >= self.timeout:
            self._finish(_TIMEOUT)
        else:
            self._watch = self.loop.call_later(self.timeout - idle, self._quiet)

    def _finish(self, error: str | None) -> None:
        if self.finished.done():
            return
        self._watch.cancel()
        if self.status >= 400:
            error = status_error(self.status, b"".join(self._body))
        if error is not None and self.seen.error is None and self.seen.ended is None:
            self.seen.error = error
        self.finished.set_result(None)
        if self.transport is not None:
            self.transport.close()


async def stream_one(
    client: StreamClient, model: str, prompt: str, max_tokens: int, extra: Mapping[str, Any] | None = None
) -> RequestTiming:
    """Send one streamed chat request for ``max_tokens`` tokens and time it. ``extra``: the fields sent
    beside the prompt (default: EOS ignored; a workload passes what its publisher's client sends, e.g.
    nothing for the community runner, ``min_tokens``/``ignore_eos``/``stop``/``top_p`` for sparkDash);
    thinking is off, through ``chat_template_kwargs`` as ``extra`` words it (each client has its own
    keys) or ``{"thinking": false}``.

    The request has a connection of its own, read by asyncio's protocol callbacks as bytes arrive
    (no per-chunk task switch, stream object or pydantic model: the client's CPU per token stays a
    small share of a timed window, ``bench/client_overhead.py``): one clock reading per read, every
    content (or reasoning) delta of that read timed by it; the usage block gives the token counts.
    ``sent`` is taken once the connection is open, as the request is written. A refused request, a
    timeout, a broken connection or an error event ends the timing with the error in the OpenAI
    client's words (``BadRequestError: Error code: 400 - …``, ``APITimeoutError``,
    ``APIConnectionError``, ``APIError``)."""
    body = json.dumps(request_body(model, prompt, max_tokens, extra)).encode()
    loop = asyncio.get_running_loop()
    exchange = _Exchange(loop, client.timeout)
    sent = time.perf_counter()
    try:
        await asyncio.wait_for(
            loop.create_connection(
                lambda: exchange,
                client.host,
                client.port,
                ssl=client.tls_context,
            ),
            client.timeout,
        )
        sent = time.perf_counter()
        assert exchange.transport is not None
        exchange.transport.write(client.head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await exchange.finished
    except TimeoutError:
        exchange.seen.error = _TIMEOUT
    except OSError:
        exchange.seen.error = _CONNECTION
    finally:
        exchange._finish(None)  # closes the connection (a cancelled run leaves none open)
    seen = exchange.seen
    done = seen.ended if seen.ended is not None and seen.error is None else time.perf_counter()
    error = seen.error
    if error is None:
        if seen.first is None:
            error = "no content was streamed"
        elif seen.completion == 0:
            error = "the stream carried no usage block (stream_options.include_usage)"
    return RequestTiming(
        sent, seen.first, done, seen.completion, seen.prompt_tokens, error, seen.last, seen.finish_reason
    )


__all__ = [
    "ChunkedDecoder",
    "RequestTiming",
    "SSEParser",
    "StreamClient",
    "percentile",
    "request_body",
    "stats",
    "status_error",
    "stream_client",
    "stream_one",
]
