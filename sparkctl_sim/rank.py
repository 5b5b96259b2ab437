"""``sparkctl-sim-rank``: one simulated SGLang rank (entry point and lifecycle).

Usage: ``sparkctl-sim-rank [serve] <the SGLang argv>`` with the environment a real rank gets; the
simulator's own knobs are ``SPARKCTL_SIM_*`` environment variables (``--sim-help`` lists them).

Lifecycle: with ``SPARKCTL_SIM_KIT_DIR`` set, first the serving kit launcher's checks (simulated,
``sparkctl_sim.kit``: a failure logs what is wrong and exits 1 without serving), then the kit's
build products its Engram backend imports (one line per missing or wrong file, exit 1) → bind HTTP
(answers 503 until ready) → rendezvous at --dist-init-addr → "load" (boot delay, memory held; the
kit's readiness markers) → workers report ready, rank 0 warms up and logs "The server is fired up
and ready to roll!". SIGTERM on rank 0 drains in-flight requests (at once with SGL_FORCE_SHUTDOWN=1 or
when the group is already broken), broadcasts shutdown and exits 0; workers ignore SIGTERM and exit
0 on that broadcast, or 1 some seconds after losing rank 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

from sparkctl_sim import SGLANG_VERSION, metrics
from sparkctl_sim.config import PROG, ArgError, ServerConfig, parse_argv
from sparkctl_sim.kit import (
    KitCheckFailed,
    KitReport,
    check_build_products,
    check_kit,
    engram_markers,
    moe_layout_marker,
    post_result_markers,
    roce_markers,
)
from sparkctl_sim.knobs import KNOBS, Knobs, load_knobs
from sparkctl_sim.log import Log
from sparkctl_sim.model import Responder
from sparkctl_sim.rendezvous import Head, Worker
from sparkctl_sim.server import Scheduler, SimHTTPServer, banner, environment_snapshot

MIB = 1024 * 1024
HOLD_CHUNK = 16 * MIB


class RankProcess:
    def __init__(self, cfg: ServerConfig, knobs: Knobs, log: Log | None = None) -> None:
        self.cfg = cfg
        self.knobs = knobs
        self.log = log or Log(cfg.node_rank)
        self.started_wall = time.time()
        self.booted = threading.Event()  # this rank finished "loading"
        self.up = threading.Event()  # rank 0: warmed up, serving
        self.exiting = threading.Event()
        self.sched = Scheduler(cfg.max_running_requests)
        self.responder = Responder(knobs, cfg.served_model_name)
        self.held: list[bytearray] | None = None
        self.kit: KitReport | None = None  # set once the kit launcher's checks passed
        self._exit = threading.Event()
        self._exit_code = 0
        self._exit_lock = threading.Lock()
        self.group: Head | Worker
        if cfg.is_head:
            self.group = Head(cfg, knobs, self.log, on_fatal=self._fatal)
        else:
            self.group = Worker(cfg, knobs, self.log, on_formed=self._on_formed, on_exit=self.request_exit)
        self.http: SimHTTPServer | None = None

    # -- status ---------------------------------------------------------------------------------

    def status_reason(self) -> str:
        problem = self.group.problem()
        if problem:
            return problem
        if not self.booted.is_set():
            return "loading (simulated weight load)"
        return "ready"

    def health_problem(self) -> str | None:
        """None when rank 0 can serve; otherwise why /health, /ready and the API answer 503."""
        if self.exiting.is_set():
            return "shutting down"
        problem = self.group.problem()
        if problem:
            return problem
        if not self.booted.is_set():
            return "loading (simulated weight load)"
        if not self.up.is_set():
            return (
                "warming up"
                if not self.knobs.has("never-ready")
                else "warmup never finishes (fault never-ready)"
            )
        return None

    def status_word(self) -> str:
        if self.exiting.is_set():
            return "Exiting"
        if isinstance(self.group, Head) and self.group.lost:
            return "UnHealthy"
        return "Up" if self.up.is_set() else "Starting"

    # -- lifecycle ------------------------------------------------------------------------------

    def request_exit(self, code: int, why: str) -> None:
        with self._exit_lock:
            if self._exit.is_set():
                return
            self._exit_code = code
            self.log.info(f"exiting with status {code}: {why}")
            self._exit.set()

    def _fatal(self, message: str) -> None:
        self.log.error(message)
        self.request_exit(1, "fatal error")

    def _on_formed(self) -> None:
        threading.Thread(target=self._boot, name="sim-boot", daemon=True).start()

    def _hold_memory(self) -> None:
        """Allocate and touch SPARKCTL_SIM_HOLD_MIB, a chunk at a time: one allocation of it all would
        hold the interpreter lock for as long as the kernel takes to fault it in, and the heartbeat
        threads would fall silent meanwhile (a busy node then looks like a lost one to its peers)."""
        if self.knobs.hold_mib <= 0:
            return
        chunks: list[bytearray] = []
        left = self.knobs.hold_mib * MIB
        try:
            while left > 0:
                chunk = bytearray(min(left, HOLD_CHUNK))  # zero-filled: every page is touched
                chunks.append(chunk)
                left -= len(chunk)
                time.sleep(0)  # let the heartbeat and HTTP threads run between chunks
        except MemoryError:
            self._fatal(f"cannot allocate SPARKCTL_SIM_HOLD_MIB={self.knobs.hold_mib} MiB (out of memory)")
            return
        self.held = chunks
        self.log.info(f"holding {self.knobs.hold_mib} MiB of memory (simulated weights and KV cache)")

    def _boot(self) -> None:
        if self.kit is not None:
            for line in roce_markers(self.cfg, os.environ):
                self.log.info(line)
        self.log.info("Load weight begin. (simulated)")
        self._hold_memory()
        time.sleep(self.knobs.boot_delay_s)
        if self.kit is not None:
            for line in [*engram_markers(self.kit, self.cfg, os.environ), moe_layout_marker(self.cfg),
                         *post_result_markers(self.cfg, os.environ)]:
                self.log.info(line)
        self.log.info(f"Load weight end. (simulated, {self.knobs.boot_delay_s:g} s)")
        self.booted.set()
        if isinstance(self.group, Worker):
            self.group.mark_booted()
            self.log.info(
                f"Dummy health check server ready on {self.cfg['host']}:{self.cfg['port']}: node_rank "
                f"{self.cfg.node_rank} finished init (/health, /ping and /health_generate now return 200)"
            )
            return
        # rank 0: wait for the whole group, then warm up
        while not self._exit.is_set():
            problem = self.group.problem()
            if problem is None:
                break
            if isinstance(self.group, Head) and self.group.lost:
                return
            self.log.throttled("warmup-wait", 10, f"waiting before warmup: {problem}")
            time.sleep(0.1)
        if self._exit.is_set():
            return
        if self.knobs.has("never-ready"):
            self.log.warning("fault never-ready: the warmup request never completes; /ready stays 503")
            return
        self.log.info("Start of warmup: sending a warmup generate request (simulated)")
        self.up.set()
        self.log.info("The server is fired up and ready to roll!")

    def _drain_and_exit(self) -> None:
        force = os.environ.get("SGL_FORCE_SHUTDOWN", "").lower() in ("1", "true", "yes", "on")
        broken = isinstance(self.group, Head) and bool(self.group.lost)
        self.exiting.set()
        if force or broken:
            why = "SGL_FORCE_SHUTDOWN=1" if force else "the group is already unhealthy"
            self.log.info(f"SIGTERM received; shutting down at once ({why})")
        else:
            self.log.info(
                f"SIGTERM received; draining: new requests get 503, waiting for {self.sched.in_flight} "
                "in-flight request(s) (no time limit; SGL_FORCE_SHUTDOWN=1 skips this)"
            )
            while self.sched.in_flight:
                self.log.throttled("drain", 5, f"still {self.sched.in_flight} request(s) in flight")
                time.sleep(0.1)
        if isinstance(self.group, Head):
            self.group.broadcast_shutdown()
            self.log.info("broadcast shutdown to every worker rank")
        self.request_exit(0, "graceful shutdown")

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if not self.cfg.is_head:
            if signum == signal.SIGINT:
                self.request_exit(130, "SIGINT")
                return
            self.log.info(
                f"SIGTERM received on node_rank {self.cfg.node_rank}; waiting for the rank-0 ShutdownReq "
                "broadcast to stop the schedulers"
            )
            return
        if self.exiting.is_set():
            self.log.info(f"{name} received again; already shutting down")
            return
        self.exiting.set()
        threading.Thread(target=self._drain_and_exit, name="sim-drain", daemon=True).start()

    def run(self) -> int:
        cfg = self.cfg
        self.log.info(banner())
        self.log.info(
            f"node_rank {cfg.node_rank} of {cfg.nnodes}, tp_size {cfg['tp_size']}, ep_size "
            f"{cfg['ep_size']}, model {cfg.served_model_name}, pid {os.getpid()}"
        )
        self.log.info(f"argv: {' '.join(cfg.argv)}")
        self.log.info(f"knobs: {self.knobs.as_dict()}")
        if self.knobs.kit_dir:
            try:
                self.kit = check_kit(self.knobs, cfg, os.environ)
            except KitCheckFailed as exc:
                count = len(exc.problems)
                self.log.error(
                    f"simulated kit launcher check failed, nothing served ({count} problem(s)): {exc}"
                )
                return 1
            self.log.info(self.kit.summary())
            summary, problems = check_build_products(self.knobs.kit_dir)
            for problem in problems:
                self.log.error(f"simulated Engram backend import failed, nothing served: {problem}")
            if problems:
                return 1
            self.log.info(summary)
        host, port = str(cfg["host"]), int(cfg["port"])
        try:
            self.http = SimHTTPServer((host, port), self)
        except OSError as exc:
            self.log.error(f"cannot serve HTTP on {host}:{port}: {exc.strerror or exc}")
            return 1
        threading.Thread(target=self.http.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
        role = "OpenAI API and control endpoints" if cfg.is_head else "dummy health endpoints"
        self.log.info(f"HTTP on {host}:{port} ({role}; 503 until ready)")
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.group.start()
        if isinstance(self.group, Head):
            threading.Thread(target=self._head_boot_when_formed, daemon=True).start()
        while not self._exit.wait(0.5):
            pass
        self.http.shutdown()
        self.http.server_close()
        self.held = None
        return self._exit_code

    def _head_boot_when_formed(self) -> None:
        assert isinstance(self.group, Head)
        while not self.group.formed.wait(0.5):
            if self._exit.is_set():
                return
        self._boot()

    # -- reports --------------------------------------------------------------------------------

    def server_info(self) -> dict[str, Any]:
        cfg = self.cfg
        info = cfg.public()
        block = cfg["speculative_dspark_block_size"]
        accept = round(0.61 * (block + 1), 2) if block else None
        info.update(
            {
                "simulator": True,
                "version": SGLANG_VERSION,
                "status": self.status_word(),
                "max_req_input_len": cfg.context_length - 6,
                "internal_states": [
                    {
                        "avg_spec_accept_length": accept,
                        "last_gen_throughput": round(self.sched.last_gen_throughput, 3),
                        "num_running_reqs": self.sched.running,
                        "num_waiting_reqs": self.sched.waiting,
                        "memory_usage": {"held_mib": self.knobs.hold_mib if self.held is not None else 0},
                    }
                ],
                "sparkctl_simulator": {
                    "node_rank": cfg.node_rank,
                    "knobs": self.knobs.as_dict(),
                    "environment": environment_snapshot(),
                    "peers": self.group.peer_states() if isinstance(self.group, Head) else [],
                    "health_problem": self.health_problem(),
                    "kit": self.kit.as_dict() if self.kit is not None else None,
                    "uptime_s": round(time.time() - self.started_wall, 1),
                },
            }
        )
        return info

    def metrics_text(self) -> str:
        return metrics.metrics_text(self)


USAGE = f"""usage: {PROG} [serve] <SGLang argv>

Stands in for one SGLang {SGLANG_VERSION} rank (`sglang serve <argv>`): same flags, same endpoints, a
small deterministic model. With SPARKCTL_SIM_KIT_DIR set it first runs the serving kit launcher's
checks (simulated; a failure exits 1 without serving) and logs the kit's readiness markers while it
"loads". Simulator knobs are environment variables:
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "--sim-help"):
        lines = [USAGE] + [f"  {k.env} (default {k.default or 'unset'}): {k.help}" for k in KNOBS]
        print("\n".join(lines))
        return 0 if args else 2
    try:
        cfg = parse_argv(args)
        knobs = load_knobs()
    except ArgError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    return RankProcess(cfg, knobs).run()


if __name__ == "__main__":
    sys.exit(main())
