"""An in-process SSH server (paramiko server mode) for testing the fan-out without a lab.

It accepts one client key, runs each exec request with /bin/sh locally (stdin from the channel)
and counts the connections it accepted, so tests can check host-key verification, unreachable
nodes, timeouts and connection reuse for real. It also forwards ``direct-tcpip`` channels (what
``ssh -J`` asks of a jump host) and records where they went, so it can stand in for a bastion.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from pathlib import Path

import paramiko


class _Iface(paramiko.ServerInterface):
    def __init__(self, allowed: paramiko.PKey, forwards: dict[int, tuple[str, int]]):
        self.allowed = allowed
        self.forwards = forwards  # channel id -> destination, for the accept loop

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_direct_tcpip_request(
        self, chanid: int, origin: tuple[str, int], destination: tuple[str, int]
    ) -> int:
        self.forwards[chanid] = (destination[0], int(destination[1]))
        return paramiko.OPEN_SUCCEEDED

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        if key.get_base64() == self.allowed.get_base64():
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        threading.Thread(target=_serve_exec, args=(channel, command.decode()), daemon=True).start()
        return True


def _serve_exec(channel: paramiko.Channel, command: str) -> None:
    # `sudo -n` is not available in tests; strip it the way a root login would not need it.
    command = command.removeprefix("sudo -n ")
    data = bytearray()
    while True:
        chunk = channel.recv(65536)
        if not chunk:
            break
        data += chunk
    proc = subprocess.run(command, shell=True, input=bytes(data), capture_output=True, check=False)
    try:
        if proc.stdout:
            channel.sendall(proc.stdout)
        if proc.stderr:
            channel.sendall_stderr(proc.stderr)
        channel.send_exit_status(proc.returncode)
        channel.shutdown_write()
    except OSError:
        pass  # the client hung up before reading everything (as a real sshd sees it: nothing to do)
    finally:
        channel.close()


def _pipe(src: paramiko.Channel | socket.socket, dst: paramiko.Channel | socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except (OSError, EOFError):
        pass
    finally:
        # Either end may already be gone: paramiko raises EOFError closing a channel whose
        # transport has stopped (the client hung up first).
        for end in (dst, src):
            with contextlib.suppress(OSError, EOFError):
                end.close()


def _forward(
    transport: paramiko.Transport, forwards: dict[int, tuple[str, int]], log: list[tuple[str, int]]
) -> None:
    """Connect each accepted direct-tcpip channel to its destination (session channels are served
    by their exec request and need nothing here)."""
    while transport.is_active():
        chan = transport.accept(0.5)
        if chan is None:
            continue
        dest = forwards.pop(chan.get_id(), None)
        if dest is None:
            continue
        log.append(dest)
        try:
            sock = socket.create_connection(dest, timeout=5)
        except OSError:
            chan.close()
            continue
        sock.settimeout(None)
        threading.Thread(target=_pipe, args=(chan, sock), daemon=True).start()
        threading.Thread(target=_pipe, args=(sock, chan), daemon=True).start()


class FakeSshd:
    """Listen on 127.0.0.1:<free port>; write the client key and a known_hosts file into ``tmp``."""

    def __init__(self, tmp: Path, *, banner_delay: float = 0.0, drop_first: int = 0):
        """``banner_delay``: seconds between accepting a connection and the SSH banner (a loaded
        node's sshd); ``drop_first``: that many connections are closed before the banner (sshd's
        MaxStartups refusing a connection beyond its limit)."""
        self.banner_delay = banner_delay
        self.drop_first = drop_first
        self.host_key = paramiko.RSAKey.generate(2048)
        self.client_key = paramiko.RSAKey.generate(2048)
        self.key_file = tmp / "id_test"
        self.client_key.write_private_key_file(str(self.key_file))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        # Set here, not in the thread: a server closed before its thread first ran had its socket
        # closed under that first call (EBADF in the thread).
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.known_hosts = tmp / "known_hosts"
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} ssh-rsa {self.host_key.get_base64()}\n")
        self.accepted = 0
        self.forwarded: list[tuple[str, int]] = []  # destinations of direct-tcpip channels
        self._transports: list[paramiko.Transport] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            if self.accepted <= self.drop_first:
                conn.close()
                continue
            # One thread per connection, as sshd forks one per connection: a key exchange slowed by a
            # loaded machine never holds up the next node's connection (with `banner_delay` the
            # connection also waits for its banner first).
            threading.Thread(target=self._serve, args=(conn, self.banner_delay), daemon=True).start()

    def _serve(self, conn: socket.socket, delay: float = 0.0) -> None:
        if delay and self._stop.wait(delay):
            conn.close()
            return
        transport = paramiko.Transport(conn)
        transport.add_server_key(self.host_key)
        self._transports.append(transport)
        forwards: dict[int, tuple[str, int]] = {}
        try:
            transport.start_server(server=_Iface(self.client_key, forwards))
        except (paramiko.SSHException, EOFError, OSError):  # the client went away mid-negotiation
            return
        threading.Thread(target=_forward, args=(transport, forwards, self.forwarded), daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the thread's accept() at once
        self._thread.join(timeout=5)  # the thread is done with the socket before it is closed
        for transport in self._transports:
            transport.close()
        self.sock.close()
