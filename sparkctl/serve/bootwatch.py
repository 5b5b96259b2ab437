"""The boot watch: after the units started, the gates in order with the memory guard running."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from sparkctl.model.redaction import strip_secrets
from sparkctl.nodeside import prestart
from sparkctl.profiles import LogMarker, fill_marker_value, marker_vars
from sparkctl.render import kit
from sparkctl.render.rank import api_url, served_model_name
from sparkctl.serve.http import HttpAnswer, auth_headers, get, http_reason
from sparkctl.serve.probe import FleetLike, NodeFacts, collect, rank_launch, unit_name
from sparkctl.serve.smoke import run_smoke
from sparkctl.serve.verdict import rank_faults, ready_mark, save_ready_marks

if TYPE_CHECKING:
    from sparkctl.model import Cluster

GIB = 1024**3
SAMPLE_INTERVAL_S = 2.0   # memory guard and unit states, every node
POLL_INTERVAL_S = 0.5     # HTTP gates between samples
LOG_TAIL_LINES = 30
LOG_LINE_CHARS = 240      # a log line shown with a failure is cut here (a rank prints JSON lines of kB)
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
PRESTART_GATE = "kit pre-start checks"
PRESTART_LINES = 400      # pre-start lines read back from a rank's journal (one per failed check)
# Gates at which a rank's unit is found failed or gone: its container may have stopped in the pre-start.
UNIT_EXIT_GATES = ("unit active", "rank unit exited")


# --- the boot watch -----------------------------------------------------------------------------


class GateFailure(Exception):
    """A gate failed: which gate, on which node, why, and that node's log tail. When the node is a
    worker, rank 0's log tail as well (``head``, ``head_tail``): a worker that exits has most often
    lost rank 0, and why rank 0 went away is in rank 0's journal, not the worker's."""

    def __init__(self, gate: str, node: str | None, detail: str, log_tail: str = "",
                 head: str | None = None, head_tail: str = ""):
        super().__init__(f"{gate}: {detail}")
        self.gate = gate
        self.node = node
        self.detail = detail
        self.log_tail = log_tail
        self.head = head
        self.head_tail = head_tail
        self.record_dir: Path | None = None  # where the boot records of the failed start are


def shown_tail(text: str, lines: int = LOG_TAIL_LINES, width: int = LOG_LINE_CHARS) -> list[str]:
    """The last ``lines`` lines of a log as shown with a failure, each cut to ``width`` characters
    with the count of what was cut: one long line must not push the rest of the failure off screen.
    Terminal colour codes are taken out (SGLang's gateway writes them into its journal)."""
    return [ln if len(ln) <= width else f"{ln[:width]}… (+{len(ln) - width} chars)"
            for ln in ANSI_COLOUR.sub("", text).splitlines()[-lines:]]


def read_journal(fleet: FleetLike, unit: str, node: str,
                 lines: int = LOG_TAIL_LINES) -> tuple[str | None, str]:
    """The last ``lines`` lines of ``unit``'s journal on ``node`` over SSH: (the text, "") or, when
    the node did not answer, (None, why). The hostname is left out: the failure's label names the
    node, and the line's width goes to the gateway's or rank's own words."""
    cmd = f"journalctl -u {unit} -n {lines} --no-pager -o short-iso --no-hostname 2>&1 || true\n"
    res = fleet.run({node: cmd}, timeout=15, only=[node]).get(node)
    if res is None:
        return None, "not among the nodes asked"
    return (res.stdout, "") if res.reachable else (None, str(res.error))


def tail_details(label: str, text: str, lines: int = LOG_TAIL_LINES) -> list[str]:
    """A log tail as a failure's details: ``label``, then the shown lines indented (nothing when
    the log is empty)."""
    shown = shown_tail(text, lines)
    return [label] + [f"    {ln}" for ln in shown] if shown else []


def prestart_failures(journal: str) -> list[str]:
    """The failed-check lines of the rank's last pre-start (sparkctl.nodeside.prestart) in a journal
    excerpt, with its closing summary; empty when it passed or never ran. Only what follows the last
    ``BEGIN`` line counts: an earlier start's failures are not this one's."""
    lines = [ln.strip() for ln in journal.splitlines() if prestart.PREFIX in ln]
    last = max((i for i, ln in enumerate(lines) if prestart.BEGIN in ln), default=-1)
    ours = [ln[ln.index(prestart.PREFIX):] for ln in lines[last + 1:]]
    if not any(ln.startswith(prestart.FAIL) for ln in ours):
        return []
    return [ln for ln in ours if ln.startswith((prestart.FAIL, prestart.STOPPED))]


def read_prestart_failures(fleet: FleetLike, unit: str, node: str) -> list[str]:
    """The failed checks of ``node``'s last pre-start, read from its rank unit's journal over SSH."""
    cmd = (f"journalctl -u {unit} --no-pager -o cat -n 20000 2>&1 "
           f"| grep -F {prestart.PREFIX} | tail -n {PRESTART_LINES} || true\n")
    res = fleet.run({node: cmd}, timeout=15, only=[node])[node]
    return prestart_failures(res.stdout) if res.reachable else []


def prestart_gate_failure(fleet: FleetLike, unit: str, nodes: list[str]) -> GateFailure | None:
    """The pre-start gate's failure on the first of ``nodes`` whose container stopped in it, if one
    did: a start that failed (the playbook's wait, or the fast path's) for that reason names the
    checks, not the wait that saw the unit fail."""
    for node in nodes:
        checks = read_prestart_failures(fleet, unit, node)
        if checks:
            detail = f"{prestart_summary(checks)} in the rank's container; the engine was not started"
            return GateFailure(PRESTART_GATE, node, detail, "\n".join(checks))
    return None


def prestart_summary(lines: list[str]) -> str:
    """``N check(s) failed (check x count, …)``, from the failed-check lines."""
    counts: dict[str, int] = {}
    for ln in lines:
        if ln.startswith(prestart.FAIL):
            check = ln[len(prestart.FAIL):].split()[0]
            counts[check] = counts.get(check, 0) + 1
    total = sum(counts.values())
    parts = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in counts.items())
    return f"{total} check{'s' if total != 1 else ''} failed ({parts})"


