"""A loopback HTTP/1.1 server that answers every request with a script: raw bytes sent in the given
pieces (a float in the script is a pause in seconds), then the connection closed. It records each
request's headers and JSON body. For clients that read a streamed answer as it arrives."""

from __future__ import annotations

import json
import socketserver
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

Script = Sequence[bytes | float]


def chunked(payloads: Sequence[bytes], status: int = 200, end: bool = True) -> list[bytes]:
    """A response head with chunked transfer coding and one chunk per payload (and the last, zero-size
    chunk unless ``end`` is off: the connection then closes mid-body)."""
    head = f"HTTP/1.1 {status} OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    body = [b"%x\r\n%s\r\n" % (len(p), p) for p in payloads]
    return [head.encode(), *body, *([b"0\r\n\r\n"] if end else [])]


def sse(events: Sequence[Any]) -> list[bytes]:
    """``data:`` events (JSON objects encoded, bytes as they are), each its own chunk, then [DONE]."""
    out = [b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events]
    return [*out, b"data: [DONE]\n\n"]


def plain(status: int, body: bytes, reason: str = "Error") -> list[bytes]:
    """A whole answer with a Content-Length."""
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n")
    return [head.encode() + body]


class ScriptedServer:
    def __init__(self, answer: Callable[[dict[str, Any]], Script]) -> None:
        self.answer = answer
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        server = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self.request.settimeout(10)
                headers: dict[str, str] = {}
                self.rfile.readline()  # the request line
                while (line := self.rfile.readline().decode("latin-1").strip()):
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = json.loads(self.rfile.read(int(headers.get("content-length", "0"))) or b"{}")
                server.requests.append((headers, body))
                for piece in server.answer(body):
                    if isinstance(piece, float):
                        time.sleep(piece)
                        continue
                    self.wfile.write(piece)
                    self.wfile.flush()

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True

    @property
    def root(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}"

    @contextmanager
    def running(self) -> Iterator[ScriptedServer]:
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()


@contextmanager
def scripted(answer: Callable[[dict[str, Any]], Script]) -> Iterator[ScriptedServer]:
    with ScriptedServer(answer).running() as server:
        yield server
