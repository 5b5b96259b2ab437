"""A thread that calls ``sample_once()`` every ``interval`` seconds for as long as a command runs:
the memory guard's and the thermal sampler's loop.

A subclass (a dataclass with ``interval`` and ``errors`` fields) calls ``_prepare(name)`` from its
``__post_init__`` and writes ``sample_once()``; ``finished()`` ends the loop early (the guard, once
a node breached its floor); ``first_after`` puts off the first sample. A sampling problem is
recorded in ``errors``, never raised: it must not fail the command it watches.
"""

from __future__ import annotations

import threading
import time
from typing import Self


class Periodic:
    """Start with ``start()``, stop with ``stop()`` (or use it as a context manager)."""

    interval: float
    errors: list[str]
    first_after: float = 0.0  # seconds from start() to the first sample (0: at once)

    def _prepare(self, name: str) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(15.0, 3 * self.interval))

    def sample_once(self) -> None:
        raise NotImplementedError

    def finished(self) -> bool:
        """True once sampling has nothing more to watch for."""
        return False

    def _run(self) -> None:
        if self.first_after > 0 and self._stop.wait(self.first_after):
            return
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.sample_once()
            except Exception as exc:  # never let sampling kill the command it watches
                with self._lock:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
            if self.finished():
                return
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
