"""A stand-in for NVML on the lab's GPU-less nodes: the part of ``pynvml``'s interface the node
exporter reads (``sparkctl-exporter --nvml-module sparkctl_sim.nvml``).

One simulated GPU whose temperature, SM clock and power follow the node's load average, so the
dashboard's GPU panels have moving series on the lab as on real Sparks. The name says it is
simulated. Standard library only.
"""

from __future__ import annotations

import math
import os
import time

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NAME = "sparkctl-sim GPU (simulated)"
MAX_SM_MHZ = 2400
IDLE_C, BUSY_C = 38.0, 71.0
IDLE_W, BUSY_W = 12.0, 95.0


class NVMLError(Exception):
    """What pynvml raises; here only for an unknown handle."""


_started = False


def _busy() -> float:
    """0 (idle) .. 1 (every CPU busy), from the one-minute load average."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 0.0
    return max(0.0, min(1.0, load / (os.cpu_count() or 1)))


def nvmlInit() -> None:
    global _started
    _started = True


def nvmlShutdown() -> None:
    global _started
    _started = False


def nvmlDeviceGetCount() -> int:
    return 1 if _started else 0


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if not _started or index != 0:
        raise NVMLError(f"no simulated GPU {index}")
    return index


def nvmlDeviceGetName(handle: int) -> str:
    return NAME


def nvmlDeviceGetTemperature(handle: int, sensor: int) -> int:
    wobble = 1.5 * math.sin(time.time() / 30.0)
    return round(IDLE_C + (BUSY_C - IDLE_C) * _busy() + wobble)


def nvmlDeviceGetClockInfo(handle: int, clock: int) -> int:
    # Boosts with load, as a GPU does; far below the maximum only when idle.
    return round(MAX_SM_MHZ * (0.4 + 0.6 * _busy()))


def nvmlDeviceGetMaxClockInfo(handle: int, clock: int) -> int:
    return MAX_SM_MHZ


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    """Milliwatts, as NVML reports them."""
    return round(1000 * (IDLE_W + (BUSY_W - IDLE_W) * _busy()))
