"""A stand-in for NVML on the lab's GPU-less nodes: the part of ``pynvml``'s interface that the node
exporter (``sparkctl-exporter --nvml-module sparkctl_sim.nvml``) and the status probe read.

One simulated GPU whose temperature, utilization, SM clock and power follow the node's load
average, so the dashboard's GPU panels have moving series on the lab as on real Sparks. Like a real
GPU it boosts its clock under load: from half load on it runs at the maximum. The name says it is
simulated. Standard library only.

The knob for thermal tests: a JSON file (``/run/sparkctl-sim/nvml.json``, or the path in
``$SPARKCTL_SIM_NVML_FILE``) pins readings, e.g. a hot, throttled GPU under full load::

    {"temp_c": 95, "sm_clock_ratio": 0.45, "util_pct": 100, "power_w": 140}

Keys left out keep following the load; remove the file to go back. It is read on every call, so
the exporter and the probe see a change at once.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import namedtuple
from typing import Any

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NAME = "sparkctl-sim GPU (simulated)"
MAX_SM_MHZ = 2400
IDLE_C, BUSY_C = 38.0, 71.0
IDLE_W, BUSY_W = 12.0, 95.0
IDLE_CLOCK_RATIO = 0.4
OVERRIDE_FILE = "/run/sparkctl-sim/nvml.json"
OVERRIDE_ENV = "SPARKCTL_SIM_NVML_FILE"
OVERRIDE_KEYS = ("temp_c", "sm_clock_ratio", "util_pct", "power_w")
# Where every reading is noted (time, pid, the reader's argv[0]) while the file exists: the lab's
# tests hold the node's own record of GPU queries against bench's timed windows.
CALL_LOG = "/run/sparkctl-sim/nvml-calls.log"
CALL_LOG_ENV = "SPARKCTL_SIM_NVML_CALL_LOG"

Utilization = namedtuple("Utilization", ["gpu", "memory"])


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


def overrides() -> dict[str, float]:
    """The pinned readings of the knob file (empty without one; a broken file pins nothing)."""
    path = os.environ.get(OVERRIDE_ENV) or OVERRIDE_FILE
    try:
        with open(path, encoding="utf-8") as f:
            doc: Any = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    out = {}
    for key in OVERRIDE_KEYS:
        value = doc.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    return out


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


def note_call() -> None:
    """Append one line to the call log when it exists (nothing otherwise)."""
    path = os.environ.get(CALL_LOG_ENV, CALL_LOG)
    if os.path.exists(path):
        with open(path, "a") as log:
            log.write(f"{time.time():.3f} {os.getpid()} {sys.argv[0] or '-'}\n")


def nvmlDeviceGetTemperature(handle: int, sensor: int) -> int:
    note_call()
    pinned = overrides().get("temp_c")
    if pinned is not None:
        return round(pinned)
    wobble = 1.5 * math.sin(time.time() / 30.0)
    return round(IDLE_C + (BUSY_C - IDLE_C) * _busy() + wobble)


def nvmlDeviceGetUtilizationRates(handle: int) -> Utilization:
    pinned = overrides().get("util_pct")
    gpu = round(pinned if pinned is not None else 100 * _busy())
    return Utilization(gpu=gpu, memory=gpu // 2)


def nvmlDeviceGetClockInfo(handle: int, clock: int) -> int:
    pinned = overrides().get("sm_clock_ratio")
    if pinned is not None:
        return round(MAX_SM_MHZ * pinned)
    # Boosts with load, as a GPU does: at the maximum from half load on, lower only when idle.
    return round(MAX_SM_MHZ * min(1.0, IDLE_CLOCK_RATIO + 2 * (1 - IDLE_CLOCK_RATIO) * _busy()))


def nvmlDeviceGetMaxClockInfo(handle: int, clock: int) -> int:
    return MAX_SM_MHZ


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    """Milliwatts, as NVML reports them."""
    pinned = overrides().get("power_w")
    watts = pinned if pinned is not None else IDLE_W + (BUSY_W - IDLE_W) * _busy()
    return round(1000 * watts)
