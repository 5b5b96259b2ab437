"""Readiness gates, preflight, the cluster verdict and the memory guard (HTTP + one SSH probe per node).

What the rest of sparkctl calls:

* ``snapshot(cluster, doc, fleet, http)``: the facts of every node and of rank 0's API, plus a
  verdict ``ready | degraded | down`` with reasons (``sparkctl status``).
* ``preflight(cluster, doc, fleet, force)``: every check on every node, reported together
  (``sparkctl up`` refuses to start on any failure).
* ``BootWatch(...).run()``: after the units started, the gates in order (unit active, worker
  /health, rank 0 /ready, /server_info, log markers, one chat completion, optional qualify), with
  the memory guard sampling MemAvailable on every node every ~2 s. A failed gate raises
  ``GateFailure`` naming the gate, the node and its log tail.

SGLang facts behind the gates (reference/sglang-contract.md §1.4, §4): a worker's /health is a
dummy that answers 200 once its scheduler finished init, only rank 0 serves the API and /ready,
and a dead peer is noticed by nothing but a watchdog, so every unit's state is watched as well.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from sparkctl.remote import HostResult, Target

GIB = 1024**3
PROBE_SOURCE = Path(__file__).with_name("node_probe.py")
SAMPLE_INTERVAL_S = 2.0   # memory guard and unit states, every node
POLL_INTERVAL_S = 0.5     # HTTP gates between samples
LOG_TAIL_LINES = 30
# Command-line words of a rank process, whatever the runtime (an earlier run still alive).
RANK_PROCESS_WORDS = ("sglang serve", "sglang.launch_server", "sparkctl-sim-rank", "sparkctl.sim.rank")

READY, DEGRADED, DOWN = "ready", "degraded", "down"


class FleetLike(Protocol):
    targets: Mapping[str, Target]

    def run(
        self, script: Any, timeout: float = ..., only: Iterable[str] | None = ...
    ) -> dict[str, HostResult]: ...


# --- the node probe -----------------------------------------------------------------------------


def probe_script(params: Mapping[str, Any]) -> str:
    """Shell text that runs node_probe.py with ``params`` under python3 (sent on stdin, not argv)."""
    source = PROBE_SOURCE.read_text()
    call = f"\nmain(json.loads({json.dumps(json.dumps(dict(params)))}))\n"
    return "exec python3 - <<'SPARKCTL_PROBE_EOF'\n" + source + call + "SPARKCTL_PROBE_EOF\n"


def launch(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    return entry.get("rank_launch") or {}


def unit_name(doc: Mapping[str, Any]) -> str:
    return str(launch(doc["nodes"][0]).get("unit_name", "sparkctl-rank.service"))


def probe_params(cluster: Any, entry: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """What the probe needs to know about one node (all from the plan document and the model)."""
    rl = launch(entry)
    name = str(rl.get("unit_name", "sparkctl-rank.service"))
    params: dict[str, Any] = {"mode": mode, "unit": name}
    if mode == "watch":
        params["health_port"] = cluster.ports.api
        return params
    if mode == "markers":
        return params
    unit_file = f"/etc/systemd/system/{name}"
    params.update(
        unit_file=unit_file,
        hash_files=[unit_file, *rank_files(entry)],
        netdevs=[p["netdev"] for p in entry.get("fabric", [])],
        rank=int(entry["rank"]),
        tp=int(cluster.profile.tp_size),
    )
    if _needs_shards(cluster):
        params["engram_dir"] = str(cluster.paths.engram_dir)
    if mode == "preflight":
        argv = list(rl.get("argv") or [])
        params.update(
            model_dir=str(cluster.paths.model_dir),
            runtime=cluster.runtime.kind,
            image=cluster.runtime.image,
            venv_path=str(cluster.runtime.venv_path) if cluster.runtime.venv_path else None,
            program=argv[0] if argv else None,
            process_words=list(RANK_PROCESS_WORDS),
            hca_ips=[[p["hca"], p["ip"]] for p in entry.get("fabric", [])],
        )
    return params


def rank_files(entry: Mapping[str, Any]) -> list[str]:
    """The rank's files besides the unit: its environment file and its secrets config(s)."""
    rl = launch(entry)
    argv = list(rl.get("argv") or [])
    files = [str(rl["env_file"])] if rl.get("env_file") else []
    return files + [f for f in entry.get("secret_files", []) if f in argv]


