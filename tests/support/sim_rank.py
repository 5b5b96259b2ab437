"""One simulated rank on loopback (``sparkctl-sim-rank serve``, ``--nnodes 1``) with the argv a real
rank gets, started and restarted on one port (a test that switches the "group" between two
configurations, as bench's A/B does, keeps its endpoint)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from support.ports import free_port

API_KEY = "qa-test-key"
MODEL = "deepseek-v41-flash"
CONTEXT = 32768
FAST = {"SPARKCTL_SIM_TOKEN_RATE": "2000", "SPARKCTL_SIM_PREFILL_RATE": "2000000", "SPARKCTL_SIM_TTFT_S": "0"}


class SimRank:
    """A rank 0 on ``port``; ``start(**knobs)`` (re)starts it with the simulator's environment knobs."""

    def __init__(self, tmp_path: Path, port: int | None = None) -> None:
        self.tmp_path, self.port = tmp_path, port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tmp_path / f"sim-{self.port}.log"
        self.starts = 0

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, **knobs: str) -> SimRank:
        self.stop()
        env = {**os.environ, "SPARKCTL_SIM_BOOT_DELAY_S": "0", **FAST, **knobs}
        argv = [
            sys.executable, "-m", "sparkctl_sim.rank", "serve",
            "--model-path", str(self.tmp_path / "model"),
            "--served-model-name", MODEL,
            "--tp-size", "1", "--nnodes", "1", "--node-rank", "0",
            "--dist-init-addr", f"127.0.0.1:{free_port()}",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--context-length", str(CONTEXT),
            "--max-running-requests", "8",
            "--api-key", API_KEY,
            "--enable-metrics",
        ]  # fmt: skip
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.starts += 1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the simulated rank exited:\n{self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.root}/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"simulator not ready within 30 s:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """Stop at once, without the graceful drain of a request still in flight (a test that leaves
        another client's long request running would otherwise wait it out)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def generated_tokens(self) -> int:
        text = httpx.get(f"{self.root}/metrics", timeout=5).text
        (line,) = [ln for ln in text.splitlines() if ln.startswith("sglang:generation_tokens_total")]
        return int(float(line.split()[-1]))
