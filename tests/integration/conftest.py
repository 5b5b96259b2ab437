"""The session-wide lab: brought up once for all integration tests, removed at the end.

Use the ``lab`` fixture in any integration test::

    def test_something(lab):
        assert lab.ssh("spark-2", "hostname").stdout.strip() == "spark-2"
        lab.run_sparkctl("provision")          # sparkctl -i <lab inventory> provision
        lab.stage_runtime()                    # stage kit, then stage image (before any `up`)
        lab.ensure_staged()                    # a fixture's `stage`: skipped when nothing changed since
        with lab.port_mtu("s2a", 1500):        # chaos, undone on exit
            ...

It skips (with the reason) where the lab cannot run: not Linux, not root, no systemd-nspawn.
Environment knobs:
  SPARKCTL_LAB_KEEP=1        leave the lab up after the session (for debugging)
  SPARKCTL_LAB_NVME_GIB=N    size of every node's /mnt/nvme loop filesystem (default 4; 0 = plain dir)
Tests that change the lab should undo it (the context managers do) or call ``lab.heal()``.
Tests marked ``lab_last`` run after every other test of the session (e.g. the `down` check).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # sparkctl_lab is imported only after _lab_instance() chose the lab
    from sparkctl_lab.guard import Guard

REPO = Path(__file__).resolve().parents[2]


def _lab_instance() -> str:
    """Under pytest-xdist (`make integration`: two workers), worker gwN drives lab N, a separate
    lab beside the others (sparkctl_lab.topology.INSTANCE); without xdist, the lab
    $SPARKCTL_LAB_INSTANCE names (default 0: `SPARKCTL_LAB_INSTANCE=1 pytest -m integration ...`
    leaves lab 0 alone). Set before any sparkctl_lab import, and inherited by every `sparkctl`
    subprocess the tests start. Lab N > 0 also gets its own sparkctl state directory (run records,
    the kit store, the supervisor's files), so two streams never share a controller-side file."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        instance = worker[2:]
    else:
        instance = os.environ.get("SPARKCTL_LAB_INSTANCE", "") or "0"
    os.environ["SPARKCTL_LAB_INSTANCE"] = instance
    if instance != "0":
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        os.environ["SPARKCTL_STATE_DIR"] = str(Path(base) / f"sparkctl-lab{instance}")
    return "" if instance == "0" else instance


LAB_SUFFIX = _lab_instance()
LAB_INVENTORY = REPO / "inventory" / f"lab{LAB_SUFFIX}"


def pytest_configure(config: pytest.Config) -> None:
    global _config
    config.addinivalue_line(
        "markers", "lab_last: run after every other test of the session (lab teardown checks)"
    )
    _config = config


# The order of the modules on the one lab, so that each finds the state the one before left and
# sets up only what differs: the lab's own checks; staging (the first to put weights on the nodes,
# which every later module reuses); provisioning; serving (monitoring leaves the group up for
# qualify and bench, which stop it); the supervisor; the vaulted key (its own inventory); the
# lifecycle (`reset` takes everything off the nodes, then puts it back); the wheel. Every module
# still sets up what it needs when run alone. Modules not listed run after these, by name.
#
# `make integration` runs three streams side by side (pytest-xdist, -n 3: the scheduler below gives
# each stream whole, in this order, to one worker and its own lab; with two, the cores sat a quarter
# idle, waiting on boots, timers and readiness). The staged and serving path and the armed reverts
# (mostly waits on the nodes' timers) on one; provisioning, the fast paths, monitoring, qualify/bench,
# the wheel and day one on another; the lab's own checks, the supervisor, the lifecycle and the
# groups on the third (streams balanced by the wall times `--durations` prints). One process
# without xdist runs them all, one after the other.
STREAMS = (
    ("test_image", "test_kit", "test_stage", "test_sim_by_hand", "test_serve", "test_revert",
     "test_shape_triangle_lab", "test_shape_ring_lab"),
    ("test_provision", "test_thermals_lab", "test_up_fast", "test_monitoring_lab", "test_qa",
     "test_m1_smoke_lab", "test_ssh_port_lab", "test_vault", "test_wheel_install", "test_day_one_lab"),
    ("test_lab", "test_lab_docker", "test_provision_fast",
     "test_watch", "test_watch_lifecycle", "test_groups_lab"),
)  # fmt: skip
MODULE_ORDER = tuple(name for stream in STREAMS for name in stream)
# Lab modules `make test` leaves out for their cost: eight nodes serving TP8 is the heaviest lab there
# is (394 s alone on the two cores, beside three other labs it would lengthen a stream by more).
# `make integration-heavy` runs them (SPARKCTL_LAB_HEAVY=only: these alone; =1: with the rest).
HEAVY = ("test_shape_tp8_lab", "test_shape_2xtp4_lab")
HEAVY_ENV = "SPARKCTL_LAB_HEAVY"


def _module_rank(item: pytest.Item) -> tuple[int, str]:
    name = item.path.stem
    return (MODULE_ORDER.index(name) if name in MODULE_ORDER else len(MODULE_ORDER), name)


def _stream(nodeid: str) -> str:
    name = Path(nodeid.split("::", 1)[0]).stem
    return f"lab-stream-{next((i for i, s in enumerate(STREAMS) if name in s), len(STREAMS) - 1)}"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """One work unit per stream (xdist's scope scheduling, the scope being the stream): each worker
    takes one stream whole and runs it in the collection order below. (Not `--dist loadgroup`:
    with pytest 9 its xdist_group suffix no longer reaches the node ids, and every test went to
    whichever worker was free.)"""
    from xdist.scheduler import LoadScopeScheduling

    class StreamScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _stream(nodeid)

    return StreamScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    heavy = os.environ.get(HEAVY_ENV, "")
    if heavy == "only":
        keep = [it for it in items if it.path.stem in HEAVY]
        config.hook.pytest_deselected(items=[it for it in items if it.path.stem not in HEAVY])
        items[:] = keep
    elif heavy != "1":
        skip = pytest.mark.skip(reason=f"a heavy lab module, left out of make test: make integration-heavy "
                                       f"runs it ({HEAVY_ENV}=only)")
        for it in items:
            if it.path.stem in HEAVY:
                it.add_marker(skip)
    # Modules in MODULE_ORDER (a stable sort: the tests of a module keep their order). The lab's own
    # teardown checks (lab_last; test_lab.py's at the very end) go last: they take the lab down.
    items.sort(key=_module_rank)
    last = sorted(
        (it for it in items if it.get_closest_marker("lab_last")),
        key=lambda it: it.path.name == "test_lab.py",
    )
    if last:
        items[:] = [it for it in items if not it.get_closest_marker("lab_last")] + last


# --- where the lab tests' time goes: wall time against the machine's busy CPU -----------------
# The summary line says how busy the machine's cores were while the lab tests ran (from
# /proc/stat, all processes: the nodes' share included). SPARKCTL_TEST_CPU_LOG=FILE adds one JSON
# line per test (worker, start time, wall seconds, busy core-seconds): a test with much wall time
# and little CPU is waiting (timers, boots), one near the core count is compute-bound. Under xdist
# the busy figure is the whole machine's, every stream's share in it.
# A test's own share is its stream's CPU over the test (setup and teardown included): the stream's
# process and every child it reaped (sparkctl, ansible-playbook and its workers, ssh), plus its
# lab's machines (each one's systemd-nspawn process tree). The summary adds it up by module,
# costliest first.


def _busy_core_seconds() -> float | None:
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    ticks = [int(x) for x in fields]
    return (sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)) / os.sysconf("SC_CLK_TCK")


