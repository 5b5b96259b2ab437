"""The memory guard around a run that loads the ranks (`qualify`, `bench`): every node sampled every
~2 s on its own SSH connections; below the floor every rank is killed (the run then fails on its
requests)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sparkctl.render import plan_document
from sparkctl.serve.guard import MemoryGuard, abort_ranks

if TYPE_CHECKING:
    from sparkctl.model import Cluster


@contextlib.contextmanager
def guarded(cluster: Cluster, fleet: Callable[[Cluster], Any]) -> Iterator[MemoryGuard]:
    """The started guard while the block runs (``fleet``: how its SSH connections are made)."""
    doc = plan_document(cluster)
    connections = fleet(cluster)
    guard = MemoryGuard(cluster, doc, connections, on_breach=lambda b: abort_ranks(doc, connections))
    try:
        with guard:
            yield guard
    finally:
        connections.close()
