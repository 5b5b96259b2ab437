"""Checkpoint manifests: every file's size and SHA-256, the idempotence key of staging.

Standard library only (runs on the nodes too). A manifest is JSON::

    {"version": 1, "files": [{"path": "config.json", "size": 165, "sha256": "…", "mtime_ns": …}, …],
     "total_bytes": …, "source": {…}}

Each node keeps its own copy as ``<model_dir>/.sparkctl-manifest.json`` with its local
modification times, so a re-run confirms a file with one ``stat`` instead of re-reading it; a
full verification (``--verify-only``) re-reads and re-hashes everything.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..nodeside import manifests as reader

MANIFEST_NAME = reader.CHECKPOINT_MANIFEST
PARTIAL = ".partial"
VERSION = 1
HASH_BLOCK = 16 << 20
# Not part of the checkpoint: Hugging Face's download cache inside local_dir, VCS metadata.
IGNORED_DIRS = frozenset({".cache", ".git", ".huggingface"})


# A manifest is unreadable or does not describe the directory (the message says which file).
ManifestError = reader.ManifestError


def file_sha256(path: str, block: int = HASH_BLOCK, on_bytes: Callable[[int], None] | None = None) -> str:
    """SHA-256 of a whole file, read in large blocks (``on_bytes`` gets each block's length)."""
    h = hashlib.sha256()
    buf = bytearray(block)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
            if on_bytes is not None:
                on_bytes(n)
    return h.hexdigest()


def list_files(root: str) -> list[str]:
    """Relative POSIX paths of the checkpoint's regular files, sorted (no manifest, no partials)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS)
        rel_dir = os.path.relpath(dirpath, root)
        for name in filenames:
            if name == MANIFEST_NAME or name.endswith(PARTIAL) or name.endswith(".lock"):
                continue
            path = os.path.join(dirpath, name)
            if not os.path.isfile(path) or (os.path.islink(path) and not os.path.exists(path)):
                continue
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            out.append(rel)
    return sorted(out)


def build(
    root: str,
    previous: dict[str, Any] | None = None,
    full: bool = False,
    source: dict[str, Any] | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Manifest of ``root``; digests of files unchanged since ``previous`` (size, mtime) are reused."""
    prev = {e["path"]: e for e in (previous or {}).get("files", []) if isinstance(e, dict) and "path" in e}
    files = []
    for rel in list_files(root):
        st = os.stat(os.path.join(root, rel))
        old = prev.get(rel)
        if not full and old and old.get("size") == st.st_size and old.get("mtime_ns") == st.st_mtime_ns:
            digest = old["sha256"]
        else:
            digest = file_sha256(os.path.join(root, rel), on_bytes=on_bytes)
        files.append({"path": rel, "size": st.st_size, "sha256": digest, "mtime_ns": st.st_mtime_ns})
    return {
        "version": VERSION,
        "files": files,
        "total_bytes": sum(f["size"] for f in files),
        "source": dict(source or {}),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def content_key(manifest: dict[str, Any]) -> str:
    """One digest over (path, size, sha256) of every file: equal keys mean equal checkpoints."""
    h = hashlib.sha256()
    for e in sorted(manifest.get("files", []), key=lambda e: e["path"]):
        h.update(f"{e['path']}\0{e['size']}\0{e['sha256']}\n".encode())
    return h.hexdigest()


def load(root: str) -> dict[str, Any] | None:
    """``<root>/.sparkctl-manifest.json`` (None when absent; ManifestError when not a manifest)."""
    doc: dict[str, Any] | None = reader.read_checkpoint(root)
    return doc


def save(root: str, manifest: dict[str, Any]) -> None:
    """Write ``<root>/.sparkctl-manifest.json`` atomically (temp file, fsync, rename)."""
    path = os.path.join(root, MANIFEST_NAME)
    tmp = path + PARTIAL
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def entries(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["path"]: e for e in manifest.get("files", [])}


def safe_relpath(rel: str) -> str:
    """Refuse absolute paths and ``..`` in a manifest path (it names a file under the model dir)."""
    norm = os.path.normpath(rel)
    if os.path.isabs(rel) or norm.startswith("..") or "\0" in rel or norm in (".", ""):
        raise ManifestError(f"unsafe path in manifest: {rel!r}")
    return norm


def quick_ok(root: str, expected: dict[str, Any], local: dict[str, Any] | None) -> dict[str, bool]:
    """Per file of ``expected``: does the node's own manifest vouch for it and is it unchanged since?"""
    mine = entries(local or {})
    out = {}
    for e in expected.get("files", []):
        rel = e["path"]
        rec = mine.get(rel)
        ok = False
        if rec and rec.get("sha256") == e["sha256"] and rec.get("size") == e["size"]:
            try:
                st = os.stat(os.path.join(root, rel))
                ok = st.st_size == e["size"] and st.st_mtime_ns == rec.get("mtime_ns")
            except OSError:
                ok = False
        out[rel] = ok
    return out


def verify(
    root: str,
    expected: dict[str, Any],
    full: bool = True,
    local: dict[str, Any] | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> list[str]:
    """Problems of ``root`` against ``expected`` ([] = every file present with the right bytes).

    ``full`` re-reads every file; otherwise sizes and the local manifest's modification times.
    """
    problems = []
    quick = quick_ok(root, expected, local) if not full else {}
    for e in expected.get("files", []):
        rel = e["path"]
        path = os.path.join(root, rel)
        try:
            size = os.path.getsize(path)
        except OSError:
            problems.append(f"{rel}: missing")
            continue
        if size != e["size"]:
            problems.append(f"{rel}: {size} B, want {e['size']} B")
            continue
        if full:
            digest = file_sha256(path, on_bytes=on_bytes)
            if digest != e["sha256"]:
                problems.append(
                    f"{rel}: SHA-256 {digest[:16]}… differs from the manifest's {e['sha256'][:16]}…"
                )
        elif not quick.get(rel):
            problems.append(f"{rel}: not confirmed by this node's manifest (changed since staging?)")
    return problems


class HashingWriter:
    """Write buffers to a file descriptor and hash them, in two threads (both release the GIL).

    The producer takes a free buffer with :meth:`buffer`, fills it and hands it back with
    :meth:`submit`; the writer thread writes it, then the hasher thread feeds it to ``digest``
    and recycles it. So receiving (or packing), writing and hashing overlap, and the digest is
    computed in-stream without reading the file back. :meth:`close` waits for both and raises
    the first error.
    """

    def __init__(
        self,
        fd: int,
        digest: Any,
        size: int,
        buffers: int = 4,
        on_done: Callable[[int], None] | None = None,
    ):
        self.fd, self.digest, self.on_done = fd, digest, on_done
        self._free: queue.Queue[bytearray] = queue.Queue()
        for _ in range(buffers):
            self._free.put(bytearray(size))
        self._to_write: queue.Queue[tuple[bytearray, int] | None] = queue.Queue()
        self._to_hash: queue.Queue[tuple[bytearray, int] | None] = queue.Queue()
        self.errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._writer, daemon=True),
            threading.Thread(target=self._hasher, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def buffer(self) -> bytearray:
        if self.errors:
            raise self.errors[0]
        return self._free.get()

    def submit(self, buf: bytearray, n: int) -> None:
        self._to_write.put((buf, n))

    def _writer(self) -> None:
        while (item := self._to_write.get()) is not None:
            buf, n = item
            if not self.errors:
                try:
                    view = memoryview(buf)[:n]
                    done = 0
                    while done < n:
                        done += os.write(self.fd, view[done:])
                except BaseException as exc:
                    self.errors.append(exc)
            self._to_hash.put(item)
        self._to_hash.put(None)

    def _hasher(self) -> None:
        while (item := self._to_hash.get()) is not None:
            buf, n = item
            if not self.errors:
                self.digest.update(memoryview(buf)[:n])
                if self.on_done is not None:
                    self.on_done(n)
            self._free.put(buf)

    def close(self) -> None:
        self._to_write.put(None)
        for t in self._threads:
            t.join()
        if self.errors:
            raise self.errors[0]