def expected_hashes(cluster: Any, entry: Mapping[str, Any]) -> dict[str, str]:
    """SHA-256 of what the rank role writes (secrets substituted here, only to hash them)."""
    import hashlib

    rl = launch(entry)
    texts = {f"/etc/systemd/system/{rl.get('unit_name', 'sparkctl-rank.service')}": str(rl.get("unit", ""))}
    for path in rank_files(entry):
        text = str(entry.get("files", {}).get(path, ""))
        if path in entry.get("secret_files", []):
            for name, ref in cluster.secrets.items():
                marker = f"<secret:{name}>"
                if marker in text:
                    text = text.replace(marker, ref.resolve())
        texts[path] = text
    return {path: hashlib.sha256(text.encode()).hexdigest() for path, text in texts.items()}


def _needs_shards(cluster: Any) -> bool:
    """A profile whose ranks read packed Engram shards (DSV41_PACKED_DIR) needs them staged."""
    return "DSV41_PACKED_DIR" in (cluster.profile.env or {})


@dataclass
class NodeFacts:
    """One node as the probe saw it."""

    name: str
    rank: int
    reachable: bool
    error: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def unit(self) -> dict[str, Any]:
        return dict(self.data.get("unit") or {})

    @property
    def active(self) -> str:
        unit = self.unit
        if "error" in unit:
            return "unknown"
        return str(unit.get("active", "unknown"))

    @property
    def mem_available(self) -> int | None:
        mem = self.data.get("mem") or {}
        value = mem.get("MemAvailable")
        return int(value) if value is not None else None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rank": self.rank, "reachable": self.reachable, "error": self.error,
                **self.data}


def collect(cluster: Any, doc: Mapping[str, Any], fleet: FleetLike, mode: str,
            timeout: float = 15.0, only: Iterable[str] | None = None,
            extra: Mapping[str, Any] | None = None) -> dict[str, NodeFacts]:
    """Run the probe in ``mode`` on every node (or ``only`` some) at once; parse what came back."""
    entries = {e["name"]: e for e in doc["nodes"]}
    names = list(only) if only is not None else [e["name"] for e in doc["nodes"]]
    scripts = {}
    for n in names:
        params = probe_params(cluster, entries[n], mode)
        params.update(extra or {})
        scripts[n] = probe_script(params)
    results = fleet.run(scripts, timeout=timeout, only=names)
    out: dict[str, NodeFacts] = {}
    for n in names:
        res = results[n]
        rank = int(entries[n]["rank"])
        if not res.reachable:
            out[n] = NodeFacts(n, rank, False, res.error)
            continue
        try:
            data = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            why = (res.stderr.strip().splitlines() or [f"probe exited {res.rc} with no output"])[-1]
            out[n] = NodeFacts(n, rank, True, f"probe failed: {why[:200]}")
            continue
        out[n] = NodeFacts(n, rank, True, None, data)
    return out


# --- HTTP checks of the ranks -------------------------------------------------------------------


@dataclass
class HttpAnswer:
    code: int | None
    body: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.code == 200


def get(http: httpx.Client, url: str, timeout: float, headers: Mapping[str, str] | None = None) -> HttpAnswer:
    try:
        resp = http.get(url, timeout=timeout, headers=dict(headers or {}))
    except httpx.HTTPError as exc:
        return HttpAnswer(None, None, _http_reason(exc))
    try:
        body: Any = resp.json()
    except ValueError:
        body = resp.text[:500]
    return HttpAnswer(resp.status_code, body)


def _http_reason(exc: Exception) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused" if "refused" in str(exc).lower() else f"cannot connect ({exc})"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"


def base_url(cluster: Any, node: Any) -> str:
    return f"http://{node.mgmt_ip}:{cluster.ports.api}"


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@dataclass
class HeadFacts:
    url: str
    health: HttpAnswer
    ready: HttpAnswer
    models: HttpAnswer

    @property
    def served(self) -> list[str]:
        body = self.models.body if isinstance(self.models.body, dict) else {}
        return [str(c.get("id")) for c in body.get("data") or [] if isinstance(c, dict)]

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "health": asdict(self.health) | {"body": None},
                "ready": asdict(self.ready) | {"body": None},
                "models": {"code": self.models.code, "error": self.models.error, "served": self.served}}


def head_checks(cluster: Any, http: httpx.Client, api_key: str | None, timeout: float) -> HeadFacts:
    url = base_url(cluster, cluster.head)
    return HeadFacts(
        url,
        get(http, f"{url}/health", timeout),
        get(http, f"{url}/ready", timeout),
        get(http, f"{url}/v1/models", timeout, auth_headers(api_key)),
    )


