"""No GPU telemetry while a batch is timed: the timed windows of `bench` and `qualify`, and the
checkpoints between them where the GPUs may be read.

The publisher's method (R4 docs/results.md): "Do not issue GPU telemetry queries while timing
requests" — an nvidia-smi/NVML poll costs the engine ~0.6 ms a step. So the thermal sampler is no
longer a thread that reads every node's GPU every 5 s for the whole run: ``Windows`` calls it at
checkpoints only — before a suite, between levels (at most every ``interval`` seconds), after the
suite — and never while a window is open. A call that would land inside a window is refused and
counted (``gpu_queries_inside_windows``, which the results carry and the tests hold at zero).

The memory guard keeps its safety role for the whole run without querying a GPU: it reads
MemAvailable, the rank unit and its container's state over SSH (``/proc/meminfo``, systemd,
docker; no NVML, no nvidia-smi, no request to the server), and kills every rank below the floor.
Inside a window a rank that dies or is OOM-killed fails its batch's requests, which then measure
nothing. ``describe()`` says both in the results.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

MEMORY_MECHANISM = (
    "memory guard: MemAvailable, the rank unit and its container's state read over SSH every ~2 s for "
    "the whole run (/proc/meminfo, systemd, docker: no GPU query, no request to the server); every rank "
    "killed below the profile's floor; inside a timed window a rank that dies or is OOM-killed fails its "
    "batch's requests, which then measure nothing"
)


@dataclass
class Windows:
    """Timed windows and the GPU checkpoints between them (one per bench or qualify run).

    ``sample``: one round of GPU telemetry on every node (the thermal sampler's ``sample_once``), or
    None where nothing is sampled. ``interval``: the least time between two checkpoint samples that
    are not forced (the sampler's old cadence).
    """

    sample: Callable[[], Any] | None = None
    interval: float = 5.0
    when: str = "before each suite, between levels (at most every {interval:g} s) and after"
    clock: Callable[[], float] = time.monotonic
    windows: int = 0
    samples: int = 0
    refused: list[str] = field(default_factory=list)  # checkpoints asked for inside a window
    spans: list[tuple[float, float]] = field(default_factory=list)  # each window's wall-clock open, close
    overlapped: int = 0  # GPU reads that ran while a window was open (0 by construction, measured)
    _open: int = 0
    _busy: bool = False  # a GPU read is running: a window waits for it to end before it opens
    _last: float | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)

    @property
    def inside(self) -> bool:
        return self._open > 0

    @contextlib.contextmanager
    def timed(self, what: str = "") -> Iterator[None]:
        """A timed window: it opens once no GPU read is running, and none starts until it closes."""
        with self._cond:
            self._cond.wait_for(lambda: not self._busy)
            self._open += 1
            self.windows += 1
        opened = time.time()
        try:
            yield
        finally:
            with self._cond:
                self.spans.append((opened, time.time()))
                self._open -= 1
                self._cond.notify_all()

    def checkpoint(self, where: str, force: bool = False) -> bool:
        """Read the GPUs here if no window is open and (unless ``force``) ``interval`` has passed
        since the last read; True when it read them. Asked inside a window, it reads nothing and
        the request is recorded (``refused``)."""
        with self._cond:
            if self._open:
                self.refused.append(where)
                return False
            now = self.clock()
            due = force or self._last is None or now - self._last >= self.interval
            if self.sample is None or not due:
                return False
            self._last = now
            self.samples += 1
            self._busy = True
        try:
            self.sample()
        finally:
            with self._cond:
                self._busy = False
                if self._open:
                    self.overlapped += 1
                self._cond.notify_all()
        return True

    def describe(self) -> dict[str, Any]:
        return {
            "gpu_telemetry": (
                f"read at checkpoints only: {self.when.format(interval=self.interval)}; never inside a "
                "timed window"
                if self.sample is not None
                else "not read"
            ),
            "memory": MEMORY_MECHANISM,
            "timed_windows": self.windows,
            "gpu_checkpoints": self.samples,
            "gpu_queries_inside_windows": self.overlapped,
            "checkpoints_refused_inside_windows": len(self.refused),
            # Wall-clock [open, close] of every window (epoch seconds): a node's own record of its
            # GPU reads can be held against them.
            "window_spans": [[round(a, 3), round(b, 3)] for a, b in self.spans],
        }


__all__ = ["MEMORY_MECHANISM", "Windows"]