PHASES = ("unit", "health", "ready", "server_info", "markers", "chat", "qualify")
WAIT, OK, FAIL, SKIP, PENDING = "wait", "ok", "fail", "skip", "-"


@dataclass
class RankRow:
    name: str
    rank: int
    phases: dict[str, str] = field(default_factory=lambda: dict.fromkeys(PHASES, PENDING))
    unit: str = "?"
    mem_now: int | None = None
    mem_min: int | None = None
    note: str = ""


@dataclass
class BootState:
    rows: dict[str, RankRow]
    gate: str = "unit"
    started: float = 0.0
    elapsed: float = 0.0
    samples: int = 0
    done: bool = False


def expected_server_info(cluster: Cluster, head_entry: Mapping[str, Any]) -> dict[str, str]:
    """field -> rendered value, for the profile's server_info_fields, read from rank 0's argv."""
    argv = rank_launch(head_entry).argv
    out: dict[str, str] = {}
    for name in cluster.profile.gates.server_info_fields:
        flag = "--" + name.replace("_", "-")
        if flag in argv:
            i = argv.index(flag)
            out[name] = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else "true"
    return out


def server_check(cluster: Cluster) -> Callable[[Mapping[str, Any]], list[str]]:
    """``/server_info`` compared with the rendered flags of the profile's ``gates.server_info_fields``
    (rank 0's entry of the cluster's plan document): the comparison bench makes before every suite,
    as R4's client does."""
    from sparkctl.render import plan_document

    doc = plan_document(cluster)
    head = next(e for e in doc["nodes"] if e["name"] == cluster.head.name)
    expected = expected_server_info(cluster, head)
    return lambda info: compare_server_info(info, expected)


def same_value(actual: Any, expected: str) -> bool:
    if isinstance(actual, bool):
        return str(actual).lower() == expected.lower()
    if isinstance(actual, int | float) and not isinstance(actual, bool):
        try:
            return float(actual) == float(expected)
        except ValueError:
            return False
    return str(actual) == expected


def compare_server_info(info: Mapping[str, Any], expected: Mapping[str, str]) -> list[str]:
    problems = []
    for key, want in expected.items():
        if key not in info:
            problems.append(f"{key} missing (want {want})")
        elif not same_value(info[key], want):
            problems.append(f"{key}={info[key]!r}, rendered {want}")
    return problems


