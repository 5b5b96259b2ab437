"""The one fake pynvml: the calls sparkctl's readers make (``sparkctl.nodeside.probe.nvml_devices``,
the exporter's ``Nvml``), answered from ``FakeGpu`` readings. A reading given as None is one the
board does not support: its call raises as NVML does (NVML_ERROR_NOT_SUPPORTED)."""

from __future__ import annotations

import types
from dataclasses import dataclass


class NvmlNotSupported(RuntimeError):
    def __init__(self) -> None:
        super().__init__("NVML_ERROR_NOT_SUPPORTED")


@dataclass
class FakeGpu:
    """One GPU's readings as pynvml returns them (°C, MHz, milliwatts, percent)."""

    temp_c: int = 67
    sm_mhz: int = 1200
    max_sm_mhz: int = 2400
    power_mw: int | None = None
    util_pct: int | None = None
    name: bytes = b"NVIDIA GB10"


def _supported(value: int | None) -> int:
    if value is None:
        raise NvmlNotSupported
    return value


class FakeNvml:
    """pynvml's interface over ``gpus`` (one default GPU when none is given); handles are the indexes.
    ``inits`` counts ``nvmlInit``, ``shut`` says whether ``nvmlShutdown`` was called."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1

    def __init__(self, *gpus: FakeGpu) -> None:
        self.gpus = list(gpus) or [FakeGpu()]
        self.inits = 0
        self.shut = False

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self.gpus[h].name

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self.gpus[h].temp_c

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return self.gpus[h].sm_mhz

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return self.gpus[h].max_sm_mhz

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return _supported(self.gpus[h].power_mw)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=_supported(self.gpus[h].util_pct), memory=40)
