"""Simulated ranks as real processes on loopback: rendezvous, liveness, shutdown, the HTTP API.

Every rank runs as ``python -S -m sparkctl_sim serve …``: ``-S`` keeps site-packages out, so these
tests also prove the simulator needs nothing beyond the standard library.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.ports import free_ports

from sparkctl_sim import SGLANG_VERSION

REPO = Path(__file__).resolve().parents[2]
FAST = {"SPARKCTL_SIM_BOOT_DELAY_S": "0.2", "SPARKCTL_SIM_TTFT_S": "0.01"}


# How long a poll may wait for what a running cluster will do (join, refuse, ready, exit): it returns
# as soon as it happens, so the bound only matters on a slow machine (beside the lab tests a rank's
# start once took more than 10 s). Timing is not what these tests check.
WAIT_S = 60


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll until ``predicate()``; return the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Cluster:
    def __init__(
        self, tmp: Path, nnodes: int = 4, env: dict[str, str] | None = None, extra: list[str] | None = None
    ):
        self.tmp = tmp
        self.nnodes = nnodes
        self.env = {**FAST, **(env or {})}
        self.extra = extra or []
        self.dist_port, *self.http_ports = free_ports(nnodes + 2)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def argv(self, rank: int, http_port: int) -> list[str]:
        return [
            "serve",
            "--model-path", "/models/DeepSeek-V4.1-Flash",
            "--served-model-name", "deepseek-v41-flash",
            "--tp-size", str(self.nnodes), "--ep-size", str(self.nnodes),
            "--nnodes", str(self.nnodes), "--node-rank", str(rank),
            "--dist-init-addr", f"127.0.0.1:{self.dist_port}",
            "--host", "127.0.0.1", "--port", str(http_port),
            "--context-length", "4096",
            "--speculative-algorithm", "DSPARK", "--speculative-dspark-block-size", "5",
            *self.extra,
        ]  # fmt: skip

    def start(
        self, rank: int, name: str | None = None, http_port: int | None = None, extra: list[str] | None = None
    ) -> subprocess.Popen[bytes]:
        name = name or f"r{rank}"
        port = http_port or self.http_ports[rank]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKCTL_SIM_", "SGL"))}
        env.update(self.env, PYTHONPATH=str(REPO))
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-S", "-m", "sparkctl_sim", *self.argv(rank, port), *(extra or [])],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.tmp,
        )  # fmt: skip
        log.close()
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text()

    def url(self, rank: int, path: str) -> str:
        return f"http://127.0.0.1:{self.http_ports[rank]}{path}"

    def status(self, rank: int, path: str, headers: dict[str, str] | None = None) -> int:
        return request(self.url(rank, path), headers=headers)[0]

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(5)


def request(
    url: str, body: Any = None, headers: dict[str, str] | None = None, timeout: float = 30
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as err:
        raw, status = err.read(), err.code
    except OSError:
        return 0, None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(**kw: Any) -> Cluster:
        c = Cluster(tmp_path, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


@pytest.mark.timing
def test_ready_only_when_all_joined_duplicate_refused_and_peer_loss_seen(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster()
    c.start(0)
    c.start(1)
    wait_for(lambda: "joined rank 0" in c.log("r1"), WAIT_S, "rank 1 to join")
    dup = c.start(1, name="dup1", http_port=c.http_ports[4])
    wait_for(lambda: "duplicate node_rank 1" in c.log("dup1"), WAIT_S, "the duplicate to be refused")
    assert "will not become ready" in c.log("dup1")
    assert "refused join of node_rank 1" in c.log("r0")
    c.start(3)
    wait_for(lambda: "(3/4 ranks in)" in c.log("r0"), WAIT_S, "rank 3 to join")
    time.sleep(0.6)  # longer than the boot delay: still nobody may be ready with 3 of 4
    status, body = request(c.url(0, "/ready"))
    assert status == 503 and "node_rank(s) 2" in body
    assert c.status(1, "/health") == 503 and c.status(3, "/health") == 503

    c.start(2)
    wait_for(lambda: c.status(0, "/ready") == 200, WAIT_S, "rank 0 /ready")
    assert all(c.status(r, "/health") == 200 for r in range(4))
    assert c.status(0, "/health_generate") == 200
    assert request(c.url(4, "/health"))[0] == 503 and dup.poll() is None  # the refused rank never gets ready
    log0 = c.log("r0")
    assert "The server is fired up and ready to roll!" in log0
    assert all("[sparkctl-sim-rank] SIMULATOR" in line for line in log0.splitlines())

    c.procs["r2"].send_signal(signal.SIGKILL)
    took = wait_for(lambda: c.status(0, "/health") == 503, 5, "rank 0 /health to turn 503")
    assert took < 5
    assert c.status(0, "/health_generate") == 503 and c.status(0, "/ready") == 503
    assert "lost node_rank 2" in c.log("r0")
    info = request(c.url(0, "/server_info"))[1]
    assert info["status"] == "UnHealthy"
    assert [p["lost"] for p in info["sparkctl_simulator"]["peers"]] == [False, True, False]


def test_worker_waits_for_an_unreachable_head_and_a_wrong_nnodes_is_refused(
    cluster: Callable[..., Cluster],
) -> None:
    c = cluster(nnodes=2)
    c.start(1)
    wait_for(
        lambda: f"waiting for rank 0 at 127.0.0.1:{c.dist_port}" in c.log("r1"), 5, "the worker to say why"
    )
    assert c.status(1, "/health") == 503
    c.start(0)
    wait_for(lambda: c.status(0, "/ready") == 200, WAIT_S, "rank 0 /ready")
    wrong = ["--nnodes", "3", "--node-rank", "2", "--tp-size", "3"]
    rogue = c.start(1, name="rogue", http_port=c.http_ports[2], extra=wrong)
    wait_for(
        lambda: "--nnodes 3 but rank 0 has --nnodes 2" in c.log("rogue"), WAIT_S,
        "the rogue rank to be refused",
    )
    assert rogue.poll() is None and c.status(2, "/health") == 503
    assert c.status(0, "/health") == 200  # a refused stranger does not hurt the formed group


def test_a_join_its_worker_gave_up_on_never_completes_the_group(cluster: Callable[..., Cluster]) -> None:
    """A starved rank 0 reads joins late, from its listen backlog: a worker may have given up waiting
    for the welcome and closed by then. Such a join must not count (the group would form with a dead
    member, and the worker's next join would be refused as too late): the live join forms the group."""
    c = cluster(nnodes=2)
    head = c.start(0)
    wait_for(lambda: "waiting for 1 worker rank(s)" in c.log("r0"), WAIT_S, "rank 0 to listen")
    time.sleep(0.5)  # rank 0 reaches its own address (the store's self-check) before it stops
    head.send_signal(signal.SIGSTOP)
    try:
        with socket.create_connection(("127.0.0.1", c.dist_port), timeout=5) as gave_up:
            join = {"type": "join", "node_rank": 1, "nnodes": 2, "tp_size": 2, "ep_size": 2}
            gave_up.sendall((json.dumps(join) + "\n").encode())
        c.start(1)
        wait_for(lambda: "Joining rank 0" in c.log("r1"), WAIT_S, "rank 1 to try to join")
        time.sleep(0.5)  # its join waits in the backlog behind the closed one
    finally:
        head.send_signal(signal.SIGCONT)
    wait_for(lambda: c.status(0, "/ready") == 200 or "lost node_rank" in c.log("r0"), WAIT_S,
             "rank 0 to be ready or to lose a member")
    assert c.status(0, "/ready") == 200, c.log("r0")
    # The dead join never counted: read first, it is dropped unconfirmed; read after the live one
    # (rank 0 serves each connection on its own thread), it is refused. Either way rank 1 joined once.
    assert c.log("r0").count("node_rank 1 joined from") == 1, c.log("r0")
    assert "refused" not in c.log("r1")


@pytest.mark.timing
def test_silent_peer_is_lost_by_heartbeat_and_workers_leave_without_rank0(
    cluster: Callable[..., Cluster],
) -> None:
    # heartbeat 1 s (the default) and a peer timeout of 3 s: a frozen node, no FIN on its socket
    c = cluster(env={"SPARKCTL_SIM_HEAD_LOSS_EXIT_S": "0.5", "SPARKCTL_SIM_PEER_TIMEOUT_S": "3"})
    for rank in range(4):
        c.start(rank)
    wait_for(lambda: c.status(0, "/ready") == 200, WAIT_S, "rank 0 /ready")
    c.procs["r3"].send_signal(signal.SIGSTOP)
    try:
        took = wait_for(lambda: c.status(0, "/health") == 503, 5, "rank 0 to notice the frozen rank")
    finally:
        c.procs["r3"].send_signal(signal.SIGCONT)
    assert took < 5 and "no heartbeat" in c.log("r0")
    assert c.procs["r3"].wait(WAIT_S) == 1  # its rank 0 connection is gone: it exits 1
    c.procs["r0"].send_signal(signal.SIGKILL)
    assert c.procs["r1"].wait(WAIT_S) == 1 and c.procs["r2"].wait(WAIT_S) == 1
    assert "lost rank 0" in c.log("r1")


@pytest.mark.timing
def test_workers_ignore_sigterm_and_rank0_drains_then_stops_everyone(cluster: Callable[..., Cluster]) -> None:
    c = cluster(env={"SPARKCTL_SIM_TOKEN_RATE": "50"}, extra=["--enable-metrics"])
    for rank in range(4):
        c.start(rank)
    wait_for(lambda: c.status(0, "/ready") == 200, WAIT_S, "rank 0 /ready")
    c.procs["r1"].send_signal(signal.SIGTERM)
    wait_for(lambda: "SIGTERM received on node_rank 1" in c.log("r1"), 5, "the worker's SIGTERM log line")
    time.sleep(0.5)
    assert c.procs["r1"].poll() is None and c.status(1, "/health") == 200

    results: list[tuple[int, Any]] = []
    body = {"model": "deepseek-v41-flash", "max_tokens": 60, "ignore_eos": True,
            "messages": [{"role": "user", "content": "Write a long story."}]}  # fmt: skip
    worker = threading.Thread(target=lambda: results.append(request(c.url(0, "/v1/chat/completions"), body)))
    worker.start()
    labels = 'model_name="deepseek-v41-flash",engine_type="unified",tp_rank="0",pp_rank="0"'
    running = f"num_running_reqs{{{labels}}} 1"
    wait_for(lambda: "sglang:num_running_reqs" in str(request(c.url(0, "/metrics"))[1]) and
             running in request(c.url(0, "/metrics"))[1],
             5, "the request to be running")  # fmt: skip
    c.procs["r0"].send_signal(signal.SIGTERM)
    wait_for(lambda: c.status(0, "/ready") == 503, 5, "/ready to turn 503 while draining")
    refused = request(c.url(0, "/v1/chat/completions"), body)
    assert refused[0] == 503
    worker.join(WAIT_S)
    status, reply = results[0]
    assert status == 200 and reply["usage"]["completion_tokens"] == 60  # the in-flight request finished
    for rank in range(4):
        assert c.procs[f"r{rank}"].wait(WAIT_S) == 0, c.log(f"r{rank}")
    assert "received the rank-0 shutdown broadcast" in c.log("r2")


@pytest.mark.timing
def test_force_shutdown_skips_the_drain(cluster: Callable[..., Cluster]) -> None:
    c = cluster(nnodes=2, env={"SPARKCTL_SIM_TOKEN_RATE": "5", "SGL_FORCE_SHUTDOWN": "1"})
    c.start(0)
    c.start(1)
    wait_for(lambda: c.status(0, "/ready") == 200, WAIT_S, "rank 0 /ready")
    body = {"max_tokens": 200, "messages": [{"role": "user", "content": "Write."}]}
    threading.Thread(target=request, args=(c.url(0, "/v1/chat/completions"), body), daemon=True).start()
    time.sleep(0.3)
    started = time.monotonic()
    c.procs["r0"].send_signal(signal.SIGTERM)
    assert c.procs["r0"].wait(WAIT_S) == 0 and c.procs["r1"].wait(WAIT_S) == 0
    assert time.monotonic() - started < 5  # a 40 s request was not waited for


# --- the API on rank 0 -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("sim-api")
    conf = tmp / "sglang.yaml"
    conf.write_text("api-key: sk-sim-test\nenable-metrics: true\n")
    conf.chmod(0o600)
    c = Cluster(
        tmp,
        nnodes=2,
        env={"SPARKCTL_SIM_TOKEN_RATE": "50", "SPARKCTL_SIM_HOLD_MIB": "64"},
        extra=["--config", str(conf), "--max-running-requests", "2"],
    )
    c.start(0)
    c.start(1)
    try:
        wait_for(lambda: c.status(0, "/ready") == 200, WAIT_S, "rank 0 /ready")
    except AssertionError as err:
        c.stop()
        raise AssertionError(f"{err}\nrank 0 logged:\n{c.log('r0')}\nrank 1 logged:\n{c.log('r1')}") from None
    yield c
    c.stop()


AUTH = {"Authorization": "Bearer sk-sim-test"}


def chat(api: Cluster, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, Any]:
    return request(api.url(0, "/v1/chat/completions"), body, headers=AUTH if headers is None else headers)


def test_api_key_is_enforced_except_on_health_and_metrics(api: Cluster) -> None:
    body = {"messages": [{"role": "user", "content": "What is 2+3? Only the number."}]}
    assert chat(api, body, headers={})[0] == 401
    assert chat(api, body, headers={"Authorization": "Bearer wrong"})[0] == 401
    assert api.status(0, "/v1/models") == 401
    for path in ("/health", "/health_generate", "/ready", "/metrics"):
        assert api.status(0, path) == 200, path
    status, reply = chat(api, body)
    assert status == 200 and reply["choices"][0]["message"]["content"] == "5"


def test_models_server_info_and_metrics(api: Cluster) -> None:
    status, models = request(api.url(0, "/v1/models"), headers=AUTH)
    assert status == 200 and models["data"][0]["id"] == "deepseek-v41-flash"
    assert models["data"][0]["max_model_len"] == 4096
    assert request(api.url(0, "/v1/models/other"), headers=AUTH)[0] == 404
    info = request(api.url(0, "/server_info"), headers=AUTH)[1]
    assert info["simulator"] is True and info["version"] == SGLANG_VERSION  # tests/unit/test_one_owner.py
    assert (info["tp_size"], info["ep_size"], info["max_running_requests"]) == (2, 2, 2)
    assert info["speculative_dspark_block_size"] == 5 and info["speculative_num_draft_tokens"] == 6
    # As SGLang's own /server_info: its server arguments, the API key in clear (sparkctl strips it
    # from everything it records; the simulator must not hide what the real server shows).
    assert info["moe_runner_backend"] == "flashinfer_mxfp4" and info["api_key"] == "sk-sim-test"
    assert info["internal_states"][0]["avg_spec_accept_length"] > 1
    metrics = request(api.url(0, "/metrics"))[1]
    labels = '{model_name="deepseek-v41-flash",engine_type="unified",tp_rank="0",pp_rank="0"}'
    assert f"sparkctl_sim_simulator{labels} 1" in metrics
    assert "# TYPE sglang:generation_tokens_total counter" in metrics
    assert api.status(1, "/metrics") == 200  # the worker's dummy server has it with --enable-metrics
    assert api.status(1, "/v1/models") == 404  # and nothing else


def test_memory_is_really_held(api: Cluster) -> None:
    status = Path(f"/proc/{api.procs['r0'].pid}/status").read_text()
    rss_kib = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    assert rss_kib >= 64 * 1024


def test_context_length_is_enforced(api: Cluster) -> None:
    status, err = chat(api, {"messages": [{"role": "user", "content": " the" * 5000}]})
    assert status == 400 and "longer than the model's context length (4096 tokens)" in err["message"]
    status, err = chat(api, {"max_tokens": 4000, "messages": [{"role": "user", "content": " the" * 500}]})
    assert status == 400 and "maximum context length" in err["message"]
    assert chat(api, {"messages": "nope"})[0] == 400


def stream(api: Cluster, body: dict[str, Any]) -> tuple[list[tuple[float, dict[str, Any]]], float]:
    """(timestamped SSE events, request start) for a streamed chat completion."""
    data = json.dumps({**body, "stream": True}).encode()
    req = urllib.request.Request(api.url(0, "/v1/chat/completions"), data=data, headers=AUTH)
    events: list[tuple[float, dict[str, Any]]] = []
    start = time.monotonic()
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                break
            events.append((time.monotonic(), json.loads(line[6:])))
    return events, start


@pytest.mark.timing
def test_stream_and_token_rate_within_5_percent(api: Cluster) -> None:
    body = {"max_tokens": 101, "ignore_eos": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "Write a story about a harbour."}]}  # fmt: skip
    events, _ = stream(api, body)
    content = [
        (t, e["choices"][0]["delta"]["content"])
        for t, e in events
        if e["choices"] and e["choices"][0]["delta"].get("content")
    ]
    usage = events[-1][1]["usage"]
    assert usage["completion_tokens"] == 101 and events[-2][1]["choices"][0]["finish_reason"] == "length"
    decode = (usage["completion_tokens"] - 1) / (content[-1][0] - content[0][0])
    assert abs(decode - 50) / 50 < 0.05, decode
    text = "".join(piece for _, piece in content)
    status, whole = chat(api, {k: v for k, v in body.items() if k != "stream_options"})
    assert status == 200 and whole["choices"][0]["message"]["content"] == text  # greedy: same answer