class BootWatch:
    """Wait for the gates in order while guarding memory; raise GateFailure on the first failure."""

    def __init__(
        self,
        cluster: Cluster,
        doc: Mapping[str, Any],
        fleet: FleetLike,
        http: httpx.Client,
        api_key: str | None,
        record_dir: Path | None = None,
        on_update: Callable[[BootState], None] | None = None,
        qualify: Callable[[], tuple[bool, str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        interval: float = SAMPLE_INTERVAL_S,
        poll: float = POLL_INTERVAL_S,
        ready_file: Path | None = None,
    ):
        self.cluster = cluster
        self.doc = doc
        self.fleet = fleet
        self.http = http
        self.api_key = api_key
        self.record_dir = record_dir
        self.on_update = on_update
        self.qualify = qualify
        self.clock = clock
        self.sleep = sleep
        self.interval = interval
        self.poll = poll
        self._last_sample: float | None = None
        self.gates = cluster.profile.gates
        self.floor = float(cluster.profile.memory.floor_gib) * GIB
        self.entries = {e["name"]: e for e in doc["nodes"]}
        self.head = self.entries[cluster.head.name]
        self.unit = unit_name(doc)
        self.state = BootState({e["name"]: RankRow(e["name"], int(e["rank"])) for e in doc["nodes"]})
        for row in self.state.rows.values():
            if row.rank != 0:
                for phase in ("ready", "server_info", "chat", "qualify"):
                    row.phases[phase] = SKIP
        self.server_info: dict[str, Any] = {}
        self.min_seen: dict[str, int] = {}
        # Each rank's unit invocation and container start once its unit is active: a rank started
        # again during the boot (or OOM-killed) fails it; at readiness they go to ``ready_file``,
        # against which `status` and `watch` judge the ranks afterwards.
        self.ready_file = ready_file
        self.boot_marks: dict[str, dict[str, Any]] = {}

    # -- plumbing ------------------------------------------------------------------------------

    def _emit(self) -> None:
        self.state.elapsed = self.clock() - self.state.started
        if self.on_update is not None:
            self.on_update(self.state)

    def _record(self, name: str, payload: Any, append: bool = False) -> None:
        if self.record_dir is None:
            return
        self.record_dir.mkdir(parents=True, exist_ok=True)
        path = self.record_dir / name
        # /server_info carries SGLang's api_key in clear: nothing secret is ever written here.
        payload = strip_secrets(payload, [self.api_key or ""])
        if append:
            with path.open("a") as f:
                f.write(json.dumps(payload) + "\n")
        else:
            path.write_text(json.dumps(payload, indent=2, default=str) + "\n")

    def log_tail(self, node: str, lines: int = LOG_TAIL_LINES) -> str:
        text, error = read_journal(self.fleet, self.unit, node, lines)
        return text.strip() if text is not None else f"(log unavailable: {error})"

    def prestart_lines(self, node: str) -> list[str]:
        """The failed checks of the node's last pre-start, read from its rank unit's journal."""
        return read_prestart_failures(self.fleet, self.unit, node)

    def fail(self, gate: str, node: str | None, detail: str, phase: str | None = None) -> GateFailure:
        if node is not None and gate in UNIT_EXIT_GATES and kit.enabled(self.cluster):
            checks = self.prestart_lines(node)
            if checks:
                # The container stopped before the engine: the kit differs from its pins. Those
                # lines are the reason, not the engine's log (there is none) nor rank 0's.
                detail = (f"{prestart_summary(checks)} in the rank's container; the engine was not "
                          f"started ({detail})")
                return self._failed(PRESTART_GATE, node, detail, phase, "\n".join(checks), with_head=False)
        return self._failed(gate, node, detail, phase)

    def _failed(self, gate: str, node: str | None, detail: str, phase: str | None = None,
                tail: str | None = None, with_head: bool = True) -> GateFailure:
        if node is not None and phase is not None:
            self.state.rows[node].phases[phase] = FAIL
            self.state.rows[node].note = detail[:80]
        self._emit()
        if tail is None:
            tail = self.log_tail(node) if node is not None else ""
        head = self.cluster.head.name
        head_tail = self.log_tail(head) if with_head and node is not None and node != head else ""
        self._record("boot-state.json", {"status": "FAILED", "gate": gate, "node": node, "detail": detail,
                                         "min_mem_available": self.min_seen})
        return GateFailure(gate, node, detail, tail, head if head_tail else None, head_tail)

    def _deadline(self) -> float:
        return self.state.started + float(self.gates.boot_timeout_s)

    # -- sampling -------------------------------------------------------------------------------

    def sample(self) -> dict[str, NodeFacts]:
        """One round of the watch probe on every node: unit states and the memory guard."""
        self._last_sample = self.clock()
        facts = collect(self.cluster, self.doc, self.fleet, "watch", timeout=10)
        now = time.time()
        for name, f in facts.items():
            row = self.state.rows[name]
            if not f.reachable or f.error:
                raise self.fail("node reachable", name, f.error or "no answer", "unit")
            row.unit = f.active
            mem = f.mem_available
            if mem is not None:
                row.mem_now = mem
                row.mem_min = mem if row.mem_min is None else min(row.mem_min, mem)
                self.min_seen[name] = row.mem_min
            self._record("memory-samples.jsonl", {"t": now, "node": name, "rank": row.rank,
                                                  "mem_available": mem, "unit": row.unit}, append=True)
        self.state.samples += 1
        for name in facts:
            row = self.state.rows[name]
            if row.mem_now is not None and row.mem_now < self.floor:
                lowest = row.mem_min if row.mem_min is not None else row.mem_now
                raise self.fail(
                    "memory guard", name,
                    f"MemAvailable fell to {row.mem_now / GIB:.2f} GiB (minimum seen {lowest / GIB:.2f} GiB)"
                    f" below the floor {self.floor / GIB:.2f} GiB", "unit")
        for name, f in facts.items():
            row = self.state.rows[name]
            if row.phases["unit"] == OK and f.active != "active":
                unit = f.unit
                faults = "".join(f"; {x}" for x in rank_faults(f))
                raise self.fail("rank unit exited", name,
                                f"{self.unit} is {f.active} (result {unit.get('result')}, "
                                f"exit status {unit.get('exit_status')}){faults}", "unit")
            if row.phases["unit"] == OK:
                self._check_restarts(name, f)
        return facts

    def _check_restarts(self, name: str, f: NodeFacts) -> None:
        """The rank's run as first seen active; an OOM kill or a restart since fails the boot."""
        seen = self.boot_marks.setdefault(name, ready_mark(f))
        now = ready_mark(f)
        for key, value in now.items():
            if not seen.get(key):  # the container is created a moment after the unit starts
                seen[key] = value
        faults = rank_faults(f, seen)
        if faults:
            rank = self.state.rows[name].rank
            raise self.fail("rank restarted or OOM-killed", name, f"rank {rank}: {'; '.join(faults)}", "unit")

    def _wait(self, gate: str, check: Callable[[], bool], node_on_timeout: Callable[[], str | None],
              phase: str) -> None:
        """Poll ``check`` (after a memory/unit sample) until true or the boot deadline passes."""
        self.state.gate = gate
        while True:
            if self._last_sample is None or self.clock() - self._last_sample >= self.interval:
                self.sample()
            if check():
                self._emit()
                return
            self._emit()
            if self.clock() > self._deadline():
                node = node_on_timeout()
                raise self.fail(gate, node, f"not reached within {self.gates.boot_timeout_s} s", phase)
            self.sleep(self.poll)

    # -- the gates ------------------------------------------------------------------------------

    def run(self) -> BootState:
        self.state.started = self.clock()
        rows = self.state.rows
        timeout = float(self.gates.health_timeout_s)
        head_url = api_url(self.cluster)
        headers = auth_headers(self.api_key)

        for row in rows.values():
            row.phases["unit"] = WAIT
        unit_deadline = self.clock() + min(60.0, float(self.gates.boot_timeout_s))

        def units_active() -> bool:
            facts = self._last_units()
            for name, state in facts.items():
                if state == "active":
                    rows[name].phases["unit"] = OK
                elif state in ("failed", "inactive") or self.clock() > unit_deadline:
                    raise self.fail("unit active", name, f"{self.unit} is {state}", "unit")
            return all(r.phases["unit"] == OK for r in rows.values())

        self._wait("unit active", units_active, lambda: None, "unit")

        workers = [n for n, r in rows.items() if r.rank != 0]
        nodes = {n.name: n for n in self.cluster.nodes}
        for name in workers:
            rows[name].phases["health"] = WAIT

        def workers_healthy() -> bool:
            for name in workers:
                if rows[name].phases["health"] == OK:
                    continue
                ans = get(self.http, f"{api_url(self.cluster, nodes[name])}/health", timeout)
                if ans.ok:
                    rows[name].phases["health"] = OK
                    rows[name].note = ""
                else:
                    rows[name].note = f"/health {ans.code or ans.error}"
            return all(rows[n].phases["health"] == OK for n in workers)

        def first_unhealthy() -> str | None:
            return next((n for n in workers if rows[n].phases["health"] != OK), None)

        self._wait("worker /health", workers_healthy, first_unhealthy, "health")
        head = self.head["name"]
        rows[head].phases["ready"] = WAIT

        def head_ready() -> bool:
            ans = get(self.http, f"{head_url}/ready", timeout)
            if ans.ok:
                rows[head].phases["ready"] = OK
                rows[head].phases["health"] = OK
                rows[head].note = ""
                return True
            rows[head].note = f"/ready {ans.code or ans.error}"
            return False

        self._wait("rank 0 /ready", head_ready, lambda: head, "ready")

        rows[head].phases["server_info"] = WAIT
        self._emit()
        info = self._retrying(lambda: get(self.http, f"{head_url}/server_info", timeout, headers))
        if not info.ok or not isinstance(info.body, dict):
            raise self.fail("/server_info", head, f"answered {info.code or info.error}", "server_info")
        self.server_info = info.body
        self._record("server-info.json", info.body)
        problems = compare_server_info(info.body, expected_server_info(self.cluster, self.head))
        if problems:
            raise self.fail("/server_info equals the rendered config", head, "; ".join(problems),
                            "server_info")
        rows[head].phases["server_info"] = OK

        self.check_markers()

        rows[head].phases["chat"] = WAIT
        self._emit()
        if self.gates.smoke is not None:  # the profile's own smoke, warm-up and garbage guard
            gate, (ok, detail) = "boot smoke and warm-up", self.smoke(head_url, headers)
        else:
            gate, (ok, detail) = "chat completion", self.chat(head_url, headers, max(timeout, 30.0))
        if not ok:
            raise self.fail(gate, head, detail, "chat")
        rows[head].phases["chat"] = OK
        rows[head].note = detail[:80]

        if self.gates.qualify_on_up and self.qualify is not None:
            rows[head].phases["qualify"] = WAIT
            self._emit()
            ok, detail = self.qualify()
            if not ok:
                raise self.fail("qualify --suite quick", head, detail, "qualify")
            rows[head].phases["qualify"] = OK
        else:
            rows[head].phases["qualify"] = SKIP
        # One more look after the last gate: no rank OOM-killed or restarted while they ran.
        facts = self.sample()
        marks = {n: self.boot_marks.get(n) or ready_mark(f) for n, f in facts.items()}
        self._record("ready-marks.json", marks)
        if self.ready_file is not None:
            save_ready_marks(self.ready_file, facts)
        self.state.done = True
        self.state.gate = "ready"
        self._emit()
        self._record("boot-state.json", {"status": "READY", "seconds": round(self.state.elapsed, 2),
                                         "min_mem_available": self.min_seen})
        return self.state

    def _last_units(self) -> dict[str, str]:
        return {n: r.unit for n, r in self.state.rows.items()}

    def _retrying(self, call: Callable[[], HttpAnswer]) -> HttpAnswer:
        """A just-ready server may drop the first request: three tries, one second apart."""
        answer = HttpAnswer(None, None, "not tried")
        for attempt in Retrying(stop=stop_after_attempt(3), wait=wait_fixed(1), reraise=False,
                                retry=retry_if_exception_type(_Retry)):
            with attempt:
                answer = call()
                if answer.code is None or answer.code >= 500:
                    raise _Retry()
        return answer

    def check_markers(self) -> None:
        markers = list(self.gates.log_markers)
        rows = self.state.rows
        if not markers:
            for row in rows.values():
                row.phases["markers"] = SKIP
            return
        self.state.gate = "log markers"
        for row in rows.values():
            row.phases["markers"] = WAIT
        self._emit()
        patterns = sorted({m.pattern for m in markers} | {r for m in markers for r in m.requires})
        records = sorted({m.pattern for m in markers if m.record is not None})
        facts = collect(self.cluster, self.doc, self.fleet, "markers", timeout=30,
                        extra={"patterns": patterns, "records": records})
        has_kit = kit.enabled(self.cluster)
        for name, f in facts.items():
            row = rows[name]
            seen = RankLog.of(f) if f.reachable else RankLog({}, {})
            problems = marker_problems(markers, seen, RankContext.of(self.entries[name]), has_kit)
            if problems:
                raise self.fail("log markers", name, "; ".join(problems), "markers")
            row.phases["markers"] = OK
        self._emit()

    def chat(self, url: str, headers: Mapping[str, str], timeout: float) -> tuple[bool, str]:
        body = {
            "model": served_model_name(self.cluster),
            "messages": [{"role": "user", "content": "What is 19 + 23? Answer with the number only."}],
            "max_tokens": 16,
            "temperature": 0,
        }
        try:
            resp = self.http.post(f"{url}/v1/chat/completions", json=body, headers=dict(headers),
                                  timeout=timeout)
        except httpx.HTTPError as exc:
            return False, http_reason(exc)
        if resp.status_code != 200:
            return False, f"HTTP {resp.status_code}: {resp.text[:200]}"
        try:
            choice = resp.json()["choices"][0]
            text = choice["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            return False, f"not a chat completion: {resp.text[:200]}"
        if not text.strip():
            return False, f"empty answer (finish_reason {choice.get('finish_reason')})"
        return True, f"answered {text.strip()[:40]!r}"

    def smoke(self, url: str, headers: Mapping[str, str]) -> tuple[bool, str]:
        """The profile's boot smoke, warm-up and garbage-output guard (``gates.smoke``) against rank 0;
        every request and answer in smoke.json of the run directory."""
        spec = self.gates.smoke
        assert spec is not None
        result = run_smoke(self.http, url, headers, served_model_name(self.cluster), spec,
                           self.cluster.profile.max_running_requests or 1)
        self._record("smoke.json", {"ok": result.ok, "detail": result.detail, "warnings": result.warnings,
                                    "requests": result.records})
        if result.warnings:
            return result.ok, f"{result.detail}; {len(result.warnings)} warning(s): {result.warnings[0]}"
        return result.ok, result.detail


class _Retry(Exception):
    pass


# --- the readiness markers ------------------------------------------------------------------------


@dataclass(frozen=True)
class RankContext:
    """What a rank's marker expectations are filled from: its rendered launch."""

    rank: int
    tp: int
    ep: int
    env: Mapping[str, str]

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> RankContext:
        rl = rank_launch(entry)
        return cls(int(entry["rank"]), _flag_int(rl.argv, "--tp-size", 1), _flag_int(rl.argv, "--ep-size", 1),
                   dict(rl.env))

    @property
    def values(self) -> dict[str, int]:
        return marker_vars(self.rank, self.tp, self.ep)


def _flag_int(argv: tuple[str, ...], flag: str, default: int) -> int:
    if flag in argv:
        i = argv.index(flag)
        if i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
    return default


@dataclass(frozen=True)
class RankLog:
    """What the markers probe read from one rank's log: lines per pattern, and for the patterns that
    carry a record, the text after the match of the last lines."""

    counts: Mapping[str, int]
    texts: Mapping[str, list[str]]

    @classmethod
    def of(cls, f: NodeFacts) -> RankLog:
        return cls(dict(f.data.get("markers") or {}), dict(f.data.get("marker_lines") or {}))


def _same(got: Any, want: Any) -> bool:
    """JSON equality that keeps true and 1 apart (Python's == does not)."""
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(got, bool) and isinstance(want, bool) and got == want
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(_same, got, want))
    if isinstance(want, dict):
        return (isinstance(got, dict) and got.keys() == want.keys()
                and all(_same(got[k], want[k]) for k in want))
    return bool(got == want)


def _record_of(text: str) -> Any:
    """The JSON value that starts the text after a marker (anything after it is ignored)."""
    value, _end = json.JSONDecoder().raw_decode(text.strip())
    return value


def _field_problems(where: str, record: Any, want: Mapping[str, Any], exact: bool) -> list[str]:
    if not isinstance(record, dict):
        return [f"{where}: not a JSON object ({type(record).__name__})"]
    out = [f"{where}: field {key} missing (expected {json.dumps(value)})"
           for key, value in want.items() if key not in record]
    out += [f"{where}: field {key} expected {json.dumps(value)}, got {json.dumps(record[key])}"
            for key, value in want.items() if key in record and not _same(record[key], value)]
    if exact:
        out += [f"{where}: field {key} not expected (got {json.dumps(record[key])})"
                for key in record if key not in want]
    return out


def marker_problems(markers: list[LogMarker], log: RankLog, rank: RankContext, has_kit: bool) -> list[str]:
    """Every way one rank's log falls short of the profile's markers, each naming the rank, the
    marker, the field, what was expected and what it logged (empty: the rank passes)."""
    out: list[str] = []
    who = f"rank {rank.rank}"
    for m in markers:
        if (m.ranks == "head" and rank.rank != 0) or not m.required_for(has_kit):
            continue
        n = int(log.counts.get(m.pattern, 0))
        if not m.expected_for(rank.env):
            assert m.when is not None
            if m.when.otherwise == "forbidden" and n:
                actual = rank.env.get(m.when.env)
                out.append(f"{who}: {m.pattern}: {n} line(s), expected none with {m.when.env}="
                           f"{actual if actual is not None else '(unset)'} (it belongs to {m.when.env}="
                           f"{m.when.equals})")
            continue
        if not (n == m.count if m.count is not None else n >= 1):
            want = f"exactly {m.count}" if m.count is not None else "at least one"
            out.append(f"{who}: {m.pattern!r}: {n} lines, want {want}")
            continue
        for required in m.requires:
            if not int(log.counts.get(required, 0)):
                out.append(f"{who}: {m.pattern} needs a {required.strip()!r} line as well: none logged")
        if m.record is not None:
            out += _record_problems(m, log.texts.get(m.pattern) or [], rank, who)
    return out


def _record_problems(m: LogMarker, texts: list[str], rank: RankContext, who: str) -> list[str]:
    spec = fill_marker_value(m.record.model_dump() if m.record else {}, rank.values)
    records: list[Any] = []
    out: list[str] = []
    for i, text in enumerate(texts):
        try:
            records.append(_record_of(text))
        except ValueError as exc:
            out.append(f"{who}: {m.pattern} line {i + 1}: not JSON ({exc}): {text.strip()[:80]!r}")
    if out or not records:
        return out or [f"{who}: {m.pattern}: no record after the marker"]
    checked = records[-1:] if spec["records"] == "last" else records
    for i, record in enumerate(checked):
        where = f"{who}: {m.pattern}" + (f" line {i + 1}" if len(checked) > 1 else "")
        out += _field_problems(where, record, spec["fields"], exact=False)
        for role, want in spec["roles"].items():
            entries = record.get(role) if isinstance(record, dict) else None
            if not isinstance(entries, dict):
                out.append(f"{where}: {role} missing (expected {want['count']} entries)")
                continue
            if len(entries) != want["count"]:
                out.append(f"{where}: {role}: {len(entries)} entries, expected {want['count']}")
            bad = [(key, p) for key, entry in entries.items()
                   for p in _field_problems(f"{where}: {role} {key}", entry, want["each"], exact=True)]
            if bad:
                more = len({key for key, _p in bad}) - 1
                out.append(bad[0][1] + (f" (and {more} more {role} entries differ)" if more > 0 else ""))
    for key, values in spec["distinct"].items():
        got = [r.get(key) for r in records if isinstance(r, dict)]
        if sorted(map(json.dumps, got)) != sorted(map(json.dumps, values)):
            out.append(f"{who}: {m.pattern}: field {key} expected {json.dumps(values)} across the lines, "
                       f"got {json.dumps(got)}")
    return out