class Accumulated:
    """A sum of counters that only grow, each keyed by what it counts: a machine powered off and on,
    or a lab brought up again, is a new key (its systemd-nspawn's PID and start time), counted from
    zero. A reading lower than the key's highest is not new use: a process gone from the tree whose
    time no process left in it collected (a rank container's processes after docker restarted or
    killed it), or a tree read while one of its processes was being reaped. Counted as a restart,
    such a fall added the tree's whole total again: test_serve's docker-restart test showed 122
    core-seconds in a teardown of 0 s, while the whole machine used 57.5 over all of that test."""

    def __init__(self) -> None:
        self.used = 0.0
        self.last: dict[str, float] = {}

    def add(self, readings: dict[str, float]) -> float:
        for key, now in readings.items():
            before = self.last.get(key, 0.0)
            if now > before:
                self.used += now - before
                self.last[key] = now
        return self.used


def process_trees(roots: Iterable[int], proc: Path = Path("/proc")) -> dict[int, float]:
    """CPU seconds each root process's tree has used: every live process under it (itself
    included), each with what it used and what its reaped children used (utime, stime, cutime,
    cstime of /proc/PID/stat)."""
    children: dict[int, list[int]] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        pid = int(stat.parent.name)
        children.setdefault(int(fields[1]), []).append(pid)
        used[pid] = sum(int(x) for x in fields[11:15]) / tick
    out: dict[int, float] = {}
    for root in roots:
        total, stack = 0.0, [root]
        while stack:
            pid = stack.pop()
            total += used.get(pid, 0.0)
            stack += children.get(pid, [])
        out[root] = total
    return out


