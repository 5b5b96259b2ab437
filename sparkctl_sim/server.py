"""HTTP side of a simulated rank: SGLang's endpoints on ``--host:--port`` (http.server, threads).

Rank 0 serves the OpenAI-compatible API and the control endpoints; the other ranks serve only the
dummy health endpoints SGLang's non-zero ranks serve (``/health``, ``/ping``, ``/health_generate``,
plus ``/metrics`` with ``--enable-metrics``), which answer 200 once the rank finished loading.

Size: one module on purpose — the HTTP handler's routes share its request parsing and streaming.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from sparkctl_sim import SGLANG_VERSION, tokenizer
from sparkctl_sim.metrics import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS, Histogram
from sparkctl_sim.model import Reply
from sparkctl_sim.prompt import Prompt, RequestError, read_prompt

if TYPE_CHECKING:
    from sparkctl_sim.rank import RankProcess

AUTH_EXEMPT = ("/health", "/ready", "/metrics")
BATCH_WINDOW_S = 0.05
ENV_PREFIXES = ("SGLANG_", "SGL_", "NCCL_", "GLOO_", "TP_SOCKET", "CUDA_", "SPARKCTL_SIM_")


class Scheduler:
    """Admission control: at most ``max_running`` requests decode at once, the rest wait in FIFO order."""

    def __init__(self, max_running: int) -> None:
        self.max_running = max_running
        self.running = 0
        self.waiting = 0
        self._cond = threading.Condition()
        self._next_ticket = 0
        self._serving = 0
        # One engine prefills one request at a time: concurrent arrivals queue for it, so TTFT grows
        # with concurrency as on a real server (M1: 270 ms at C4, 2.70 s at C8).
        self.prefill_lock = threading.Lock()
        self.requests_total = 0
        self.errors_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.ttft_hist = Histogram(TTFT_BUCKETS)
        self.itl_hist = Histogram(ITL_BUCKETS)
        self.e2e_hist = Histogram(E2E_BUCKETS)
        self.finished = 0
        self.last_gen_throughput = 0.0

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        with self._cond:
            ticket = self._next_ticket
            self._next_ticket += 1
            self.waiting += 1
            while ticket != self._serving or self.running >= self.max_running:
                self._cond.wait()
            self.waiting -= 1
            self.running += 1
            self._serving += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self.running -= 1
                self._cond.notify_all()

    def count_request(self) -> None:
        with self._cond:
            self.requests_total += 1

    def count_error(self) -> None:
        with self._cond:
            self.errors_total += 1

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self.running + self.waiting

    def record(
        self, prompt_tokens: int, completion_tokens: int, ttft: float, e2e: float, decode_s: float
    ) -> None:
        with self._cond:
            self.finished += 1
            self.prompt_tokens_total += prompt_tokens
            self.generation_tokens_total += completion_tokens
            self.ttft_hist.observe(ttft)
            self.e2e_hist.observe(e2e)
            if decode_s > 0 and completion_tokens > 1:
                self.last_gen_throughput = (completion_tokens - 1) / decode_s
                self.itl_hist.observe(decode_s / (completion_tokens - 1), completion_tokens - 1)

    def kv_used_tokens(self, capacity: int) -> int:
        """KV tokens the running requests hold: each as long as the mean finished request so far."""
        with self._cond:
            mean = (self.prompt_tokens_total + self.generation_tokens_total) / max(1, self.finished)
            return min(capacity, int(self.running * mean)) if capacity else 0


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], rank: RankProcess) -> None:
        self.rank = rank
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Handler(BaseHTTPRequestHandler):
    server: SimHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "sparkctl-sim-rank"

    # -- plumbing -------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        if os.environ.get("SPARKCTL_SIM_ACCESS_LOG"):
            self.server.rank.log.info("http " + (format % args))

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Sparkctl-Simulator", "1")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _text(self, status: int, text: str) -> None:
        self._send(status, text.encode(), "text/plain; charset=utf-8")

    def _error(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        self._json(
            status, {"object": "error", "message": message, "type": kind, "param": None, "code": status}
        )

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _authorized(self, path: str) -> bool:
        key = self.server.rank.cfg.api_key
        if not key or path.startswith(AUTH_EXEMPT):
            return True
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())

    # -- routing --------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._route("GET")

    def do_HEAD(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        rank = self.server.rank
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        body = self._read_body() if method == "POST" else b""
        if not rank.cfg.is_head:
            self._worker_route(method, path)
            return
        if not self._authorized(path):
            self._json(401, {"error": "Unauthorized"})
            return
        get_routes = {
            "/health": self._health,
            "/health_generate": self._health_generate,
            "/ping": self._ping,
            "/ready": self._ready,
            "/server_info": self._server_info,
            "/get_server_info": self._server_info,
            "/model_info": self._model_info,
            "/get_model_info": self._model_info,
            "/v1/models": self._models,
            "/metrics": self._metrics,
            "/v1/loads": self._loads,
        }
        if method == "GET" and path in get_routes:
            get_routes[path]()
        elif method == "GET" and path.startswith("/v1/models/"):
            self._model_card(path[len("/v1/models/") :])
        elif method == "POST" and path == "/v1/chat/completions":
            self._chat(body)
        elif path in get_routes or path == "/v1/chat/completions":
            self._error(405, f"method {method} not allowed on {path}", "MethodNotAllowed")
        else:
            self._error(
                404,
                f"no route {path} (the simulator serves the SGLang endpoints sparkctl uses)",
                "NotFoundError",
            )

    def _worker_route(self, method: str, path: str) -> None:
        rank = self.server.rank
        if method == "GET" and path in ("/health", "/ping", "/health_generate"):
            if rank.booted.is_set():
                self._text(200, "OK")
            else:
                self._text(503, f"node_rank {rank.cfg.node_rank} not ready: {rank.status_reason()}")
        elif method == "GET" and path == "/metrics" and rank.cfg["enable_metrics"]:
            self._send(200, rank.metrics_text().encode(), "text/plain; version=0.0.4")
        else:
            self._text(404, "Not Found")

    # -- control endpoints ----------------------------------------------------------------------

    def _health(self) -> None:
        rank = self.server.rank
        plain = os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "1").lower() in ("0", "false")
        if plain and rank.up.is_set() and not rank.exiting.is_set():
            self._text(200, "")
            return
        self._health_generate()

    def _health_generate(self) -> None:
        problem = self.server.rank.health_problem()
        if problem:
            self._text(503, problem)
        else:
            self._text(200, "")

    def _ping(self) -> None:
        problem = self.server.rank.health_problem()
        self._text(503 if problem else 200, problem or "")

    def _ready(self) -> None:
        problem = self.server.rank.health_problem()
        self._text(503 if problem else 200, problem or "OK")

    def _server_info(self) -> None:
        self._json(200, self.server.rank.server_info())

    def _model_info(self) -> None:
        cfg = self.server.rank.cfg
        self._json(
            200,
            {
                "model_path": cfg["model_path"],
                "tokenizer_path": cfg["tokenizer_path"],
                "is_generation": True,
                "served_model_name": cfg.served_model_name,
                "simulator": True,
            },
        )

    def _card(self) -> dict[str, Any]:
        cfg = self.server.rank.cfg
        return {
            "id": cfg.served_model_name,
            "object": "model",
            "created": int(self.server.rank.started_wall),
            "owned_by": "sglang",
            "root": cfg.served_model_name,
            "max_model_len": cfg.context_length,
        }

    def _models(self) -> None:
        self._json(200, {"object": "list", "data": [self._card()]})

    def _model_card(self, name: str) -> None:
        if name != self.server.rank.cfg.served_model_name:
            self._json(
                404,
                {
                    "error": {
                        "message": f"The model '{name}' does not exist",
                        "type": "NotFoundError",
                        "code": "model_not_found",
                    }
                },
            )
            return
        self._json(200, self._card())

    def _metrics(self) -> None:
        rank = self.server.rank
        if not rank.cfg["enable_metrics"]:  # SGLang mounts /metrics only with --enable-metrics
            self._error(404, "metrics are off (start with --enable-metrics)", "NotFoundError")
            return
        self._send(200, rank.metrics_text().encode(), "text/plain; version=0.0.4")

    def _loads(self) -> None:
        # SGLang's shape: one entry per data-parallel rank under "loads" (what R4's repeat client
        # reads before and after a suite: every entry's running and waiting counts at zero), and
        # the same counts flat for one engine.
        sched = self.server.rank.sched
        entry = {"dp_rank": 0, "num_running_reqs": sched.running, "num_waiting_reqs": sched.waiting}
        self._json(
            200,
            {
                "num_running_reqs": sched.running,
                "num_waiting_reqs": sched.waiting,
                "max_running_requests": sched.max_running,
                "dp_rank_count": 1,
                "loads": [entry],
                "simulator": True,
            },
        )

    # -- chat completions -----------------------------------------------------------------------

    def _chat(self, raw: bytes) -> None:
        rank = self.server.rank
        sched = rank.sched
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            self._error(400, "request body is not valid JSON")
            return
        if not isinstance(body, dict):
            self._error(400, "request body must be a JSON object")
            return
        if rank.exiting.is_set():
            self._error(503, "the server is shutting down", "ServiceUnavailable")
            return
        problem = rank.health_problem()
        if problem:
            self._error(503, f"the server is not ready: {problem}", "ServiceUnavailable")
            return
        sched.count_request()
        try:
            prompt = read_prompt(body.get("messages"), body.get("tools"))
            max_tokens = self._max_tokens(body, prompt)
        except RequestError as exc:
            sched.count_error()
            self._error(400, str(exc))
            return
        stream = bool(body.get("stream"))
        started = time.monotonic()
        request_id = "chatcmpl-" + secrets.token_hex(12)
        if stream:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("X-Sparkctl-Simulator", "1")
            self.end_headers()
        try:
            with sched.slot():
                time.sleep(rank.knobs.ttft_s)
                with sched.prefill_lock:
                    time.sleep(prompt.prompt_tokens / rank.knobs.prefill_rate)
                if rank.knobs.has("garbage-at-batch"):
                    # one scheduler step: requests arriving together are batched together
                    time.sleep(BATCH_WINDOW_S)
                try:
                    reply = rank.responder.reply(body, prompt, max_tokens, running=sched.running)
                except RequestError as exc:
                    sched.count_error()
                    if stream:
                        self._chunk(_sse({"object": "error", "message": str(exc), "code": 400}))
                        self._chunk(b"data: [DONE]\n\n")
                        self._chunk(b"")
                    else:
                        self._error(400, str(exc))
                    return
                first = time.monotonic()
                if stream:
                    last = self._stream(body, request_id, reply, prompt, first)
                else:
                    last = self._pace(len(self._units(reply)), first)
        except (BrokenPipeError, ConnectionResetError):
            return
        completion = self._completion_tokens(reply)
        sched.record(prompt.prompt_tokens, completion, first - started, last - started, last - first)
        if not stream:
            self._json(
                200,
                {
                    "id": request_id,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": rank.cfg.served_model_name,
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": reply.content,
                                "reasoning_content": None,
                                "tool_calls": reply.tool_calls,
                            },
                            "logprobs": None,
                            "finish_reason": reply.finish_reason,
                            "matched_stop": None,
                        }
                    ],
                    "usage": self._usage(prompt, completion),
                },
            )

    def _max_tokens(self, body: dict[str, Any], prompt: Prompt) -> int:
        cfg = self.server.rank.cfg
        raw = body.get("max_tokens", body.get("max_completion_tokens"))
        context = cfg.context_length
        if prompt.prompt_tokens >= context:
            raise RequestError(
                f"The input ({prompt.prompt_tokens} tokens) is longer than the model's context length "
                f"({context} tokens)."
            )
        if raw is None:
            return max(1, min(self.server.rank.knobs.default_max_tokens, context - prompt.prompt_tokens))
        if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
            raise RequestError("max_tokens must be a positive integer")
        if prompt.prompt_tokens + raw > context:
            raise RequestError(
                f"Requested token count exceeds the model's maximum context length of {context} tokens. "
                f"You requested a total of {prompt.prompt_tokens + raw} tokens: {prompt.prompt_tokens} "
                "tokens"
                f" from the input messages and {raw} tokens for the completion. Please reduce the number of "
                "tokens in the input messages or the completion to fit within the limit."
            )
        return raw

    @staticmethod
    def _units(reply: Reply) -> list[str]:
        """What is emitted one token at a time: content pieces, or a tool call's argument pieces."""
        if reply.tool_calls:
            return tokenizer.pieces(reply.tool_calls[0]["function"]["arguments"]) or [""]
        return tokenizer.pieces(reply.content or "") or [""]

    @staticmethod
    def _completion_tokens(reply: Reply) -> int:
        if reply.tool_calls:
            fn = reply.tool_calls[0]["function"]
            return max(1, tokenizer.count(fn["name"]) + tokenizer.count(fn["arguments"]))
        return max(1, tokenizer.count(reply.content or ""))

    @staticmethod
    def _usage(prompt: Prompt, completion: int) -> dict[str, Any]:
        return {
            "prompt_tokens": prompt.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt.prompt_tokens + completion,
            "prompt_tokens_details": None,
        }

    def _interval(self) -> float:
        rank = self.server.rank
        running = max(1, rank.sched.running)
        return (1.0 + rank.knobs.batch_slowdown * (running - 1)) / rank.knobs.token_rate

    def _pace(self, n_units: int, first: float) -> float:
        """Sleep through the decode of ``n_units`` tokens after the first; return when the last came out."""
        due = first
        for _ in range(n_units - 1):
            due += self._interval()
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        return max(due, time.monotonic()) if n_units > 1 else first

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _stream(
        self, body: dict[str, Any], request_id: str, reply: Reply, prompt: Prompt, first: float
    ) -> float:
        model = self.server.rank.cfg.served_model_name
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": request_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
                "usage": None,
            }

        units = self._units(reply)
        due = first
        for i, unit in enumerate(units):
            if i:
                due += self._interval()
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            if reply.tool_calls:
                call = reply.tool_calls[0]
                if i == 0:
                    self._chunk(
                        _sse(
                            chunk(
                                {
                                    "role": "assistant",
                                    "content": None,
                                    "tool_calls": [
                                        {
                                            "index": 0,
                                            "id": call["id"],
                                            "type": "function",
                                            "function": {"name": call["function"]["name"], "arguments": unit},
                                        }
                                    ],
                                }
                            )
                        )
                    )
                else:
                    self._chunk(_sse(chunk({"tool_calls": [{"index": 0, "function": {"arguments": unit}}]})))
            else:
                if i == 0:
                    self._chunk(_sse(chunk({"role": "assistant", "content": ""})))
                self._chunk(_sse(chunk({"content": unit})))
        last = max(due, time.monotonic())
        completion = self._completion_tokens(reply)
        final = chunk({}, reply.finish_reason)
        options = body.get("stream_options") or {}
        self._chunk(_sse(final))
        if isinstance(options, dict) and options.get("include_usage"):
            usage_chunk = chunk({})
            usage_chunk["choices"] = []
            usage_chunk["usage"] = self._usage(prompt, completion)
            self._chunk(_sse(usage_chunk))
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")
        return last


def environment_snapshot() -> dict[str, str]:
    """The rank's SGLang/NCCL/simulator environment, for /server_info (never secrets: no *KEY*/TOKEN)."""
    out: dict[str, str] = {}
    for key, value in sorted(os.environ.items()):
        if key.startswith(ENV_PREFIXES) and not any(s in key for s in ("KEY", "TOKEN", "SECRET", "PASSWORD")):
            out[key] = value
    return out


def banner() -> str:
    return f"sparkctl rank simulator, standing in for SGLang {SGLANG_VERSION}: not a real model or GPU engine"
