"""Rendezvous and liveness between simulated ranks, over TCP at ``--dist-init-addr``.

Like torch.distributed's TCPStore, rank 0 listens on the dist-init port (all addresses) and the other
ranks connect to it, retrying until it is reachable. Messages are JSON lines. A worker sends
``join {node_rank, nnodes, tp_size, ep_size}``; rank 0 answers ``welcome`` or ``reject {reason}``
(duplicate rank, wrong nnodes, rank out of range, different parallel sizes, group already formed).
A worker counts as joined only once it answers the welcome with ``ack``: a worker that gave up
waiting for the welcome (a starved rank 0 read its join late, from the listen backlog) has closed
its connection and never counts, so it can never complete the group as a dead member.
When all ``nnodes`` ranks are in (rank 0 included: it must reach its own dist-init address, as
torch's store client does), rank 0 sends ``formed``; every rank then loads (the boot delay) and
workers report ``booted``. Both sides send ``hb`` every heartbeat interval; rank 0 counts a worker as
lost when its connection closes or nothing arrived for the peer timeout, and then stays unhealthy
(a real TP group cannot lose a member and carry on). On shutdown rank 0 sends ``shutdown``.

Size: one module on purpose — both ends of the rendezvous protocol above, kept beside each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkctl_sim.config import ServerConfig
from sparkctl_sim.knobs import Knobs
from sparkctl_sim.log import Log

HANDSHAKE_TIMEOUT_S = 10.0


def send_json(sock: socket.socket, lock: threading.Lock, message: dict[str, Any]) -> bool:
    data = (json.dumps(message) + "\n").encode()
    with lock:
        try:
            sock.sendall(data)
            return True
        except OSError:
            return False


def _has_unread(sock: socket.socket) -> bool:
    """Whether bytes from the peer wait in the socket, not yet read: then the peer is not silent,
    this process was (its reader thread did not run), and the silence must not count against the peer."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return bool(readable)


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the peer closed its end and nothing from it is left unread (end of file is next)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except (OSError, ValueError):
        return True


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


