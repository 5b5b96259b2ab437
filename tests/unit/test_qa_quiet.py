"""No GPU telemetry inside a timed window: the checkpoints of qa.quiet.Windows, and the memory
guard's probe, which reads no GPU and asks the server nothing."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from support.gates_fakes import GIB, FakeNodes, lab_cluster

from sparkctl.qa.quiet import Windows
from sparkctl.serve.guard import MemoryGuard


class FakeSampler:
    """A GPU reader that records, for each read, whether a window was open while it ran."""

    def __init__(self, windows: Windows | None = None, seconds: float = 0.0) -> None:
        self.windows = windows
        self.seconds = seconds
        self.reads: list[bool] = []

    def __call__(self) -> None:
        inside_at_start = self.windows is not None and self.windows.inside
        time.sleep(self.seconds)
        self.reads.append(inside_at_start or (self.windows is not None and self.windows.inside))


def test_a_checkpoint_inside_a_window_reads_nothing_and_is_recorded() -> None:
    windows = Windows()
    sampler = FakeSampler(windows)
    windows.sample = sampler
    assert windows.checkpoint("before", force=True)
    with windows.timed("C1"):
        assert not windows.checkpoint("inside", force=True)
    assert windows.checkpoint("after", force=True)
    assert sampler.reads == [False, False]
    assert windows.refused == ["inside"]
    described = windows.describe()
    assert described["timed_windows"] == 1 and described["gpu_checkpoints"] == 2
    assert (
        described["gpu_queries_inside_windows"] == 0 and described["checkpoints_refused_inside_windows"] == 1
    )
    assert "never inside a timed window" in described["gpu_telemetry"]
    assert "no GPU query" in described["memory"]


def test_checkpoints_not_forced_are_spaced_by_the_interval() -> None:
    now = [0.0]
    windows = Windows(interval=5.0, clock=lambda: now[0])
    sampler = FakeSampler(windows)
    windows.sample = sampler
    assert windows.checkpoint("a")
    now[0] = 3.0
    assert not windows.checkpoint("b")  # 3 s after the last read
    now[0] = 5.5
    assert windows.checkpoint("c")
    assert windows.checkpoint("d", force=True)
    assert len(sampler.reads) == 3


def test_a_window_waits_for_a_read_in_flight_and_no_read_starts_inside_one() -> None:
    # A read started from another thread (a slow SSH round) holds the window back until it ends.
    windows = Windows()
    sampler = FakeSampler(windows, seconds=0.3)
    windows.sample = sampler
    reader = threading.Thread(target=lambda: windows.checkpoint("slow", force=True))
    reader.start()
    time.sleep(0.05)
    opened = time.monotonic()
    with windows.timed("C8"):
        waited = time.monotonic() - opened
        assert not windows.checkpoint("inside", force=True)
    reader.join()
    assert waited >= 0.2 and sampler.reads == [False]
    assert windows.overlapped == 0


def test_the_memory_guard_reads_no_gpu_and_asks_the_server_nothing(tmp_path: Path) -> None:
    # The guard runs through every timed window: its probe is the watch mode without the health read
    # (SGLang's /health on rank 0 generates a token) and without NVML.
    cluster, doc = lab_cluster(tmp_path)
    nodes = FakeNodes([n.name for n in cluster.nodes], {n.name: n.rank for n in cluster.nodes})
    for st in nodes.state.values():
        st.unit, st.mem = "active", 30 * GIB
    guard = MemoryGuard(cluster, doc, nodes)
    guard.sample_once()
    assert nodes.sent and guard.lowest
    for text in nodes.sent:
        params: dict[str, Any] = json.loads(
            json.loads(text.split("pkg.probe.main(json.loads(", 1)[1].rsplit("))", 1)[0])
        )
        assert params["mode"] == "watch"
        assert not params.get("health_port")
        assert not any(key.startswith("nvml") for key in params)


def test_the_simulated_gpu_notes_each_reading_while_its_call_log_exists(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from sparkctl_sim import nvml

    log = tmp_path / "nvml-calls.log"
    monkeypatch.setenv(nvml.CALL_LOG_ENV, str(log))
    nvml.nvmlDeviceGetTemperature(0, nvml.NVML_TEMPERATURE_GPU)
    assert not log.exists()  # off unless the file is there
    log.write_text("")
    before = time.time()
    nvml.nvmlDeviceGetTemperature(0, nvml.NVML_TEMPERATURE_GPU)
    (line,) = log.read_text().splitlines()
    stamp, pid, _argv0 = line.split(" ", 2)
    assert float(stamp) >= before - 0.01 and int(pid) > 0


def test_windows_record_their_wall_clock_spans() -> None:
    windows = Windows()
    with windows.timed("C1"):
        time.sleep(0.01)
    ((opened, closed),) = windows.describe()["window_spans"]
    assert closed > opened and abs(closed - time.time()) < 5
