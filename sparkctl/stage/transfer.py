"""The fabric transfer agent: a chain of nodes, each forwarding what it receives (standard library only).

Every node runs one :func:`run_node` at the same time (one Ansible task on all nodes). Rank r
pulls each file of the manifest from rank r-1 over plain TCP on the fabric, and serves rank r+1
from its own copy — including the file it is still receiving, whose ``.partial`` grows while
the next node reads it. So N nodes take about the time of one copy.

Per file on a receiving node:

* kept — its own manifest vouches for it and ``stat`` shows it unchanged;
* adopted — a final file of the right size whose SHA-256 matches (hashed once, then recorded);
* linked — an identical file (same size and SHA-256) listed in a sibling directory's manifest on
  this node is hard-linked (same filesystem) or copied locally;
* transferred — pulled into ``<path>.partial``, hashed while it streams in, fsynced, and renamed
  to its final name only when the SHA-256 equals the manifest's. A ``.partial`` left by an
  interrupted run resumes at its length (rounded down to 1 MiB) after the upstream confirms the
  prefix digest; otherwise it starts over.

Wire protocol (one TCP connection per file, JSON lines then raw bytes)::

    → {"op": "get", "path": P, "offset": N, "prefix_sha256": H|null}
    ← {"ok": true, "start": S}  then bytes [S, size) of P     (S = N when the prefix matched, else 0)
    → {"op": "done", "node": NAME}                            (the downstream has every file)
    ← {"ok": true}

Size: one module on purpose — both ends of the chain protocol above (``Server``, ``fetch_file``),
their framing helpers and ``run_node``, which drives them on a node, read best side by side.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import queue
import shutil
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..nodeside import progress as _progress
from ..nodeside.progress import Progress
from . import manifest as mf
from .writeback import Flusher

BLOCK = 8 << 20
RESUME_ALIGN = 1 << 20
SEND_CHUNK = 64 << 20
CONNECT_BACKOFF = (0.01, 0.1)  # first and longest pause between connection attempts (seconds)


LOCK_NAME = ".sparkctl-stage.lock"  # in the target directory; manifests skip *.lock


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), to tell it from a reused PID;
    None when there is no such process, or only its zombie (it holds no lock any more)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


# A holder whose lock file was not touched for this long is hung (a live agent's ticker touches it
# twice a second): it is stopped. A live holder that beats is never stopped, only waited for.
LOCK_STALE_S = 120.0


def _holder(fd: int) -> tuple[int, str, str]:
    """(pid, kernel start time, node) that the lock file names; (0, "", "") when unreadable."""
    words = os.pread(fd, 300, 0).decode(errors="replace").split()
    pid = int(words[0]) if words and words[0].isdigit() else 0
    return pid, words[1] if len(words) > 1 else "", words[2] if len(words) > 2 else ""


def _stop_holder(pid: int, start: str) -> None:
    """SIGTERM (with SIGCONT, so a stopped process takes it), then SIGKILL, the process ``pid`` while
    it is still the one started at ``start``."""
    for sigs, grace in (((signal.SIGTERM, signal.SIGCONT), 5.0), ((signal.SIGKILL,), 5.0)):
        for sig in sigs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _start_time(pid) == start:
            time.sleep(0.05)
        if _start_time(pid) != start:
            return


def heartbeat(fd: int) -> None:
    """Tell waiting runs that this holder of the lock ``fd`` is alive (its mtime is now)."""
    with contextlib.suppress(OSError):
        os.utime(fd)


def fence(
    root: str,
    wait_s: float = 30.0,
    log: Callable[[str], None] | None = None,
    node: str = "",
    stale_s: float = LOCK_STALE_S,
) -> int:
    """Become the only writer of ``root`` on this node; returns the lock's descriptor (keep it open,
    and :func:`heartbeat` it while working).

    A live holder — another stage run on this node, or the agent of an interrupted run still
    finishing its file — is never stopped: it is waited for up to ``wait_s``, then refused with
    its PID and node named. Only a stale holder is cleared: a lock whose process is gone (the
    kernel released it; its words are overwritten) or a holder that stopped beating for
    ``stale_s`` (a hung or suspended agent: SIGTERM, then SIGKILL).
    """
    os.makedirs(root, exist_ok=True)
    fd = os.open(os.path.join(root, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o600)
    where = f"{node}: " if node else ""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        pid, start, _ = _holder(fd)
        if pid and pid != os.getpid() and _start_time(pid) != start and log:
            log(f"{where}cleared the stale lock of {root} left by pid {pid} (no longer running)")
    except BlockingIOError:
        deadline = time.monotonic() + wait_s
        waited = False
        while True:
            pid, start, holder_node = _holder(fd)
            alive = bool(pid) and pid != os.getpid() and _start_time(pid) == start
            silent = time.time() - os.fstat(fd).st_mtime
            if alive and silent > stale_s:
                if log:
                    log(f"{where}stopping the stage agent pid {pid} that holds {root} but has not "
                        f"beaten for {silent:.0f} s (hung or suspended)")
                _stop_holder(pid, start)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            if time.monotonic() >= deadline:
                os.close(fd)
                state = "running" if alive else "named in the lock, no longer running"
                on = holder_node or node or "this node"
                raise TransferError(
                    f"{where}another stage run holds {root} (pid {pid or '?'} on {on}, "
                    f"{state}, last beat {silent:.0f} s ago); waited {wait_s:.0f} s and left it alone — "
                    f"let it finish (or stop it: kill {pid or '<pid>'}) and re-run"
                ) from None
            if not waited and log:
                log(f"{where}waiting up to {wait_s:.0f} s for the run (pid {pid or '?'}) holding {root}")
            waited = True
            time.sleep(0.1)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {_start_time(os.getpid()) or 0} {node or '-'}\n".encode(), 0)
    heartbeat(fd)
    return fd


class TransferError(RuntimeError):
    """A transfer could not complete (the message names the file and the peer)."""


# --- progress, shared with the controller through a small JSON file --------------------------
# The document is nodeside.progress's (one format for every long step); the chain's ticker also
# beats the stage lock.


class Ticker(_progress.Ticker):
    """Rewrites a Progress file every ``every`` seconds until ``stop`` is set, and beats the stage
    lock once it is held (``lock_fd``: see :func:`fence`)."""

    def __init__(self, progress: Progress, every: float = 0.5):
        super().__init__(progress, every)
        self.lock_fd = -1

    def tick(self) -> None:
        if self.lock_fd >= 0:
            heartbeat(self.lock_fd)


# --- the serving side ----------------------------------------------------------------------


def _blocking_with_timeout(sock: socket.socket, seconds: float) -> None:
    """Blocking socket whose sends and receives fail after ``seconds`` without progress.

    Unlike ``settimeout`` (non-blocking plus a poll before every call), this lets ``sendfile``
    and ``recv_into`` move large chunks per system call, as a plain copy does.
    """
    sock.settimeout(None)
    tv = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)


def _send_json(sock: socket.socket, obj: dict[str, Any]) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


def _recv_line(sock: socket.socket, limit: int = 65536) -> dict[str, Any]:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise TransferError("connection closed by peer")
        buf += chunk
        if len(buf) > limit:
            raise TransferError("protocol line too long")
    doc = json.loads(buf)
    if not isinstance(doc, dict):
        raise TransferError("protocol error: not a JSON object")
    return doc


def _prefix_sha256(fd: int, length: int) -> str:
    h = hashlib.sha256()
    pos = 0
    while pos < length:
        data = os.pread(fd, min(BLOCK, length - pos), pos)
        if not data:
            break
        h.update(data)
        pos += len(data)
    return h.hexdigest()


class Server:
    """Serves the manifest's files from ``root`` to the downstream node(s).

    A file is served from its final name once this node confirmed it (``ready``), or from the
    ``.partial`` this node is receiving right now (``active``), following it as it grows.
    """

    def __init__(
        self,
        root: str,
        files: dict[str, dict[str, Any]],
        host: str,
        port: int,
        expect_done: int = 1,
        stall_s: float = 120.0,
    ):
        self.root = root
        self.files = files
        self.expect_done = expect_done
        self.stall_s = stall_s
        self.ready: set[str] = set()
        self.active: str | None = None
        self.done_from: list[str] = []
        self.last_activity = time.monotonic()
        self.cond = threading.Condition()
        try:
            self.sock = socket.create_server((host, port), reuse_port=False, backlog=16)
        except OSError as exc:
            raise TransferError(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}); is the fabric address configured "
                "(sparkctl provision) and the port free (spark_stage_port)?"
            ) from exc
        self.sock.settimeout(0.5)
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)

    def start(self) -> Server:
        self.thread.start()
        return self

    def mark_ready(self, rel: str) -> None:
        with self.cond:
            self.ready.add(rel)
            if self.active == rel:
                self.active = None
            self.cond.notify_all()

    def mark_active(self, rel: str | None) -> None:
        with self.cond:
            self.active = rel
            self.cond.notify_all()

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(OSError):
            self.sock.close()

    def wait_done(self, idle_s: float) -> None:
        """Block until the downstream said done; fail after ``idle_s`` without any request."""
        with self.cond:
            while len(self.done_from) < self.expect_done:
                if time.monotonic() - self.last_activity > idle_s:
                    raise TransferError(
                        f"the downstream node sent nothing for {idle_s:.0f} s and never finished"
                    )
                self.cond.wait(1.0)

    def _accept_loop(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _touch(self) -> None:
        with self.cond:
            self.last_activity = time.monotonic()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            _blocking_with_timeout(conn, self.stall_s)
            try:
                req = _recv_line(conn)
                self._touch()
                if req.get("op") == "done":
                    _send_json(conn, {"ok": True})  # reply first: the process may exit once it is recorded
                    with self.cond:
                        self.done_from.append(str(req.get("node", "?")))
                        self.cond.notify_all()
                elif req.get("op") == "get":
                    self._serve_file(conn, req)
                else:
                    _send_json(conn, {"ok": False, "error": f"unknown op {req.get('op')!r}"})
            except (OSError, TransferError, ValueError):
                return  # the client sees the closed connection and retries

    def _open(self, rel: str) -> tuple[int, bool]:
        """(fd, complete) for ``rel`` once it can be served; waits for it to become available."""
        final = os.path.join(self.root, rel)
        deadline = time.monotonic() + self.stall_s
        with self.cond:
            while True:
                if rel in self.ready:
                    return os.open(final, os.O_RDONLY), True
                if self.active == rel and os.path.exists(final + mf.PARTIAL):
                    return os.open(final + mf.PARTIAL, os.O_RDONLY), False
                if time.monotonic() > deadline or self.closed.is_set():
                    raise TransferError(f"{rel} did not become available within {self.stall_s:.0f} s")
                self.cond.wait(0.2)

    def _serve_file(self, conn: socket.socket, req: dict[str, Any]) -> None:
        rel = str(req.get("path"))
        entry = self.files.get(rel)
        if entry is None:
            _send_json(conn, {"ok": False, "error": f"{rel} is not in the manifest"})
            return
        size = int(entry["size"])
        fd, complete = self._open(rel)
        try:
            start = 0
            offset = int(req.get("offset") or 0)
            if 0 < offset <= size and req.get("prefix_sha256"):
                self._wait_length(fd, offset, complete)
                if _prefix_sha256(fd, offset) == req["prefix_sha256"]:
                    start = offset
            _send_json(conn, {"ok": True, "start": start})
            pos = start
            last = time.monotonic()
            out = conn.fileno()
            while pos < size:
                avail = size if complete else os.fstat(fd).st_size
                if avail < pos:
                    raise TransferError(f"{rel}: the partial file shrank (upstream restarted it)")
                if avail > pos:
                    try:
                        n = os.sendfile(out, fd, pos, min(avail - pos, SEND_CHUNK))
                    except BlockingIOError as exc:  # SO_SNDTIMEO expired: the receiver stalled
                        msg = f"{rel}: the receiver took nothing for {self.stall_s:.0f} s"
                        raise TransferError(msg) from exc
                    if n == 0:
                        raise TransferError(f"{rel}: unexpected end of file at {pos}")
                    pos += n
                    last = time.monotonic()
                    self._touch()
                    continue
                if time.monotonic() - last > self.stall_s:
                    raise TransferError(f"{rel}: no new bytes for {self.stall_s:.0f} s")
                with self.cond:
                    if rel in self.ready:
                        complete = True  # the rename happened; the open fd holds the same inode
                        continue
                time.sleep(0.01)
        finally:
            os.close(fd)

    def _wait_length(self, fd: int, length: int, complete: bool) -> None:
        deadline = time.monotonic() + self.stall_s
        while not complete and os.fstat(fd).st_size < length:
            if time.monotonic() > deadline:
                raise TransferError(f"prefix of {length} B never arrived")
            time.sleep(0.05)


# --- the receiving side --------------------------------------------------------------------


def connect(upstream: tuple[str, int], wait_s: float) -> socket.socket:
    """Connect to the upstream agent, retrying while it is still starting (up to ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    pause = CONNECT_BACKOFF[0]
    while True:
        try:
            sock = socket.create_connection(upstream, timeout=5)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransferError(
                    f"cannot reach the upstream agent at {upstream[0]}:{upstream[1]}: {exc}"
                ) from exc
            # A refused connection costs microseconds: retry soon (the upstream agent is usually
            # a few milliseconds from listening), backing off to spare an upstream that is slow.
            time.sleep(min(pause, left))
            pause = min(pause * 2, CONNECT_BACKOFF[1])


def _hash_prefix(path: str, length: int, h: Any) -> None:
    with open(path, "rb", buffering=0) as f:
        left = length
        while left:
            data = f.read(min(BLOCK, left))
            if not data:
                raise TransferError(f"{path}: shorter than {length} B while resuming")
            h.update(data)
            left -= len(data)


class Finalizer:
    """Runs the end of each received file (fsync, rename, mark ready) in order, in the background.

    So a node starts pulling the next file — and its downstream can follow it — while the
    previous one is still being flushed to disk. ``drain`` waits and raises the first error.
    """

    def __init__(self) -> None:
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except BaseException as exc:
                self.errors.append(exc)

    def submit(self, job: Callable[[], None]) -> None:
        if self.errors:
            raise TransferError(f"finishing a received file failed: {self.errors[0]}")
        self._jobs.put(job)

    def drain(self) -> None:
        self._jobs.put(None)
        self._thread.join()
        if self.errors:
            raise TransferError(f"finishing a received file failed: {self.errors[0]}")


def fetch_file(
    root: str,
    rel: str,
    size: int,
    sha256: str,
    upstream: tuple[str, int],
    progress: Progress,
    server: Server | None = None,
    bwlimit: float = 0.0,
    connect_wait_s: float = 60.0,
    stall_s: float = 120.0,
    finalizer: Finalizer | None = None,
    on_final: Callable[[str], None] | None = None,
) -> str:
    """Pull one file into ``<rel>.partial``, hashing in-stream; rename it when the digest matches.

    Returns "transferred" or "resumed". Raises TransferError on a digest mismatch (the partial
    is deleted so the next attempt starts clean) or a broken connection (the partial is kept).
    The fsync and rename run on ``finalizer`` when given (else here), then ``on_final(rel)``.
    """
    final = os.path.join(root, rel)
    part = final + mf.PARTIAL
    os.makedirs(os.path.dirname(final), exist_ok=True)
    have = os.path.getsize(part) if os.path.exists(part) else 0
    offset = min(have, size) // RESUME_ALIGN * RESUME_ALIGN
    h = hashlib.sha256()
    if offset:
        _hash_prefix(part, offset, h)
    sock = connect(upstream, connect_wait_s)
    with sock:
        _blocking_with_timeout(sock, stall_s)
        _send_json(
            sock,
            {"op": "get", "path": rel, "offset": offset, "prefix_sha256": h.hexdigest() if offset else None},
        )
        resp = _recv_line(sock)
        if not resp.get("ok"):
            raise TransferError(f"{rel}: upstream {upstream[0]} refused: {resp.get('error')}")
        start = int(resp.get("start", 0))
        if start != offset:  # the prefix did not match the source: start over
            start, h = 0, hashlib.sha256()
        fd = os.open(part, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, start)
            os.lseek(fd, start, os.SEEK_SET)
            if server is not None:
                server.mark_active(rel)
            progress.add(done=start)
            _receive(sock, fd, start, size, h, progress, bwlimit, rel, upstream)
        except BaseException:
            os.close(fd)
            raise
    digest = h.hexdigest()
    if digest != sha256:
        os.close(fd)
        os.unlink(part)
        raise TransferError(f"{rel}: SHA-256 of the received bytes {digest[:16]}… != manifest {sha256[:16]}…")

    def finish() -> None:
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(part, final)  # only now, with the digest matched and the bytes on disk
        if on_final is not None:
            on_final(rel)

    if finalizer is not None:
        finalizer.submit(finish)
    else:
        finish()
    return "resumed" if start else "transferred"


def _receive(
    sock: socket.socket,
    fd: int,
    pos: int,
    size: int,
    h: Any,
    progress: Progress,
    bwlimit: float,
    rel: str,
    upstream: tuple[str, int],
) -> None:
    """recv into rotating buffers; writing and hashing run in their own threads (manifest.HashingWriter),
    and writeback.Flusher keeps the disk writing the file while it streams in (so the closing
    fsync has little left)."""
    flusher = Flusher(fd)

    def written(n: int) -> None:
        flusher.add(n)
        progress.add(done=n, moved=n)

    writer = mf.HashingWriter(fd, h, BLOCK, buffers=4, on_done=written)
    started = time.monotonic()
    received = 0
    try:
        while pos < size:
            buf = writer.buffer()
            view = memoryview(buf)
            want = min(BLOCK, size - pos)
            got = 0
            while got < want:
                n = sock.recv_into(view[got:want])
                if n == 0:
                    break
                got += n
            writer.submit(buf, got)
            pos += got
            received += got
            if got < want:
                raise TransferError(f"{rel}: connection to {upstream[0]} closed at byte {pos} of {size}")
            if bwlimit > 0:
                ahead = received / bwlimit - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
    finally:
        try:
            try:
                writer.close()
            finally:
                flusher.close()
        except OSError as exc:
            raise TransferError(f"{rel}: writing failed: {exc}") from exc


# --- reuse of identical files already on the node ------------------------------------------


def find_identical(root: str, sha256: str, size: int, search: list[str]) -> str | None:
    """A file with this digest and size in a manifest of a sibling directory, unchanged since."""
    for other in search:
        if os.path.abspath(other) == os.path.abspath(root):
            continue
        try:
            doc = mf.load(other)
        except mf.ManifestError:
            continue
        for e in (doc or {}).get("files", []):
            if e.get("sha256") == sha256 and e.get("size") == size:
                path = os.path.join(other, e["path"])
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                if st.st_size == size and st.st_mtime_ns == e.get("mtime_ns"):
                    return path
    return None


def sibling_dirs(root: str) -> list[str]:
    parent = os.path.dirname(os.path.abspath(root))
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    return [os.path.join(parent, n) for n in names if os.path.isdir(os.path.join(parent, n))]


def link_or_copy(src: str, dst: str, sha256: str, progress: Progress) -> str:
    """Hard-link ``src`` to ``dst`` (same filesystem) or copy it through a verified partial."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    part = dst + mf.PARTIAL
    with contextlib.suppress(FileNotFoundError):
        os.unlink(part)
    try:
        os.link(src, part)
        os.replace(part, dst)
        return "linked"
    except OSError:
        pass
    shutil.copyfile(src, part)
    shutil.copystat(src, part)  # same mtime as the source: a re-run recognises the copy by stat
    if mf.file_sha256(part) != sha256:
        os.unlink(part)
        raise TransferError(f"{src}: local copy does not match its manifest digest")
    os.replace(part, dst)
    return "copied"


# --- one node's whole part of the chain -------------------------------------------------------


@dataclass
class NodeResult:
    node: str
    changed: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # path -> action
    bytes_moved: int = 0
    bytes_total: int = 0
    seconds: float = 0.0
    downstream_done: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rate_mib_s"] = round(self.bytes_moved / (1 << 20) / self.seconds, 1) if self.seconds else 0.0
        return d


def plan_local(root: str, expected: dict[str, Any], check_mode: bool = False) -> dict[str, str]:
    """What each file needs on this node: keep | adopt | link | fetch (no data moved)."""
    local = None
    with contextlib.suppress(mf.ManifestError):
        local = mf.load(root)
    quick = mf.quick_ok(root, expected, local)
    search = sibling_dirs(root)
    out = {}
    for e in expected["files"]:
        rel = mf.safe_relpath(e["path"])
        final = os.path.join(root, rel)
        if quick.get(e["path"]):
            out[rel] = "keep"
        elif os.path.isfile(final) and os.path.getsize(final) == e["size"]:
            out[rel] = "adopt"
        elif find_identical(root, e["sha256"], e["size"], search):
            out[rel] = "link"
        else:
            out[rel] = "fetch"
    return out


def run_node(
    node: str,
    root: str,
    expected: dict[str, Any],
    listen: tuple[str, int] | None,
    upstream: tuple[str, int] | None,
    progress_path: str = "",
    expect_downstream: int = 1,
    bwlimit: float = 0.0,
    stall_s: float = 120.0,
    connect_wait_s: float = 120.0,
    retries: int = 3,
    log: Callable[[str], None] | None = None,
    lock_wait_s: float | None = None,
) -> NodeResult:
    """This node's part of the chain: confirm/receive every file, serve the next node, write the manifest.

    ``lock_wait_s`` bounds the wait for another run holding ``root`` (default: ``stall_s`` + 10 s,
    at least 30 s — an interrupted run's agent gives up within ``stall_s`` once its peers are gone).
    """
    started = time.monotonic()
    files = {mf.safe_relpath(e["path"]): e for e in expected["files"]}
    progress = Progress(
        node,
        step="fanout",
        bytes_total=sum(int(e["size"]) for e in files.values()),
        files_total=len(files),
        path=progress_path,
    )
    if progress_path:
        os.makedirs(os.path.dirname(progress_path), exist_ok=True)
    progress.set(state="checking")
    ticker = Ticker(progress)
    ticker.start()
    result = NodeResult(node, bytes_total=progress.bytes_total)
    server = None
    lock_fd = -1
    try:
        # One writer per node: a live holder (a concurrent run, or an interrupted run's agent, which
        # gives up after stall_s without data) is waited for, never stopped; a hung one is.
        lock_fd = fence(root, wait_s=lock_wait_s if lock_wait_s is not None else max(30.0, stall_s + 10),
                        log=log, node=node)
        ticker.lock_fd = lock_fd
        if listen is not None:
            server = Server(root, files, listen[0], listen[1], expect_downstream, stall_s).start()
        todo = plan_local(root, expected)
        search = sibling_dirs(root)
        # First everything confirmable without the network, so the downstream can start on it.
        for rel, action in todo.items():
            e = files[rel]
            if action == "keep":
                pass
            elif action == "adopt":
                progress.set(current=rel)
                if mf.file_sha256(os.path.join(root, rel)) != e["sha256"]:
                    todo[rel] = "fetch"
                    continue
            elif action == "link":
                src = find_identical(root, e["sha256"], e["size"], search)
                if src is None:
                    todo[rel] = "fetch"
                    continue
                todo[rel] = link_or_copy(src, os.path.join(root, rel), e["sha256"], progress)
            else:
                continue
            progress.add(done=int(e["size"]))
            progress.set(files_done=progress.files_done + 1)
            if server is not None:
                server.mark_ready(rel)
        missing = [rel for rel, a in todo.items() if a == "fetch"]
        if missing and upstream is None:
            raise TransferError(f"{node} is the source but lacks {len(missing)} file(s), e.g. {missing[0]}")
        progress.set(state="receiving" if missing else "serving")

        def on_final(rel: str) -> None:
            progress.set(files_done=progress.files_done + 1)
            if server is not None:
                server.mark_ready(rel)

        finalizer = Finalizer()
        for rel in missing:
            e = files[rel]
            progress.set(current=rel)
            for attempt in range(1, retries + 1):
                try:
                    todo[rel] = fetch_file(
                        root,
                        rel,
                        int(e["size"]),
                        e["sha256"],
                        upstream,  # type: ignore[arg-type]
                        progress,
                        server,
                        bwlimit,
                        connect_wait_s,
                        stall_s,
                        finalizer,
                        on_final,
                    )
                    break
                except (TransferError, OSError) as exc:  # OSError: a reset or a receive timeout
                    if log:
                        log(f"{rel}: attempt {attempt} failed: {exc}")
                    if attempt == retries:
                        if isinstance(exc, TransferError):
                            raise
                        raise TransferError(f"{rel}: {exc} (from {upstream[0]})") from exc  # type: ignore[index]
                    # count only what is on disk again on the next attempt
                    with progress._lock:
                        progress.bytes_done = sum(
                            int(files[r]["size"]) for r, a in todo.items() if a != "fetch"
                        )
                    time.sleep(1.0)
        finalizer.drain()  # every received file fsynced and renamed
        # The node's own manifest: the expected digests with local modification times.
        local = {
            "version": mf.VERSION,
            "source": expected.get("source", {}),
            "total_bytes": progress.bytes_total,
            "files": [],
        }
        for e in expected["files"]:
            st = os.stat(os.path.join(root, mf.safe_relpath(e["path"])))
            local["files"].append(
                {"path": e["path"], "size": e["size"], "sha256": e["sha256"], "mtime_ns": st.st_mtime_ns}
            )
        mf.save(root, local)
        if upstream is not None:
            sock = connect(upstream, connect_wait_s)
            with sock:
                _send_json(sock, {"op": "done", "node": node})
                _recv_line(sock)
        if server is not None:
            progress.set(state="serving", current="")
            server.wait_done(stall_s)
            result.downstream_done = list(server.done_from)
        progress.set(state="done", current="")
    except BaseException as exc:
        progress.set(state="failed", error=str(exc))
        raise
    finally:
        ticker.stop.set()
        ticker.join(5)  # no heartbeat on a descriptor number closed below (and perhaps reused)
        ticker.lock_fd = -1
        if server is not None:
            server.close()
        if lock_fd >= 0:
            os.close(lock_fd)  # releases the lock
    result.files = dict(todo)
    counts: dict[str, int] = {}
    for action in todo.values():
        counts[action] = counts.get(action, 0) + 1
    result.counts = counts
    result.bytes_moved = progress.bytes_moved
    result.changed = any(a not in ("keep",) for a in todo.values())
    result.seconds = time.monotonic() - started
    progress.write()
    return result
