"""The node probe asks docker's engine over its local socket (and rank 0's /health over a plain
socket), not the docker CLI or urllib: the same answers `docker inspect` prints, without a Go
program started on every node in every sampling round of `up`. Where the engine is not on a local
socket (DOCKER_HOST tcp://, ssh://) the probe asks the CLI as before."""

from __future__ import annotations

import http.server
import json
import os
import socket
import socketserver
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sparkctl.nodeside import probe
from sparkctl.serve import probe as serve_probe

STATE = {"Status": "running", "Running": True, "OOMKilled": False, "ExitCode": 0,
         "StartedAt": "2026-12-06T13:00:00.123456789Z"}
CONTAINER = {"Id": "3bc127acd492bb585ba0b2d04278aff237d8bb28913fb70b1234567890abcdef", "State": STATE,
             "RestartCount": 2, "Created": "2026-12-06T12:59:58.000000001Z",
             "HostConfig": {"DeviceRequests": [{"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}]}}
IMAGE = {"Id": "sha256:" + "ab" * 32, "Config": {"Env": ["PATH=/usr/bin", "ENGINE_BUILD=7"]}}


class _Engine(http.server.BaseHTTPRequestHandler):
    """Docker's engine API as the probe reads it: one running rank container, one image."""

    asked: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).asked.append(self.path)
        answers: dict[str, tuple[int, Any]] = {
            "/containers/sparkctl-lab-r1/json": (200, CONTAINER),
            f"/containers/{CONTAINER['Id']}/json": (200, CONTAINER),
            "/containers/json": (200, [{"Id": CONTAINER["Id"], "Names": ["/sparkctl-lab-r1"]}]),
            "/images/registry.example/engine:lab-7/json": (200, IMAGE),
            "/containers/broken/json": (500, {"message": "container store unavailable"}),
        }
        code, doc = answers.get(self.path, (404, {"message": f"No such object: {self.path}"}))
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _UnixEngine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, _ = self.socket.accept()
        return conn, ("local", 0)  # http.server reads client_address[0]


def _docker_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """A `docker` CLI first on PATH: a shell script with ``body``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    cli = bindir / "docker"
    cli.write_text(f"#!/bin/sh\n{body}\n")
    cli.chmod(cli.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The engine on a unix socket named by DOCKER_HOST; a `docker` CLI on PATH that records every
    call (and answers nothing useful); the requests the engine saw."""
    where = tmp_path / "docker.sock"
    server = _UnixEngine(str(where), _Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Engine.asked = []
    _docker_cli(tmp_path, monkeypatch, f"echo \"$@\" >> {tmp_path / 'cli-calls'}\nexit 1")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{where}")
    try:
        yield _Engine.asked
    finally:
        server.shutdown()
        server.server_close()
    assert not (tmp_path / "cli-calls").exists(), (tmp_path / "cli-calls").read_text()


def test_the_rank_container_is_read_from_the_engine_as_docker_inspect_prints_it(engine: list[str]) -> None:
    assert probe.container_state("sparkctl-lab-r1") == {
        "exists": True, "name": "sparkctl-lab-r1", "status": "running", "running": True,
        "oom_killed": False, "exit_code": 0, "started_at": STATE["StartedAt"], "restart_count": 2,
        "created": CONTAINER["Created"],
    }
    assert engine == ["/containers/sparkctl-lab-r1/json"]


def test_a_missing_container_and_an_engine_error_are_told_apart(engine: list[str]) -> None:
    assert probe.container_state("sparkctl-lab-r9") == {"exists": False}
    assert probe.container_state("broken") == {"error": "container store unavailable"}


def test_the_preflight_reads_image_and_gpu_containers_from_the_engine(engine: list[str]) -> None:
    assert probe.identity("container", "registry.example/engine:lab-7", None, None) == IMAGE["Id"]
    assert probe.image_env("registry.example/engine:lab-7") == {"PATH": "/usr/bin",
                                                                     "ENGINE_BUILD": "7"}
    assert probe.gpu_containers() == [f"{CONTAINER['Id'][:12]} sparkctl-lab-r1"]
    assert probe.identity("container", "missing:tag", None, None).startswith("missing: No such object")
    assert probe.image_env("missing:tag") is None


def test_names_are_percent_encoded_in_the_request_path(engine: list[str]) -> None:
    probe.container_state("odd name?x")
    assert engine == ["/containers/odd%20name%3Fx/json"]


def test_an_engine_not_on_a_local_socket_is_asked_through_the_cli(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """DOCKER_HOST=tcp://…: the CLI knows how to reach it (TLS, contexts); the probe asks the CLI."""
    state = json.dumps(STATE)
    _docker_cli(tmp_path, monkeypatch, f"printf '%s\\t2\\t{CONTAINER['Created']}\\n' '{state}'")
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.1:2376")
    assert probe.engine_socket() is None
    facts = probe.container_state("sparkctl-lab-r1")
    assert facts is not None and facts["restart_count"] == 2 and facts["started_at"] == STATE["StartedAt"]


def test_no_socket_file_means_the_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(probe, "ENGINE_SOCKET", str(tmp_path / "absent.sock"))
    assert probe.engine_socket() is None
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'absent.sock'}")
    assert probe.engine_get("/containers/json") is None  # named but not there: the CLI is asked


def test_an_engine_that_takes_the_connection_and_never_answers_is_an_error_not_the_cli(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung engine: the probe says so within its timeout and does not wait on the CLI too."""
    where = tmp_path / "hung.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(where))
    listener.listen(4)
    calls = tmp_path / "cli-calls"
    _docker_cli(tmp_path, monkeypatch, f"echo \"$@\" >> {calls}\nexit 1")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{where}")
    try:
        assert probe.engine_get("/containers/x/json", timeout=0.3) == (
            0, {"message": "the docker engine did not answer within 0.3 s"})
        monkeypatch.setattr(probe, "engine_get", lambda path, timeout=10.0, real=probe.engine_get:
                            real(path, 0.3))
        assert probe.container_state("sparkctl-lab-r1") == {
            "error": "the docker engine did not answer within 0.3 s"}
    finally:
        listener.close()
    assert not calls.exists()


class _Health(http.server.BaseHTTPRequestHandler):
    code = 200

    def do_GET(self) -> None:
        self.send_response(type(self).code if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_local_health_answers_its_status_or_none() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        assert probe.local_http(port) == 200
        _Health.code = 503
        assert probe.local_http(port) == 503
        assert probe.local_http(port, "/other") == 404
    finally:
        server.shutdown()
        server.server_close()
    assert probe.local_http(port) is None  # nothing listens any more


def test_an_answer_that_is_not_http_is_no_status() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def babble() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")

    threading.Thread(target=babble, daemon=True).start()
    try:
        assert probe.local_http(port) is None
    finally:
        listener.close()


def test_the_probe_imports_neither_urllib_nor_http_client() -> None:
    """Every sampling round starts one interpreter per node: the probe's imports are its cost. The
    probe's modules loaded as the node loads them (the script `sparkctl.serve.probe` sends)."""
    script = serve_probe.probe_script({"mode": "watch"}).split("\n", 1)[1].rsplit("pkg.probe.main", 1)[0]
    script += ("print(sorted(m for m in sys.modules if m.split('.')[0] in "
               "('urllib', 'http', 'email', 'ssl')))\n")
    # Without site: this venv's own site hooks (an editable install's finder) import urllib.parse.
    out = subprocess.run([sys.executable, "-I", "-S", "-"], input=script, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]", out