# --- the verdict --------------------------------------------------------------------------------


@dataclass
class Snapshot:
    nodes: dict[str, NodeFacts]
    head: HeadFacts | None
    verdict: str
    reasons: list[str]
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reasons": self.reasons,
            "seconds": round(self.seconds, 3),
            "nodes": [f.as_dict() for f in sorted(self.nodes.values(), key=lambda f: f.rank)],
            "head": self.head.as_dict() if self.head else None,
        }


def verdict(cluster: Any, nodes: Mapping[str, NodeFacts], head: HeadFacts | None) -> tuple[str, list[str]]:
    """ready: every rank active and rank 0 answering /health, /ready and /v1/models; down: no rank
    active; degraded otherwise. Reasons say what is wrong, one line each."""
    reasons: list[str] = []
    active = 0
    floor = float(cluster.profile.memory.floor_gib) * GIB
    for f in sorted(nodes.values(), key=lambda f: f.rank):
        who = f"{f.name} (rank {f.rank})"
        if not f.reachable:
            reasons.append(f"{who}: unreachable: {f.error}")
            continue
        if f.error:
            reasons.append(f"{who}: {f.error}")
            continue
        state = f.active
        if state == "active":
            active += 1
        else:
            unit = f.unit
            detail = unit.get("error") or f"{state}/{unit.get('sub', '')}"
            if unit.get("result") not in (None, "", "success"):
                detail += f", result {unit.get('result')}"
            reasons.append(f"{who}: rank unit not running ({detail})")
        mem = f.mem_available
        if mem is not None and mem < floor and state == "active":
            reasons.append(f"{who}: MemAvailable {mem / GIB:.2f} GiB below the floor "
                           f"{floor / GIB:.2f} GiB")
        for dev, link in (f.data.get("links") or {}).items():
            if not link.get("present"):
                reasons.append(f"{who}: fabric port {dev} missing")
            elif link.get("state") not in ("up", "unknown"):
                reasons.append(f"{who}: fabric port {dev} is {link.get('state')}")
            elif link.get("mtu") and link["mtu"] < int(cluster.fabric.mtu):
                reasons.append(f"{who}: fabric port {dev} MTU {link['mtu']} < {cluster.fabric.mtu}")
        shards = f.data.get("shards")
        if shards is not None and not shards.get("verified"):
            reasons.append(f"{who}: Engram shards not verified ({shards.get('problem')})")
    if head is not None and active:
        for what, ans in (("/health", head.health), ("/ready", head.ready), ("/v1/models", head.models)):
            if not ans.ok:
                reasons.append(f"rank 0 {what}: {ans.code if ans.code is not None else ans.error}")
    if active == 0:
        return DOWN, reasons or ["no rank is running"]
    if reasons or active < len(nodes):
        return DEGRADED, reasons
    return READY, []


def snapshot(cluster: Any, doc: Mapping[str, Any], fleet: FleetLike, http: httpx.Client,
             api_key: str | None, timeout: float = 5.0) -> Snapshot:
    """Probe every node and rank 0's API concurrently; judge."""
    from concurrent.futures import ThreadPoolExecutor

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=1) as pool:
        head_future = pool.submit(head_checks, cluster, http, api_key, min(timeout, 2.0))
        nodes = collect(cluster, doc, fleet, "status", timeout=timeout)
        head = head_future.result()
    state, reasons = verdict(cluster, nodes, head)
    return Snapshot(nodes, head, state, reasons, time.monotonic() - start)


# --- preflight ----------------------------------------------------------------------------------


@dataclass
class Check:
    node: str           # a node name, or "cluster" for cross-node checks
    name: str
    ok: bool
    detail: str = ""
    skipped: bool = False


