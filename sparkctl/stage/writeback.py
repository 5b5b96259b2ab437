"""Early writeback: flush a file being written in the background, so the closing fsync is short.

Standard library only (runs on the nodes). The kernel holds written data in the page cache until
the dirty limits or the closing ``fsync``; a file smaller than those limits is therefore
produced at memory speed and then written out all at once, with the disk idle during the first
phase and the CPU idle during the second. :class:`Flusher` overlaps the two: whenever ``every``
more bytes were written, a thread of its own calls ``fdatasync`` while the producer carries on.
"""

from __future__ import annotations

import os
import threading

FLUSH_BYTES = 64 << 20
_datasync = getattr(os, "fdatasync", os.fsync)


class Flusher:
    """Call :meth:`add` with each written block's length; :meth:`close` waits and re-raises."""

    def __init__(self, fd: int, every: int = FLUSH_BYTES):
        self.fd, self.every = fd, every
        self.written = self.flushed = self.syncs = 0
        self._cond = threading.Condition()
        self._closed = False
        self.error: OSError | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def add(self, n: int) -> None:
        with self._cond:
            self.written += n
            if self.written - self.flushed >= self.every:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and self.written - self.flushed < self.every:
                    self._cond.wait()
                if self._closed:
                    return
                target = self.written
            try:
                _datasync(self.fd)
            except OSError as exc:
                self.error = exc
                return
            with self._cond:
                self.flushed = max(self.flushed, target)
                self.syncs += 1

    def close(self) -> None:
        """Stop flushing (the caller's own fsync writes the rest); raise a flush's error."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        if self.error is not None:
            raise self.error