def test_streamed_tool_call(api: Cluster) -> None:
    tool = {"type": "function", "function": {"name": "lookup_fixture", "parameters": {
        "type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}  # fmt: skip
    body = {"tools": [tool], "messages": [{"role": "user", "content": "Use lookup_fixture for key alpha."}]}
    events, _ = stream(api, body)
    deltas = [e["choices"][0]["delta"] for _, e in events if e["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if d.get("tool_calls")]
    assert calls[0]["function"]["name"] == "lookup_fixture" and calls[0]["id"].startswith("call_")
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"key": "alpha"}
    assert events[-1][1]["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.timing
def test_concurrency_is_capped_with_queueing(api: Cluster) -> None:
    body = {"max_tokens": 26, "ignore_eos": True, "messages": [{"role": "user", "content": "Write."}]}
    single_start = time.monotonic()
    assert chat(api, body)[0] == 200
    single = time.monotonic() - single_start
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(chat(api, body)[0])) for _ in range(4)]
    start = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(0.2)
    loads = request(api.url(0, "/v1/loads"), headers=AUTH)[1]
    assert loads["num_running_reqs"] == 2 and loads["num_waiting_reqs"] == 2
    for t in threads:
        t.join(30)
    assert results == [200] * 4
    assert time.monotonic() - start > 1.8 * single  # two waves of two, not one wave of four


def test_openai_client_end_to_end(api: Cluster) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=api.url(0, "/v1"), api_key="sk-sim-test")
    reply = client.chat.completions.create(
        model="deepseek-v41-flash",
        temperature=0,
        max_tokens=256,
        messages=[{"role": "user", "content": "What is 37*41? Answer with only the number."}],
    )
    assert reply.choices[0].message.content == "1517" and reply.usage is not None
    chunks = client.chat.completions.create(
        model="deepseek-v41-flash",
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Say something."}],
    )
    usage = [c.usage for c in chunks if c.usage]
    assert usage and usage[0].completion_tokens == 8


def test_bad_argv_exits_2_and_port_clash_exits_1(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    bad = subprocess.run(
        [sys.executable, "-S", "-m", "sparkctl_sim", "serve", "--tp-size", "x"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "argument --tp-size: invalid int value" in bad.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        clash = subprocess.run(
            [sys.executable, "-S", "-m", "sparkctl_sim", "serve", "--port", str(port)],
            env=env, capture_output=True, text=True, timeout=20,
        )  # fmt: skip
    assert clash.returncode == 1 and f"cannot serve HTTP on 127.0.0.1:{port}" in clash.stderr