def preflight_checks(cluster: Any, facts: Mapping[str, NodeFacts], force: bool = False) -> list[Check]:
    """Judge the preflight probe of every node; cross-node checks last. Pure (tested on fixtures)."""
    checks: list[Check] = []
    floor = float(cluster.profile.memory.floor_gib) * GIB
    ports = {cluster.ports.api: "api", cluster.ports.dist_init: "dist_init"}
    identities: dict[str, str] = {}
    gids: dict[str, dict[str, int | None]] = {}
    for f in sorted(facts.values(), key=lambda f: f.rank):
        add = lambda name, ok, detail="", skipped=False, n=f.name: checks.append(  # noqa: E731
            Check(n, name, ok, detail, skipped))
        if not f.reachable or f.error:
            add("reachable", False, f.error or "no answer")
            continue
        d = f.data
        add("reachable", True, d.get("host", ""))
        unit = f.unit
        if "error" in unit:
            add("systemd", False, unit["error"])
        procs = d.get("rank_processes") or []
        alive = f.active in ("active", "activating", "deactivating") or procs
        who_alive = "; ".join(f"pid {p['pid']}: {p['cmd']}" for p in procs) or f"unit {f.active}"
        add("no earlier rank alive", not alive, who_alive if alive else "none")
        others = list(d.get("gpu_apps") or []) + list(d.get("gpu_containers") or [])
        if others:
            add("GPU idle", force, ("ignored (--force): " if force else "in use: ") + "; ".join(others)[:300])
        else:
            add("GPU idle", True, "no compute process or GPU container")
        model = d.get("model") or {}
        add("model files", bool(model.get("config")) and (model.get("safetensors", 0) > 0),
            f"config.json {'present' if model.get('config') else 'missing'}, "
            f"{model.get('safetensors', 0)} safetensors in {cluster.paths.model_dir}")
        shards = d.get("shards")
        if shards is None:
            add("Engram shards", True, "not used by this profile", skipped=True)
        else:
            verified = bool(shards.get("verified"))
            add("Engram shards", verified,
                f"{shards.get('files')} files verified" if verified else str(shards.get("problem")))
        mem = f.mem_available
        dropped = "after dropping caches" if d.get("caches_dropped") else "caches not dropped"
        if mem is None:
            add("MemAvailable", False, "no /proc/meminfo")
        else:
            add("MemAvailable", mem >= floor, f"{mem / GIB:.2f} GiB {dropped} (floor {floor / GIB:.2f} GiB)")
        listening = set(d.get("ports_listening") or [])
        busy = [f"{p} ({what})" for p, what in ports.items() if p in listening]
        add("ports free", not busy, ("in use: " + ", ".join(busy)) if busy else
            ", ".join(str(p) for p in ports))
        ident = str(d.get("identity") or "")
        identities[f.name] = ident
        if ident.startswith("missing"):
            add("runtime present", False, ident)
        g = d.get("gids")
        if g is None:
            add("RoCE GID index", True, "no RDMA devices on this node (lab)", skipped=True)
        else:
            gids[f.name] = g
            missing = [h for h, i in g.items() if i is None]
            add("RoCE GID index", not missing,
                ("no RoCE v2 IPv4 GID on " + ", ".join(missing)) if missing else
                ", ".join(f"{h}={i}" for h, i in g.items()))
    good = {n: i for n, i in identities.items() if i and not i.startswith("missing")}
    if len(set(good.values())) > 1:
        groups: dict[str, list[str]] = {}
        for n, i in good.items():
            groups.setdefault(i, []).append(n)
        detail = "; ".join(f"{i[:23]}…: {', '.join(ns)}" for i, ns in groups.items())
        checks.append(Check("cluster", "same runtime everywhere", False, detail))
    elif good:
        checks.append(Check("cluster", "same runtime everywhere", True, next(iter(good.values()))[:40]))
    if gids:
        values = {i for g in gids.values() for i in g.values() if i is not None}
        if len(values) > 1:
            checks.append(Check("cluster", "common GID index", False,
                                "; ".join(f"{n}: {g}" for n, g in gids.items())))
        elif values:
            checks.append(Check("cluster", "common GID index", True, f"{values.pop()} on every port"))
    return checks


def preflight(cluster: Any, doc: Mapping[str, Any], fleet: FleetLike, force: bool = False,
              timeout: float = 60.0) -> tuple[list[Check], dict[str, NodeFacts]]:
    facts = collect(cluster, doc, fleet, "preflight", timeout=timeout)
    return preflight_checks(cluster, facts, force), facts


# --- the boot watch -----------------------------------------------------------------------------


class GateFailure(Exception):
    """A gate failed: which gate, on which node, why, and that node's log tail."""

    def __init__(self, gate: str, node: str | None, detail: str, log_tail: str = ""):
        super().__init__(f"{gate}: {detail}")
        self.gate = gate
        self.node = node
        self.detail = detail
        self.log_tail = log_tail


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


