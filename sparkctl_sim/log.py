"""Log lines that always say they come from the simulator, one line per write, flushed at once."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from sparkctl_sim import SIM_TAG


class Log:
    def __init__(self, node_rank: int, stream: TextIO | None = None) -> None:
        self.node_rank = node_rank
        self._stream = stream or sys.stderr
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}

    def _write(self, level: str, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        line = f"[{stamp}] {SIM_TAG} node_rank={self.node_rank} {level}: {message}\n"
        with self._lock:
            try:
                self._stream.write(line)
                self._stream.flush()
            except (OSError, ValueError):
                pass

    def info(self, message: str) -> None:
        self._write("INFO", message)

    def warning(self, message: str) -> None:
        self._write("WARNING", message)

    def error(self, message: str) -> None:
        self._write("ERROR", message)

    def throttled(self, key: str, every_s: float, message: str, level: str = "INFO") -> None:
        """Log ``message`` at most once per ``every_s`` seconds for ``key``."""
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < every_s:
                return
            self._last[key] = now
        self._write(level, message)
