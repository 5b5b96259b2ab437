"""A busy simulated rank is not a lost one: it holds its memory (SPARKCTL_SIM_HOLD_MIB) without
falling silent, and a peer whose heartbeats wait unread (this process stalled) is not counted silent.
Either, on a loaded lab, broke a group that had just formed."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from sparkctl_sim import rank as rank_mod
from sparkctl_sim.config import parse_argv
from sparkctl_sim.knobs import load_knobs
from sparkctl_sim.log import Log
from sparkctl_sim.rank import HOLD_CHUNK, MIB, RankProcess
from sparkctl_sim.rendezvous import Head, Peer


def test_the_held_memory_is_taken_a_chunk_at_a_time_letting_other_threads_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = parse_argv(["serve", "--model-path", "/models/m", "--tp-size", "4", "--nnodes", "4",
                      "--node-rank", "1", "--dist-init-addr", "127.0.0.1:1"])
    proc = RankProcess(cfg, load_knobs({"SPARKCTL_SIM_HOLD_MIB": "100"}))
    steps: list[str] = []

    def allocate(size: int) -> bytearray:
        steps.append(f"alloc {size}")
        return bytearray(size)

    monkeypatch.setattr(rank_mod, "bytearray", allocate, raising=False)
    monkeypatch.setattr(rank_mod.time, "sleep", lambda s: steps.append(f"yield {s}"))
    proc._hold_memory()
    allocs = [int(s.split()[1]) for s in steps if s.startswith("alloc")]
    assert sum(allocs) == 100 * MIB and max(allocs) <= HOLD_CHUNK
    # the interpreter lock is given up after every chunk: heartbeat and HTTP threads keep running
    assert steps == [x for size in allocs for x in (f"alloc {size}", "yield 0")]
    assert proc.held is not None and len(proc.held) == len(allocs)


def _monitor_until_lost(head: Head, rank: int) -> None:
    """Rank 0's liveness monitor, run until it counts ``rank`` lost (10 s at most), then several more
    of its rounds."""
    loop = threading.Thread(target=head._heartbeat_loop, daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while not head.peers[rank].gone and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.4)
    finally:
        head.stopping.set()
        loop.join(5)


def test_a_peer_whose_bytes_wait_unread_is_not_counted_silent() -> None:
    """A stalled process (its reader thread did not run) must not call a live peer lost: what
    counts is whether anything arrived, and arrived bytes wait in the socket."""
    cfg = parse_argv(["serve", "--model-path", "/models/m", "--tp-size", "3", "--nnodes", "3",
                      "--node-rank", "0", "--dist-init-addr", "127.0.0.1:1"])
    knobs = load_knobs({"SPARKCTL_SIM_HEARTBEAT_S": "0.05", "SPARKCTL_SIM_PEER_TIMEOUT_S": "0.15"})
    head = Head(cfg, knobs, Log(0), on_fatal=lambda why: None)
    head.formed.set()
    long_ago = time.monotonic() - 5
    pairs = [socket.socketpair() for _ in range(2)]
    for rank, (ours, _) in enumerate(pairs, start=1):
        head.peers[rank] = Peer(rank=rank, sock=ours, addr=f"peer-{rank}", joined_at=long_ago,
                                last_seen=long_ago)
    pairs[0][1].sendall(b'{"type": "hb"}\n')  # rank 1's heartbeat arrived; no reader has run since
    _monitor_until_lost(head, 2)
    assert head.peers[2].gone and "lost node_rank 2 (no heartbeat" in head.lost[0]  # silent: lost
    assert not head.peers[1].gone and len(head.lost) == 1  # bytes waiting: alive
    for ours, theirs in pairs:
        ours.close()
        theirs.close()


def test_by_default_a_peer_silent_for_a_few_seconds_is_not_lost() -> None:
    """On the lab's 2 cores, with three labs booting side by side, a rank 0 faulting in its held
    memory fell silent for over 3 s (the default then) and its worker left a healthy group: the
    default peer timeout rides out several seconds of silence, and a longer one is still lost."""
    cfg = parse_argv(["serve", "--model-path", "/models/m", "--tp-size", "3", "--nnodes", "3",
                      "--node-rank", "0", "--dist-init-addr", "127.0.0.1:1"])
    head = Head(cfg, load_knobs({"SPARKCTL_SIM_HEARTBEAT_S": "0.05"}), Log(0), on_fatal=lambda why: None)
    head.formed.set()
    now = time.monotonic()
    pairs = [socket.socketpair() for _ in range(2)]
    for (rank, silent), (ours, _) in zip(((1, 6.0), (2, 60.0)), pairs, strict=True):
        head.peers[rank] = Peer(rank=rank, sock=ours, addr=f"peer-{rank}", joined_at=now - silent,
                                last_seen=now - silent)
    _monitor_until_lost(head, 2)
    assert head.peers[2].gone and not head.peers[1].gone, head.lost
    for ours, theirs in pairs:
        ours.close()
        theirs.close()