def expected_server_info(cluster: Any, head_entry: Mapping[str, Any]) -> dict[str, str]:
    """field -> rendered value, for the profile's server_info_fields, read from rank 0's argv."""
    argv = list(launch(head_entry).get("argv") or [])
    out: dict[str, str] = {}
    for name in cluster.profile.gates.server_info_fields:
        flag = "--" + name.replace("_", "-")
        if flag in argv:
            i = argv.index(flag)
            out[name] = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else "true"
    return out


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


def served_model(cluster: Any, head_entry: Mapping[str, Any]) -> str:
    argv = list(launch(head_entry).get("argv") or [])
    if "--served-model-name" in argv:
        return argv[argv.index("--served-model-name") + 1]
    return str(cluster.paths.model_dir)


class BootWatch:
    """Wait for the gates in order while guarding memory; raise GateFailure on the first failure."""

    def __init__(
        self,
        cluster: Any,
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
        self.head = next(e for e in doc["nodes"] if int(e["rank"]) == 0)
        self.unit = unit_name(doc)
        self.state = BootState({e["name"]: RankRow(e["name"], int(e["rank"])) for e in doc["nodes"]})
        for row in self.state.rows.values():
            if row.rank != 0:
                for phase in ("ready", "server_info", "chat", "qualify"):
                    row.phases[phase] = SKIP
        self.server_info: dict[str, Any] = {}
        self.min_seen: dict[str, int] = {}

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
        if append:
            with path.open("a") as f:
                f.write(json.dumps(payload) + "\n")
        else:
            path.write_text(json.dumps(payload, indent=2, default=str) + "\n")

    def log_tail(self, node: str, lines: int = LOG_TAIL_LINES) -> str:
        cmd = f"journalctl -u {self.unit} -n {lines} --no-pager -o short-iso 2>&1 || true\n"
        res = self.fleet.run({node: cmd}, timeout=15, only=[node])[node]
        return res.stdout.strip() if res.reachable else f"(log unavailable: {res.error})"

    def fail(self, gate: str, node: str | None, detail: str, phase: str | None = None) -> GateFailure:
        if node is not None and phase is not None:
            self.state.rows[node].phases[phase] = FAIL
            self.state.rows[node].note = detail[:80]
        self._emit()
        tail = self.log_tail(node) if node is not None else ""
        self._record("boot-state.json", {"status": "FAILED", "gate": gate, "node": node, "detail": detail,
                                         "min_mem_available": self.min_seen})
        return GateFailure(gate, node, detail, tail)

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
                raise self.fail("rank unit exited", name,
                                f"{self.unit} is {f.active} (result {unit.get('result')}, "
                                f"exit status {unit.get('exit_status')})", "unit")
        return facts

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
        head_url = base_url(self.cluster, self.cluster.head)
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
                ans = get(self.http, f"{base_url(self.cluster, nodes[name])}/health", timeout)
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
        ok, detail = self.chat(head_url, headers, max(timeout, 30.0))
        if not ok:
            raise self.fail("chat completion", head, detail, "chat")
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
        patterns = sorted({m.pattern for m in markers})
        facts = collect(self.cluster, self.doc, self.fleet, "markers", timeout=30,
                        extra={"patterns": patterns})
        for name, f in facts.items():
            row = rows[name]
            counts = (f.data.get("markers") or {}) if f.reachable else {}
            for m in markers:
                if m.ranks == "head" and row.rank != 0:
                    continue
                n = int(counts.get(m.pattern, 0))
                good = n == m.count if m.count is not None else n >= 1
                if not good and m.required:
                    want = f"exactly {m.count}" if m.count is not None else "at least one"
                    raise self.fail("log markers", name, f"{m.pattern!r}: {n} lines, want {want}", "markers")
            row.phases["markers"] = OK
        self._emit()

    def chat(self, url: str, headers: Mapping[str, str], timeout: float) -> tuple[bool, str]:
        body = {
            "model": served_model(self.cluster, self.head),
            "messages": [{"role": "user", "content": "What is 19 + 23? Answer with the number only."}],
            "max_tokens": 16,
            "temperature": 0,
        }
        try:
            resp = self.http.post(f"{url}/v1/chat/completions", json=body, headers=dict(headers),
                                  timeout=timeout)
        except httpx.HTTPError as exc:
            return False, _http_reason(exc)
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


class _Retry(Exception):
    pass


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret value (and nothing else) in ``text``."""
    for s in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(s, "<redacted>")
    return re.sub(r"(?i)(authorization:\s*bearer\s+)\S+", r"\1<redacted>", text)