@dataclass
class Peer:
    rank: int
    sock: socket.socket
    addr: str
    joined_at: float
    last_seen: float
    booted: bool = False
    gone: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class Head:
    """Rank 0's side: the store every worker joins, and the liveness monitor."""

    def __init__(self, cfg: ServerConfig, knobs: Knobs, log: Log, on_fatal: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.knobs = knobs
        self.log = log
        self.on_fatal = on_fatal
        self.store_id = secrets.token_hex(8)
        self.nnodes = cfg.nnodes
        self.peers: dict[int, Peer] = {}
        self.lost: list[str] = []
        self.formed = threading.Event()
        self.self_reachable = self.nnodes == 1
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if self.nnodes == 1:
            self.log.info("nnodes=1: no rendezvous needed")
            self.formed.set()
            return
        dist = self.cfg.dist_init()
        assert dist is not None
        host, port = dist
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
            listener.listen(64)
        except OSError as exc:
            listener.close()
            self.on_fatal(
                f"The server socket has failed to listen on any local network address. port: {port}, "
                f"message: {exc.strerror or exc} (is another rank 0 already running?)"
            )
            return
        self._listener = listener
        self.log.info(
            f"Init torch distributed begin. Rendezvous store listening on port {port} "
            f"(dist-init-addr {host}:{port}); waiting for {self.nnodes - 1} worker rank(s)"
        )
        threading.Thread(target=self._accept_loop, name="sim-accept", daemon=True).start()
        threading.Thread(target=self._probe_self, args=(host, port), name="sim-probe", daemon=True).start()
        threading.Thread(target=self._heartbeat_loop, name="sim-heartbeat", daemon=True).start()

    def broadcast_shutdown(self) -> None:
        self.stopping.set()
        with self._lock:
            peers = [p for p in self.peers.values() if not p.gone]
        for peer in peers:
            if send_json(peer.sock, peer.lock, {"type": "shutdown"}):
                self.log.info(f"sent shutdown to node_rank {peer.rank}")
        for peer in peers:
            _close(peer.sock)
        if self._listener is not None:
            _close(self._listener)

    # -- state ----------------------------------------------------------------------------------

    def problem(self) -> str | None:
        """Why the group is not (or no longer) usable; None when all ranks are in and booted."""
        with self._lock:
            if self.lost:
                return "; ".join(self.lost)
            if not self.self_reachable:
                return "rank 0 cannot reach its own --dist-init-addr yet"
            if not self.formed.is_set():
                missing = [r for r in range(1, self.nnodes) if r not in self.peers]
                return f"waiting for node_rank(s) {', '.join(map(str, missing))} to join"
            not_booted = [p.rank for p in self.peers.values() if not p.booted]
            if not_booted:
                return f"node_rank(s) {', '.join(map(str, sorted(not_booted)))} still loading"
        return None

    def peer_states(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        with self._lock:
            return [
                {
                    "node_rank": p.rank,
                    "addr": p.addr,
                    "booted": p.booted,
                    "lost": p.gone and self.formed.is_set(),
                    "last_heartbeat_s_ago": round(now - p.last_seen, 2),
                }
                for p in sorted(self.peers.values(), key=lambda p: p.rank)
            ]

    # -- internals ------------------------------------------------------------------------------

    def _probe_self(self, host: str, port: int) -> None:
        warned = False
        while not self.stopping.is_set():
            problem: str
            try:
                with socket.create_connection((host, port), timeout=3) as sock:
                    sock.sendall(b'{"type": "probe"}\n')
                    sock.settimeout(3)
                    line = sock.makefile("rb").readline()
                answer = json.loads(line) if line else {}
                if answer.get("store_id") == self.store_id:
                    with self._lock:
                        self.self_reachable = True
                    if warned:
                        self.log.info(f"rank 0 now reaches its own rendezvous address {host}:{port}")
                    self._maybe_form()
                    return
                other = answer.get("store_id")
                problem = f"{host}:{port} answers, but it is another rank 0's store (store {other})"
            except (OSError, ValueError) as exc:
                problem = f"cannot connect to its own --dist-init-addr {host}:{port}: {exc}"
            self.log.throttled("probe", 10, f"rank 0 {problem}; the group cannot form until it can", "ERROR")
            warned = True
            self.stopping.wait(2)

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self.stopping.is_set():
            try:
                sock, addr = self._listener.accept()
            except OSError:
                if self.stopping.is_set():
                    return
                time.sleep(0.1)
                continue
            threading.Thread(target=self._handle, args=(sock, f"{addr[0]}:{addr[1]}"), daemon=True).start()

    def _reject(self, sock: socket.socket, addr: str, rank: Any, reason: str) -> None:
        self.log.warning(f"refused join of node_rank {rank} from {addr}: {reason}")
        send_json(sock, threading.Lock(), {"type": "reject", "reason": reason})
        _close(sock)

    def _handle(self, sock: socket.socket, addr: str) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        reader = sock.makefile("rb")
        try:
            first = json.loads(reader.readline() or b"{}")
        except (OSError, ValueError):
            _close(sock)
            return
        kind = first.get("type")
        if kind == "probe":
            send_json(sock, threading.Lock(), {"type": "probe_ok", "store_id": self.store_id})
            _close(sock)
            return
        if kind != "join":
            _close(sock)
            return
        rank = first.get("node_rank")
        reason = self._check_join(first) or self._taken(rank)
        if reason is not None:
            self._reject(sock, addr, rank, reason)
            return
        lock = threading.Lock()
        send_json(sock, lock, {"type": "welcome", "nnodes": self.nnodes, "store_id": self.store_id})
        try:
            ack = json.loads(reader.readline() or b"{}")
        except (OSError, ValueError):
            ack = {}
        if ack.get("type") != "ack":
            self.log.warning(
                f"node_rank {rank} from {addr} did not confirm its join (it gave up waiting for the "
                "welcome); not counted, waiting for it again"
            )
            _close(sock)
            return
        now = time.monotonic()
        with self._lock:  # another connection of this rank may have confirmed meanwhile
            reason = self._taken_locked(rank)
            if reason is None:
                peer = Peer(rank=rank, sock=sock, addr=addr, joined_at=now, last_seen=now, lock=lock)
                self.peers[rank] = peer
        if reason is not None:
            self._reject(sock, addr, rank, reason)
            return
        sock.settimeout(None)
        with self._lock:
            joined = 1 + sum(1 for p in self.peers.values() if not p.gone)
        self.log.info(f"node_rank {rank} joined from {addr} ({joined}/{self.nnodes} ranks in)")
        self._maybe_form()
        self._read_peer(peer, reader)

    def _check_join(self, msg: dict[str, Any]) -> str | None:
        rank, nnodes = msg.get("node_rank"), msg.get("nnodes")
        if not isinstance(rank, int) or not isinstance(nnodes, int):
            return "malformed join message"
        if nnodes != self.nnodes:
            return f"this rank was started with --nnodes {nnodes} but rank 0 has --nnodes {self.nnodes}"
        if rank == 0:
            return "duplicate node_rank 0: rank 0 is already running here"
        if not 0 < rank < self.nnodes:
            return f"node_rank {rank} is outside 1..{self.nnodes - 1}"
        for name in ("tp_size", "ep_size"):
            if msg.get(name) != self.cfg[name]:
                return f"{name} {msg.get(name)} differs from rank 0's {self.cfg[name]}"
        return None

    def _taken(self, rank: Any) -> str | None:
        with self._lock:
            return self._taken_locked(rank)

    def _taken_locked(self, rank: Any) -> str | None:
        """Why a join of ``rank`` cannot be counted now (self._lock held), else None. A member whose
        connection the worker already closed (its reader has not run yet) no longer holds the rank."""
        if self.formed.is_set():
            return "the process group has already formed; restart every rank to form a new one"
        existing = self.peers.get(rank)
        if existing is None or existing.gone:
            return None
        if _closed_by_peer(existing.sock):
            existing.gone = True  # before the group formed: its reader's end of file is no loss
            return None
        return f"duplicate node_rank {rank}: already joined from {existing.addr}"

    def _maybe_form(self) -> None:
        with self._lock:
            if self.formed.is_set() or not self.self_reachable:
                return
            for peer in self.peers.values():  # never form with a member that already left
                if not peer.gone and _closed_by_peer(peer.sock):
                    peer.gone = True
                    self.log.warning(
                        f"node_rank {peer.rank} left before the group formed; waiting for it again"
                    )
            live = [p for p in self.peers.values() if not p.gone]
            if len(live) != self.nnodes - 1:
                return
            self.formed.set()
        for peer in live:
            send_json(peer.sock, peer.lock, {"type": "formed"})
        self.log.info(f"all {self.nnodes} ranks joined. Init torch distributed ends.")

    def _read_peer(self, peer: Peer, reader: Any) -> None:
        reason = "connection closed"
        try:
            for line in reader:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                peer.last_seen = time.monotonic()
                if msg.get("type") == "booted":
                    with self._lock:
                        peer.booted = True
                    self.log.info(f"node_rank {peer.rank} finished loading")
        except OSError as exc:
            reason = f"connection error: {exc}"
        self._peer_gone(peer, reason)

    def _peer_gone(self, peer: Peer, reason: str) -> None:
        with self._lock:
            if peer.gone:  # already counted out (it left before the group formed)
                _close(peer.sock)
                return
            peer.gone = True
            formed = self.formed.is_set()
            if formed and not self.stopping.is_set():
                self.lost.append(f"lost node_rank {peer.rank} ({reason})")
        _close(peer.sock)
        if self.stopping.is_set():
            return
        if formed:
            self.log.error(
                f"lost node_rank {peer.rank} ({reason}); the group is broken: /health, /health_generate "
                "and /ready now return 503. Restart every rank to recover."
            )
        else:
            self.log.warning(
                f"node_rank {peer.rank} left before the group formed ({reason}); waiting for it again"
            )

    def _heartbeat_loop(self) -> None:
        while not self.stopping.wait(self.knobs.heartbeat_s):
            now = time.monotonic()
            with self._lock:
                peers = [p for p in self.peers.values() if not p.gone]
            for peer in peers:
                silent = now - peer.last_seen
                if silent > self.knobs.peer_timeout_s and _has_unread(peer.sock):
                    peer.last_seen = now
                elif silent > self.knobs.peer_timeout_s:
                    self._peer_gone(peer, f"no heartbeat for {silent:.1f} s")
                elif not send_json(peer.sock, peer.lock, {"type": "hb"}):
                    self._peer_gone(peer, "heartbeat send failed")


class Worker:
    """A non-zero rank's side: join rank 0, follow it, and leave when it says so or disappears."""

    def __init__(
        self,
        cfg: ServerConfig,
        knobs: Knobs,
        log: Log,
        on_formed: Callable[[], None],
        on_exit: Callable[[int, str], None],
    ) -> None:
        self.cfg = cfg
        self.knobs = knobs
        self.log = log
        self.on_formed = on_formed
        self.on_exit = on_exit
        self.formed = threading.Event()
        self.rejected: str | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._booted = False
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, name="sim-worker", daemon=True).start()

    def problem(self) -> str | None:
        if self.rejected:
            return f"rank 0 refused this rank: {self.rejected}"
        if not self.formed.is_set():
            return "waiting for every rank to join"
        return None

    def mark_booted(self) -> None:
        self._booted = True
        sock = self._sock
        if sock is not None:
            send_json(sock, self._lock, {"type": "booted"})

    def _join_message(self) -> dict[str, Any]:
        return {
            "type": "join",
            "node_rank": self.cfg.node_rank,
            "nnodes": self.cfg.nnodes,
            "tp_size": self.cfg["tp_size"],
            "ep_size": self.cfg["ep_size"],
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }

    def _run(self) -> None:
        dist = self.cfg.dist_init()
        assert dist is not None
        host, port = dist
        self.log.info(f"Init torch distributed begin. Joining rank 0 at {host}:{port}")
        started = time.monotonic()
        while not self._stop.is_set():
            try:
                sock = socket.create_connection((host, port), timeout=3)
            except OSError as exc:
                waited = time.monotonic() - started
                self.log.throttled(
                    "connect",
                    10,
                    f"waiting for rank 0 at {host}:{port} ({exc}); retrying (waited {waited:.0f} s)",
                    "WARNING",
                )
                self._stop.wait(0.5)
                continue
            outcome = self._session(sock)
            if outcome == "exit":
                return
            self._stop.wait(0.5 if outcome == "retry" else 5)

    def _session(self, sock: socket.socket) -> str:
        """One connection to rank 0. Returns 'retry' (reconnect), 'rejected' or 'exit'."""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        lock = threading.Lock()
        send_json(sock, lock, self._join_message())
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        reader = sock.makefile("rb")
        try:
            reply = json.loads(reader.readline() or b"{}")
        except (OSError, ValueError):
            reply = {}
        if reply.get("type") == "reject":
            self.rejected = str(reply.get("reason"))
            self.log.throttled(
                "reject",
                30,
                f"rank 0 refused this rank: {self.rejected}. This rank will not become ready.",
                "ERROR",
            )
            _close(sock)
            return "rejected"
        if reply.get("type") != "welcome":
            _close(sock)
            return "retry"
        self.rejected = None
        sock.settimeout(None)
        if not send_json(sock, lock, {"type": "ack"}):
            _close(sock)
            return "retry"
        self.log.info("joined rank 0; waiting for every rank to join")
        self._sock, self._lock = sock, lock
        last_seen = [time.monotonic()]
        alive = threading.Event()
        alive.set()

        def beat() -> None:
            while alive.is_set():
                if not send_json(sock, lock, {"type": "hb"}):
                    break
                if time.monotonic() - last_seen[0] > self.knobs.peer_timeout_s:
                    if _has_unread(sock):
                        last_seen[0] = time.monotonic()
                    else:
                        _close(sock)  # unblocks the reader
                        break
                time.sleep(self.knobs.heartbeat_s)

        threading.Thread(target=beat, name="sim-worker-hb", daemon=True).start()
        reason = "connection closed"
        try:
            for line in reader:
                last_seen[0] = time.monotonic()
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                kind = msg.get("type")
                if kind == "reject":  # another process of this rank confirmed its join first
                    alive.clear()
                    _close(sock)
                    self._sock = None
                    self.rejected = str(msg.get("reason"))
                    self.log.error(
                        f"rank 0 refused this rank: {self.rejected}. This rank will not become ready."
                    )
                    return "rejected"
                if kind == "formed" and not self.formed.is_set():
                    self.formed.set()
                    self.log.info(f"all {self.cfg.nnodes} ranks joined. Init torch distributed ends.")
                    self.on_formed()
                elif kind == "shutdown":
                    alive.clear()
                    self.log.info("received the rank-0 shutdown broadcast; schedulers stopping")
                    self.on_exit(0, "rank 0 shut the group down")
                    return "exit"
        except OSError as exc:
            reason = f"connection error: {exc}"
        alive.clear()
        _close(sock)
        self._sock = None
        silent = time.monotonic() - last_seen[0]
        if silent > self.knobs.peer_timeout_s:
            reason = f"no heartbeat from rank 0 for {silent:.1f} s"
        if not self.formed.is_set():
            self.log.warning(f"lost rank 0 before the group formed ({reason}); joining again")
            return "retry"
        self.log.error(
            f"lost rank 0 ({reason}); no shutdown broadcast can arrive now. "
            f"Exiting with status 1 in {self.knobs.head_loss_exit_s:g} s"
        )
        self._stop.wait(self.knobs.head_loss_exit_s)
        self.on_exit(1, "lost rank 0")
        return "exit"