_lab_cpu = Accumulated()


def _stream_core_seconds() -> float:
    """This stream's CPU so far: this process, the children it reaped, and its lab's machines (each
    machine's systemd-nspawn and everything under it: its systemd, sshd, dockerd, the ranks)."""
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    used = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    if "sparkctl_lab" in sys.modules:  # imported once the lab fixture chose the lab
        from sparkctl_lab import state

        st = state.load()
        machines = {m.pid: f"{name}:{m.pid}:{m.pid_start}" for name, m in (st.machines if st else {}).items()
                    if m.pid}
        used += _lab_cpu.add({machines[pid]: cpu for pid, cpu in process_trees(machines).items()})
    return used


def module_costs(reports: Iterable[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """(module, wall s, stream core-seconds) for (nodeid, wall, core-seconds) per test phase,
    costliest module first."""
    costs: dict[str, list[float]] = {}
    for nodeid, wall, core_s in reports:
        acc = costs.setdefault(nodeid.split("::")[0].rsplit("/", 1)[-1], [0.0, 0.0])
        acc[0] += wall
        acc[1] += core_s
    return sorted(((m, w, c) for m, (w, c) in costs.items()), key=lambda row: -row[2])


_cpu_marks: dict[str, tuple[float, float]] = {}
_stream_marks: dict[str, float] = {}
_phase_costs: list[tuple[str, float, float]] = []
_phase_names: list[str] = []
_config: pytest.Config | None = None
_session_mark: tuple[float, float] | None = None


def _xdist_controller() -> bool:
    """Under xdist the controller sees every worker's test start and finish again: the workers log."""
    return _config is not None and _config.pluginmanager.hasplugin("dsession")


def pytest_sessionstart(session: pytest.Session) -> None:
    global _session_mark
    busy = _busy_core_seconds()
    _session_mark = None if busy is None else (time.monotonic(), busy)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Each phase's report carries the stream's CPU over that phase (``stream_core_s``), which
    xdist hands to the controller with the report."""
    outcome = yield
    if _xdist_controller():
        return
    now = _stream_core_seconds()
    before = _stream_marks.get(item.nodeid)
    _stream_marks[item.nodeid] = now
    if before is not None:
        outcome.get_result().stream_core_s = round(now - before, 2)  # type: ignore[attr-defined]


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    if not _xdist_controller():
        _stream_marks[nodeid] = _stream_core_seconds()
    busy = _busy_core_seconds() if os.environ.get("SPARKCTL_TEST_CPU_LOG") else None
    if busy is not None and not _xdist_controller():
        _cpu_marks[nodeid] = (time.monotonic(), busy)


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    mark, log = _cpu_marks.pop(nodeid, None), os.environ.get("SPARKCTL_TEST_CPU_LOG")
    busy = _busy_core_seconds() if mark is not None and log else None
    if mark is None or busy is None or not log:
        return
    wall, used = time.monotonic() - mark[0], busy - mark[1]
    record = {"test": nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
              "start": round(time.time() - wall, 1), "wall_s": round(wall, 2), "busy_core_s": round(used, 2)}
    with open(log, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


# Under xdist: when each stream (worker) ran its first and its last test, so that the streams'
# lengths can be compared (STREAMS is balanced by them).
_stream_spans: dict[str, list[float]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    core_s = getattr(report, "stream_core_s", None)
    if isinstance(core_s, (int, float)):
        _phase_costs.append((report.nodeid, report.duration, float(core_s)))
        _phase_names.append(report.when)
    worker = getattr(getattr(report, "node", None), "gateway", None)
    if worker is None:
        return
    key = f"{_stream(report.nodeid)} (lab {worker.id[2:]})"
    span = _stream_spans.setdefault(key, [report.start, report.stop])
    span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    busy = _busy_core_seconds()
    if _session_mark is None or busy is None:
        return
    wall, cores = time.monotonic() - _session_mark[0], os.cpu_count() or 1
    used = busy - _session_mark[1]
    if wall > 0:
        terminalreporter.write_line(
            f"lab tests: {wall:.0f} s wall, {used:.0f} core-seconds busy on {cores} cores "
            f"({100 * used / (wall * cores):.0f} % of the machine)"
        )
    for stream, (first, last) in sorted(_stream_spans.items()):
        terminalreporter.write_line(f"{stream}: {last - first:.0f} s")
    costs = module_costs(_phase_costs)
    if costs:
        total = sum(c for _, _, c in costs)
        terminalreporter.write_line(f"each module's own CPU (its stream and its lab's machines), {total:.0f} "
                                    "core-seconds in all:")
        for module, wall, core_s in costs:
            share = 100 * core_s / total
            terminalreporter.write_line(f"  {core_s:7.0f} core-s {share:4.1f} %  {wall:6.0f} s  {module}")
    # Every test phase's wall and stream CPU, for finding the costly tests within a module.
    phases = os.environ.get("SPARKCTL_TEST_PHASE_LOG")
    if phases and _phase_costs:
        with open(phases, "w", encoding="utf-8") as f:
            json.dump([{"test": n, "phase": p, "wall_s": round(w, 2), "core_s": c}
                       for (n, w, c), p in zip(_phase_costs, _phase_names, strict=True)], f, indent=0)


# --- one broken lab never takes the rest of its stream with it ----------------------------------
# Before each lab test (ahead of its module's fixtures) the guard checks that the lab is whole: its
# state file, its inventory and every machine (sparkctl_lab.guard.damage: files and PIDs only). A
# lab that lost any of them — to a failed test, a chaos hook not undone, anything — is rebuilt
# with `lab up`, and the test carries a warning saying what was missing and after which test;
# a lab that cannot be rebuilt fails that test, and the rest of the stream is skipped with that
# one reason instead of failing one by one on a missing inventory.
_guard: Guard | None = None  # the lab fixture's, while the lab is up
# A shape module (one whose module declares SHAPE: test_shape_*.py) brings its stream's lab up in
# that shape and leaves it so; the first test after it that is not a shape module's gets the
# default four-node lab back first (the lab fixture's reshape). A stream that ends with a shape
# module, or two shape modules in a row, then costs no rebuild back in between.
_reshape: Callable[[], str | None] | None = None


class LabRebuilt(UserWarning):
    """The lab was found broken before a test and was rebuilt (the message says what was missing)."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    guard = _guard
    if guard is None or "lab" not in getattr(item, "fixturenames", ()):
        return
    if guard.broken is not None:  # a rebuild already failed (and failed that test): one reason for the rest
        pytest.skip(guard.broken)
    from sparkctl_lab.guard import LabLost

    try:
        line = guard.before(item.nodeid)
    except LabLost as lost:  # this test fails with the reason; the rest are skipped with it
        pytest.fail(str(lost), pytrace=False)
    if line:
        sys.stderr.write(f"\n{line}\n")
        warnings.warn(LabRebuilt(line), stacklevel=1)
    if _reshape is not None and getattr(item.module, "SHAPE", None) is None:
        back = _reshape()
        if back:
            sys.stderr.write(f"\n{back} (before {item.nodeid})\n")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    if _guard is not None and "lab" in getattr(item, "fixturenames", ()):
        _guard.after(item.nodeid)


def lab_unavailable_reason() -> str | None:
    """Why the lab cannot run here, or None when it can."""
    if platform.system() != "Linux":
        return f"the lab needs Linux (this is {platform.system()})"
    if os.geteuid() != 0:
        return "the lab needs root (network namespaces, bridges, mounts); run the integration tests as root"
    for tool, pkg in (("systemd-nspawn", "systemd-container"), ("ip", "iproute2"), ("ssh", "openssh-client")):
        if shutil.which(tool) is None:
            return f"{tool} is missing: apt-get install -y {pkg}"
    from sparkctl_lab import rootfs

    if not rootfs.is_built(rootfs.rootfs_path()) and shutil.which("debootstrap") is None:
        return "no cached lab rootfs and no debootstrap to build one: apt-get install -y debootstrap"
    return None


# What ssh prints when a loaded node's sshd accepted the connection but did not answer in time or
# dropped it before the login (plugins/strategy/sparkctl_linear.py retries the same for Mitogen).
TRANSIENT_SSH = ("during banner exchange", "kex_exchange_identification", "Connection reset by peer",
                 "Connection closed by remote host")


@dataclass
class Lab:
    """Handles on the running lab for tests: paths, SSH, in-container exec and the chaos hooks."""

    inventory: Path
    nvme_gib: int | None

    @property
    def ssh_config(self) -> Path:
        return self.inventory / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.inventory / "known_hosts"

    @property
    def private_key(self) -> Path:
        from sparkctl_lab import state

        return state.controller_key()

    @property
    def api_key_file(self) -> Path:
        from sparkctl_lab import state

        return state.api_key_file()

    @property
    def checkpoint_dir(self) -> Path:
        from sparkctl_lab import state

        return state.checkpoint_dir()

    @property
    def nodes(self) -> list[str]:
        from sparkctl_lab import topology

        return topology.node_names()

    def mgmt_ip(self, machine: str) -> str:
        from sparkctl_lab import topology

        return str(topology.mgmt_ip(machine))

    def fabric_ip(self, node: str, half: str = "a") -> str:
        from sparkctl_lab import topology

        return str(topology.fabric_ip(node, topology.half(half)).ip)

    # --- running commands ---------------------------------------------------------------------

    def ssh(
        self, machine: str, command: str, *, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell command on a lab machine over real SSH (host key checked). A connection a
        busy node's sshd dropped or left without a banner (exit 255, TRANSIENT_SSH) is tried again
        after 1 s, then 2 s."""
        argv = ["ssh", "-F", str(self.ssh_config), machine, command]
        for pause in (1.0, 2.0, None):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
            if pause is None or proc.returncode != 255 or not any(t in proc.stderr for t in TRANSIENT_SSH):
                break
            time.sleep(pause)
        if check and proc.returncode != 0:
            raise AssertionError(f"ssh {machine} {command!r} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def exec(
        self, machine: str, *argv: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside a machine without SSH (nsenter into its namespaces)."""
        from sparkctl_lab import machines, state

        proc = machines.node_exec(machine, list(argv), state.load(), timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{machine}: {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}"
            )
        return proc

    def run_sparkctl(
        self, *args: str, json_out: bool = False, timeout: float = 600, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`sparkctl -i <lab inventory> [--json] ARGS` as a subprocess (exit code not checked)."""
        argv = [
            sys.executable,
            "-m",
            "sparkctl",
            "-i",
            str(self.inventory),
            *(["--json"] if json_out else []),
            *args,
        ]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})}
        )

    def stage_runtime(self, timeout: float = 1800) -> None:
        """`sparkctl stage kit`, then `sparkctl stage image`: what every `up` of the lab's
        containers needs first (the kit mounted by the ranks, the image they run)."""
        for what in ("kit", "image"):
            proc = self.run_sparkctl("stage", what, timeout=timeout)
            if proc.returncode != 0:
                raise AssertionError(
                    f"sparkctl stage {what} exited {proc.returncode}: {(proc.stderr or proc.stdout)[-2000:]}"
                )

    # --- fixtures' preconditions, cached inside the session -------------------------------------

    def prepare_serving(self) -> None:
        """What serving needs, as a module fixture's precondition: the lab provisioned — a plain
        `provision`, so on a lab an earlier module left provisioned it is the fast path's one SSH
        round, no playbook — then everything staged."""
        proc = self.run_sparkctl("provision", timeout=900)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout)[-2000:]
            raise AssertionError(f"provision exited {proc.returncode}: {tail}")
        self.ensure_staged()

    def ensure_staged(self, *args: str, timeout: float = 1800) -> bool:
        """`sparkctl stage ARGS` as a module fixture's precondition. Skipped (False)
        when the same stage already succeeded in this session and nothing it reads or writes has
        changed since: the inventory's files, the controller's checkpoint and kit sources, and on
        every node the staged trees (path, type, size, mode, link target and ctime of every entry:
        any write, even one that keeps the mtime, moves the ctime) and the engine images' IDs.
        Tests of `stage` itself call it directly; this is only for modules that need its result."""
        global _last_stage
        if _last_stage == (args, self._stage_fingerprint()):
            return False
        _last_stage = None
        proc = self.run_sparkctl("stage", *args, timeout=timeout)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout)[-2000:]
            raise AssertionError(f"sparkctl stage {' '.join(args)} exited {proc.returncode}: {tail}")
        _last_stage = (args, self._stage_fingerprint())
        return True

    def _stage_fingerprint(self) -> str:
        from sparkctl.model import load_inventory

        inv = self.inventory
        cluster = load_inventory(inv)
        digest = hashlib.sha256()
        for f in sorted(p for p in inv.rglob("*") if p.is_file()):
            digest.update(f"{f.relative_to(inv)}\0".encode() + f.read_bytes())
        sources = [cluster.checkpoint.path if cluster.checkpoint else None]
        if cluster.kit is not None:
            sources += [cluster.kit.path, cluster.kit.url]
        for src in sources:
            if src and Path(str(src)).exists():
                digest.update(_tree_listing(Path(str(src))).encode())
        paths = cluster.paths
        trees = " ".join(
            shlex.quote(str(p))
            for p in (paths.model_dir, paths.engram_dir, paths.run_dir / "kit", paths.run_dir / "images")
        )
        # `stage` itself rewrites its lock and (unchanged) manifests on every run: those count by
        # content, directories by their entries; everything else by its ctime too.
        script = (
            f"for d in {trees}; do [ -e \"$d\" ] && find \"$d\" ! -name .sparkctl-stage.lock \\( -type d "
            "-printf '%p d %m\\n' -o -name .sparkctl-manifest.json -exec sha256sum {} + -o "
            "-printf '%p %y %s %m %l %C@\\n' \\); done | sort; "
            "docker image ls --no-trunc --format '{{.Repository}}:{{.Tag}} {{.ID}}' 2>&1 | sort"
        )
        for node in self.nodes:
            digest.update(f"{node}\0".encode() + self.exec(node, "sh", "-c", script).stdout.encode())
        return digest.hexdigest()

    def status(self) -> dict[str, dict[str, Any]]:
        from sparkctl_lab import control

        return {row["machine"]: row for row in control.status()}

    # --- chaos ----------------------------------------------------------------------------------

    def kill(self, machine: str) -> None:
        from sparkctl_lab import control

        control.kill(machine)

    def start(self, machine: str) -> None:
        from sparkctl_lab import control

        control.start(machine)

    def link(self, node: str, up: bool, half: str | None = None, mgmt: bool = False) -> list[str]:
        from sparkctl_lab import chaos

        return chaos.set_link(node, up, [half] if half else None, mgmt=mgmt)

    def set_port_mtu(self, port: str, mtu: int) -> int | None:
        from sparkctl_lab import chaos

        return chaos.set_port_mtu(port, mtu)

    def fill(self, node: str, *, gib: float | None = None, free_mib: int | None = None) -> dict[str, int]:
        from sparkctl_lab import chaos

        return chaos.fill_nvme(node, gib=gib, free_mib=free_mib)

    def clear_fill(self, node: str) -> None:
        from sparkctl_lab import chaos

        chaos.fill_nvme(node, clear=True)

    @contextmanager
    def port_mtu(self, port: str, mtu: int) -> Iterator[None]:
        before = self.set_port_mtu(port, mtu)
        try:
            yield
        finally:
            self.set_port_mtu(port, before or 9216)

    @contextmanager
    def link_down(self, node: str, half: str | None = None, mgmt: bool = False) -> Iterator[None]:
        self.link(node, False, half, mgmt)
        try:
            yield
        finally:
            self.link(node, True, half, mgmt)

    @contextmanager
    def powered_off(self, machine: str) -> Iterator[None]:
        self.kill(machine)
        try:
            yield
        finally:
            self.start(machine)

    @contextmanager
    def nvme_filled(
        self, node: str, *, gib: float | None = None, free_mib: int | None = None
    ) -> Iterator[None]:
        self.fill(node, gib=gib, free_mib=free_mib)
        try:
            yield
        finally:
            self.clear_fill(node)

    def in_use_by_another_session(self) -> bool:
        """True while another pytest session on this host uses the lab (don't take it down)."""
        return bool(other_lab_users())

    def heal(self) -> None:
        """Undo every chaos hook: ports back to 9216 and up, cables plugged, machines on, NVMe unfilled."""
        from sparkctl_lab import chaos, topology

        for port in topology.switch_ports():
            self.set_port_mtu(port, topology.SWITCH_PORT_MTU)
        for node in topology.node_names():
            chaos.set_link(node, True, None, mgmt=True)
            chaos.set_link(node, True, None)
            if self.nvme_gib:
                self.clear_fill(node)
        for machine, row in self.status().items():
            if row["state"] != "running":
                self.start(machine)


# The session's last stage run by ensure_staged: (its arguments, the fingerprint it left).
_last_stage: tuple[tuple[str, ...], str] | None = None


def _tree_listing(root: Path) -> str:
    """Path, size, mtime and ctime of every entry under root (a controller-side source)."""
    rows = []
    for p in sorted(root.rglob("*")) if root.is_dir() else [root]:
        st = p.lstat()
        rows.append(f"{p} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}")
    return "\n".join(rows)


def _nvme_gib() -> int | None:
    raw = os.environ.get("SPARKCTL_LAB_NVME_GIB", "4")
    try:
        value = int(raw)
    except ValueError:
        raise pytest.UsageError(f"SPARKCTL_LAB_NVME_GIB must be an integer (got {raw!r})") from None
    return value or None


# Test sessions using the lab right now (one file per pytest process), so two sessions on one
# host share the lab instead of tearing it down under each other.
def _users_dir() -> Path:
    from sparkctl_lab.state import DEFAULT_RUN_DIR  # after _lab_instance(): this lab's run dir

    return DEFAULT_RUN_DIR.with_name(DEFAULT_RUN_DIR.name + ".users")


USERS_DIR = _users_dir()


def _register_user() -> Path:
    USERS_DIR.mkdir(parents=True, exist_ok=True)
    me = USERS_DIR / str(os.getpid())
    me.write_text(" ".join(sys.argv) + "\n")
    return me


def other_lab_users() -> list[int]:
    """PIDs of other live test sessions using the lab (stale entries are removed)."""
    others = []
    for f in USERS_DIR.glob("*") if USERS_DIR.is_dir() else []:
        if not f.name.isdigit() or int(f.name) == os.getpid():
            continue
        if Path(f"/proc/{f.name}").exists():
            others.append(int(f.name))
        else:
            f.unlink(missing_ok=True)
    return others


def _default_checkpoint(ckdir: Path) -> None:
    """The lab's synthetic checkpoint (what `stage` copies from the controller), the same one
    test_stage generates by default; an identical existing one is kept as it is."""
    from support import synth_checkpoint

    mib = float(os.environ.get("SPARKCTL_STAGE_TEST_MIB", "160"))
    rows = int(mib * (1 << 20) * 2 / 3 / 2 / 264)
    synth_checkpoint.write_checkpoint(ckdir, (rows, rows - 7), filler_shards=2, filler_mib=mib / 6)


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """The lab, up for the whole session. A fresh one (down, then up: a crashed earlier run is
    cleaned), unless another test session is using it right now: then it is shared, and left up."""
    reason = lab_unavailable_reason()
    if reason:
        pytest.skip(reason)
    from sparkctl_lab import control, topology

    keep = os.environ.get("SPARKCTL_LAB_KEEP") == "1"
    gib = _nvme_gib()
    me = _register_user()
    # Another live session: share its lab (never down). Otherwise start fresh: down, then up.
    shared = bool(other_lab_users())
    t0 = time.monotonic()
    if not shared and not (keep and control.is_up()):
        control.down()
    sizes = dict.fromkeys(topology.node_names(), gib) if gib else None
    try:
        report = control.up(LAB_INVENTORY, None if control.is_up() else sizes)
    except Exception as exc:  # e.g. a node whose SSH did not answer in time
        if shared:
            raise
        sys.stderr.write(f"\nlab up failed ({exc}): taking it down and bringing it up once more\n")
        control.down()
        report = control.up(LAB_INVENTORY, sizes)
    sys.stderr.write(
        f"\nlab {'shared with another session' if shared else 'up'} in {time.monotonic() - t0:.1f}s "
        f"(rootfs build: {report.rootfs_build_s or 0:.0f}s): {json.dumps(report.system)}\n"
    )
    from sparkctl_lab import state

    st = state.load()
    gibs = {st.machines[n].nvme_gib for n in topology.node_names() if st and n in st.machines}
    handle = Lab(inventory=LAB_INVENTORY, nvme_gib=gibs.pop() if len(gibs) == 1 else None)
    _default_checkpoint(handle.checkpoint_dir)

    def fresh_nodes() -> None:
        """After nodes were built again: nothing counts as staged, the checkpoint is the default."""
        global _last_stage
        _last_stage = None
        _default_checkpoint(handle.checkpoint_dir)

    def rebuild() -> None:
        control.up(LAB_INVENTORY, None if control.is_up() else sizes)
        fresh_nodes()

    def reshape() -> str | None:
        """The default shape back, where a shape module left the lab in its own (what was done)."""
        shape = control.recorded_shape()
        if shape == topology.DEFAULT_SHAPE:
            return None
        from support import shape_lab  # tests/ is on sys.path under pytest's pythonpath

        default = topology.DEFAULT_SHAPE
        control.up(LAB_INVENTORY, shape_lab.sizes(handle, default), shape=default)
        fresh_nodes()
        return f"lab brought back from {shape} to {topology.DEFAULT_SHAPE}"

    from sparkctl_lab.guard import Guard, damage

    global _guard, _reshape
    _guard = Guard(check=lambda: damage(LAB_INVENTORY), rebuild=rebuild)
    _reshape = reshape
    try:
        yield handle
    finally:
        _guard = _reshape = None
        me.unlink(missing_ok=True)
    if keep or other_lab_users():
        sys.stderr.write(f"\nlab left up (SPARKCTL_LAB_KEEP=1 or another session uses it): {LAB_INVENTORY}\n")
        return
    left = control.down()
    assert not left, f"lab down left things behind: {left}"


@pytest.fixture(scope="module")
def served(lab: Lab) -> Iterator[Lab]:
    """The lab provisioned for serving and staged once for the module; at its end the lab is healed
    (chaos undone) and every rank stopped."""
    lab.prepare_serving()
    yield lab
    lab.heal()
    lab.run_sparkctl("down")
