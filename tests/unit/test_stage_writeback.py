"""Early writeback while a file streams in, and the chain's quick reconnect."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from sparkctl.stage import transfer as tx
from sparkctl.stage import writeback


def test_flusher_syncs_while_the_file_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced_at: list[int] = []
    fd = os.open(tmp_path / "f.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    monkeypatch.setattr(writeback, "_datasync", lambda f: synced_at.append(os.fstat(f).st_size))
    flusher = writeback.Flusher(fd, every=1 << 20)
    block = os.urandom(256 << 10)
    for _ in range(16):  # 4 MiB in 256 KiB writes
        os.write(fd, block)
        flusher.add(len(block))
        time.sleep(0.01)
    flusher.close()
    os.close(fd)
    assert flusher.syncs >= 2 and len(synced_at) == flusher.syncs
    assert synced_at[0] < 4 << 20  # the first flush ran while writing went on, not at the end


def test_a_failed_flush_is_raised_at_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writeback, "_datasync", fail)
    flusher = writeback.Flusher(0, every=10)
    flusher.add(100)
    deadline = time.monotonic() + 5
    while flusher.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(OSError, match="No space left"):
        flusher.close()


@pytest.mark.timing
def test_connect_reaches_a_late_upstream_within_a_fraction_of_a_second() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ready = threading.Event()

    def listen_late() -> None:
        time.sleep(0.1)
        srv = socket.create_server(("127.0.0.1", port))
        ready.set()
        conn, _ = srv.accept()
        conn.close()
        srv.close()

    threading.Thread(target=listen_late, daemon=True).start()
    started = time.monotonic()
    sock = tx.connect(("127.0.0.1", port), wait_s=10)
    sock.close()
    assert ready.is_set()
    assert time.monotonic() - started < 0.45  # a fixed 0.5 s poll would take at least 0.5 s


@pytest.mark.timing
def test_connect_gives_up_at_its_deadline_naming_the_upstream() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(tx.TransferError, match=f"127.0.0.1:{port}"):
        tx.connect(("127.0.0.1", port), wait_s=0.3)
    assert time.monotonic() - started < 1.0
