"""Loopback ports for servers a test starts in another process.

Asking the kernel for port 0 and closing the socket hands out a port from the ephemeral range, where
the next outbound connection of any process on the machine, or another test worker doing the same,
may take it before the server binds it (a simulated rank then never answered: a timed-out fixture in
a CI run). These come from below that range instead (outbound connections never get them), from a
block of its own per pytest-xdist worker, in order, each checked free before it is handed out.
"""

from __future__ import annotations

import itertools
import os
import random
import socket

LOW, HIGH = 20000, 32000  # below Linux's default ip_local_port_range (32768-60999)
BLOCKS = 12  # one per worker: gw0..gw11 (beyond, blocks are shared and the free check still holds)
SIZE = (HIGH - LOW) // BLOCKS


def _worker_index() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = name.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0


_block = LOW + (_worker_index() % BLOCKS) * SIZE
# A random start in the block keeps two pytest runs of the same worker name (the lab's streams,
# a run beside CI) apart as well.
_next = itertools.count(random.randrange(SIZE))


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port no one is listening on, outside the ephemeral range."""
    for _ in range(SIZE):
        port = _block + next(_next) % SIZE
        if _free(port):
            return port
    raise RuntimeError(f"no free loopback port in {_block}-{_block + SIZE - 1}")


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports, as :func:`free_port`."""
    return [free_port() for _ in range(n)]
