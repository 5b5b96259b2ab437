"""`up`: start the ranks in order and wait until they serve.

validate (the caller loads the model) → ready and current already? nothing to do → running ranks are
replaced only after a yes (``ask``) or with ``yes`` → preflight on every node (all reported together)
→ playbooks/up.yml (install the rank units, start ranks 1..n then rank 0), or with nothing to install
the same start over SSH (``serve.fastup``; ``full`` forces the playbook) → readiness gates shown live
(``serve.bootwatch``), memory guarded (``serve.guard``). Any failure stops every rank (as `down`
does) and names the gate, the node and its log.

One run directory per `up`: the playbooks it runs and the boot records share it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.ansible import failures
from sparkctl.ansible.plan import Plan, for_up
from sparkctl.ansible.runner import RunResult
from sparkctl.errors import EXIT_FAILED, InputError, SparkctlError
from sparkctl.serve import bootwatch, fastup, preflight, probe, verdict
from sparkctl.serve import groups as serve_groups
from sparkctl.serve.down import Down, stop_after_failure, stop_ranks
from sparkctl.serve.guard import MemoryGuard, abort_ranks
from sparkctl.serve.probe import FleetLike
from sparkctl.serve.supervisor import RUNNING
from sparkctl.serve.tools import FAIL, OK, Output, Tools, api_key
from sparkctl.ssh.fleet import HostResult, joined_script, split_results

if TYPE_CHECKING:
    import httpx

    from sparkctl.model import Cluster


@dataclass
class UpResult:
    """What `up` did: nothing (``changed`` False: already ready), or a start that passed every gate."""

    changed: bool
    seconds: float = 0.0
    before: verdict.Snapshot | None = None
    state: bootwatch.BootState | None = None
    fast: fastup.FastCheck | None = None
    timeline: dict[str, float] = field(default_factory=dict)
    min_mem_available: dict[str, int | None] = field(default_factory=dict)
    memory_guard: dict[str, Any] = field(default_factory=dict)
    run_dir: Path | None = None

    @property
    def lowest(self) -> int | None:
        return min((v for v in self.min_mem_available.values() if v is not None), default=None)

    def as_dict(self, cluster_name: str) -> dict[str, Any]:
        if not self.changed:
            assert self.before is not None
            return {"cluster": cluster_name, "result": "ready", "changed": False, **self.before.as_dict()}
        assert self.state is not None and self.fast is not None
        return {"cluster": cluster_name, "result": "ready", "changed": True,
                "seconds": round(self.seconds, 2), "boot_seconds": round(self.state.elapsed, 2),
                "start": self.fast.as_dict(), "timeline": self.timeline,
                "min_mem_available": self.min_mem_available, "memory_guard": self.memory_guard,
                "records": str(self.run_dir)}


class Up:
    """One `up` of ``cluster`` (``doc``: its plan document) with ``tools`` and ``out``.

    ``force``: start even if another GPU workload runs; ``restart``: restart ranks that are ready;
    ``yes``: replace running ranks without asking; ``full``: always run the up playbook;
    ``verbose``: every preflight check, every playbook task; ``limit``: the serving group's nodes
    when ``cluster`` is one group of several (``serve.groups.Target``), the playbooks' --limit."""

    def __init__(self, cluster: Cluster, doc: dict[str, Any], tools: Tools, out: Output, *,
                 force: bool = False, restart: bool = False, yes: bool = False, full: bool = False,
                 verbose: bool = False, limit: str | None = None):
        self.cluster, self.doc, self.tools, self.out = cluster, doc, tools, out
        self.limit = limit
        self.force, self.restart, self.yes, self.full, self.verbose = force, restart, yes, full, verbose
        self.api_key = api_key(cluster)  # a missing secret is bad input: exit 2 before anything is touched
        self._run_dir: Path | None = None
        self._marks: dict[str, float] = {}  # the timeline's marks before the first unit starts

    def run_dir(self) -> Path:
        """This `up`'s run directory, made when first needed (an `up` with nothing to do makes none)."""
        if self._run_dir is None:
            self._run_dir = self.tools.new_run_dir("up")
        return self._run_dir

    def run(self) -> UpResult:
        cluster, doc, out = self.cluster, self.doc, self.out
        started = time.monotonic()
        fleet = self.tools.fleet(cluster)
        http = self.tools.http()
        try:
            first: dict[str, Any] = {}
            before = verdict.snapshot(cluster, doc, fleet, http, self.api_key,
                                      nodes_round=lambda: self.first_round(fleet, first))
            self._marks["snapshot_s"] = round(time.monotonic() - started, 3)
            current = all(before.nodes[e["name"]].data.get("file_digest") == probe.expected_hashes(cluster, e)
                          for e in doc["nodes"])
            if before.verdict == verdict.READY and current and not self.restart:
                out.say("already up and ready; nothing to do (use --restart to restart the ranks)", OK)
                return UpResult(False, before=before)
            if any(f.reachable and f.active != "inactive" for f in before.nodes.values()):
                why = "restarting" if before.verdict == verdict.READY else f"cluster is {before.verdict}"
                if not self.yes:
                    self.confirm_replace(before, why)
                out.say(f"stopping the running ranks first ({why})")
                # a rank restarted or OOM-killed since it was made ready is out of the group: no wait
                stop = stop_ranks(cluster, doc, fleet, self.tools, out, run_dir=self.run_dir(),
                                  limit=self.limit, outsiders={n for n, f in before.faults.items() if f})
                if not stop.ok:
                    raise stop.error("could not stop the running ranks")
                checks, fast = self.preflight_and_check(fleet)  # again, with the ranks stopped
            else:
                checks, fast = self.judged(**first)
            failed = [c for c in checks if not c.ok]
            if self.verbose:
                out.preflight(checks)
            if failed:
                # Each failed check once, in the error (rank order); a node that did not answer as
                # every verb names it: node (address:port), the cause and what to check.
                _order, addresses = failures.cluster_order(cluster)
                dark = [c.node for c in failed if c.name == "reachable"]

                def line(c: preflight.Check) -> str:
                    if c.name == "reachable" and c.node in addresses:
                        address, port = addresses[c.node]
                        return f"{c.node} ({address}:{port}): {c.detail}"
                    return f"{c.node}: {c.name}: {c.detail}"

                raise SparkctlError(
                    f"preflight refused the start: {len(failed)} problem(s); nothing was started",
                    hint="fix each item (or pass --force for a GPU in use) and run `sparkctl up` again",
                    details=[line(c) for c in failed], nodes=dark,
                )
            out.say(f"preflight: {len(checks)} checks passed on {len(cluster.nodes)} nodes", OK)
            self._marks["preflight_s"] = self._marks["check_s"] = round(time.monotonic() - started, 3)
            self.say_path(fast)
            return self._start(fleet, http, fast, started)
        finally:
            fleet.close()
            http.close()

    def _start(self, fleet: FleetLike, http: httpx.Client, fast: fastup.FastCheck,
               started: float) -> UpResult:
        cluster, doc = self.cluster, self.doc
        timeline: dict[str, float] = dict(self._marks)
        # From here on a unit may have started: every way out but success stops all ranks again
        # (a failure, a gate, Ctrl-C, an error while recording) and says what it really stopped.
        # The memory guard samples every node every ~2 s for the whole start, whatever the gates
        # are waiting on; below the floor it kills every rank at once (its own SSH connections).
        # Its first sample comes one interval in: the preflight has just read every node's
        # MemAvailable and the ranks load their weights only once their units have started, while a
        # sample at once (its new SSH connections, a probe on every node) took the CPU from the unit
        # starts themselves (~0.35 s of `up`'s own time on the lab).
        # The guard's connections are closed on every way out (a supervisor runs many `up`s).
        with contextlib.closing(self.tools.fleet(cluster)) as guard_fleet:
            guard: MemoryGuard = self.tools.memory_guard(
                cluster, doc, guard_fleet, on_breach=lambda b: abort_ranks(doc, guard_fleet),
                first_after=MemoryGuard.interval)
            guard.start()
            try:
                state = self.start_and_watch(fleet, http, fast, timeline, started)
                guard.record_dir = self._run_dir
                if guard.breach is not None:
                    raise _breach_failure(guard.breach, None)
            except BaseException as exc:
                guard.stop()
                failure = self._failed(exc, guard)
                if failure is exc:
                    raise
                raise failure from failure.__cause__
            guard.stop()
        mins = {n: min((v for v in (r.mem_min, guard.lowest.get(n)) if v is not None), default=None)
                for n, r in state.rows.items()}
        return UpResult(True, time.monotonic() - started, state=state, fast=fast, timeline=timeline,
                        min_mem_available=mins, memory_guard=guard.summary(), run_dir=self._run_dir)

    def _failed(self, exc: BaseException, guard: MemoryGuard) -> BaseException:
        """Stop every rank after ``exc``; the error to raise, saying what was stopped."""
        # A breach kills every rank: whatever failed after it (a gate seeing a rank unit exit,
        # an error) is its consequence, and the breach is what the admin must be told.
        if guard.breach is not None and not isinstance(exc, KeyboardInterrupt) and not (
            isinstance(exc, bootwatch.GateFailure) and exc.gate == "memory guard"
        ):
            exc = _breach_failure(guard.breach, exc if isinstance(exc, bootwatch.GateFailure) else None)
        reason = (f"gate {exc.gate!r} failed" if isinstance(exc, bootwatch.GateFailure)
                  else "interrupted" if isinstance(exc, KeyboardInterrupt)
                  else "the start failed")
        self.out.say(f"{reason} — stopping every rank", FAIL)
        stopped = stop_after_failure(self.cluster, self.doc, self.tools, self.out, self._run_dir, self.limit)
        if isinstance(exc, bootwatch.GateFailure):
            details = [f"node: {exc.node or 'cluster'}", f"records: {exc.record_dir or '-'}"]
            details += bootwatch.tail_details("log tail:", exc.log_tail)
            details += bootwatch.tail_details(f"log tail of rank 0 ({exc.head}):", exc.head_tail)
            return SparkctlError(
                f"`up` failed at the gate {exc.gate!r} on {exc.node or 'the cluster'}: {exc.detail}",
                hint=f"{stopped}; see the log tail, fix, and run `sparkctl up` again",
                details=details,
            )
        if isinstance(exc, SparkctlError):
            exc.hint = f"{stopped}; {exc.hint}" if exc.hint else stopped
            return exc
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            self.out.say(stopped)
            return exc
        failure = SparkctlError(f"`up` failed: {type(exc).__name__}: {exc}", hint=stopped,
                                exit_code=EXIT_FAILED)
        failure.__cause__ = exc
        return failure

    def confirm_replace(self, before: verdict.Snapshot, why: str) -> None:
        """Ask before running ranks are stopped; without a terminal, refuse (exit 2) unless ``yes``."""
        running = sorted((f for f in before.nodes.values() if f.reachable and f.active in RUNNING),
                         key=lambda f: f.rank)
        if not running:
            return  # only failed or stopped units: nothing that serves is replaced
        which = ", ".join(f"rank {f.rank} on {f.name} ({f.active})" for f in running)
        if not self.tools.interactive():
            raise InputError(
                f"`up` would stop {len(running)} running rank(s) and start them again ({why}): {which}",
                hint="pass --yes to replace them without asking (there is no terminal to ask)",
            )
        self.out.note(f"running: {which}")
        if not self.tools.ask(f"Stop the running ranks and start them again ({why})?"):
            raise SparkctlError("the running ranks were left as they were; nothing was changed",
                                exit_code=EXIT_FAILED)

    def first_round(self, fleet: FleetLike, keep: dict[str, Any]) -> dict[str, probe.NodeFacts]:
        """The status snapshot's read of the nodes: :meth:`read` (preflight and check) whose preflight
        answer holds every status fact (``probe.as_status``), the whole kept in ``keep`` for
        :meth:`judged`. A node whose rank unit runs keeps its page cache: `up` stops its rank and
        reads again (:meth:`preflight_and_check`)."""
        keep.update(self.read(fleet, keep_caches_if_running=True))
        return probe.as_status(probe.parse_facts(self.doc, keep["pre"]))

    def preflight_and_check(self, fleet: FleetLike) -> tuple[list[preflight.Check], fastup.FastCheck]:
        """Preflight on every node and, unless ``full``, the fast path's check (:meth:`read`), judged."""
        return self.judged(**self.read(fleet))

    def read(self, fleet: FleetLike, keep_caches_if_running: bool = False) -> dict[str, Any]:
        """The preflight probe and, unless ``full``, the fast path's check of what is installed, in
        one SSH round per node (``ssh.fleet.joined_script``), the check right after the probe: their
        results (``pre``, ``chk``: None with ``full``), the kit reference and the round's seconds."""
        cluster, doc = self.cluster, self.doc
        t0 = time.monotonic()
        kit = None if self.full else self.tools.kit_reference(cluster)
        extra = {"keep_caches_if_running": True} if keep_caches_if_running else None
        parts = [probe.probe_scripts(cluster, doc, "preflight", extra=extra)]
        if not self.full:
            parts.append(fastup.check_scripts(cluster, doc, kit))
        timeout = preflight.TIMEOUT_S + (0 if self.full else fastup.CHECK_TIMEOUT_S)
        results = fleet.run({n: joined_script(*(p[n] for p in parts)) for n in parts[0]},
                            timeout=timeout, only=list(parts[0]))
        pre, *chk = split_results(results, len(parts))
        return {"pre": pre, "chk": chk[0] if chk else None, "kit": kit, "seconds": time.monotonic() - t0}

    def judged(self, pre: dict[str, HostResult], chk: dict[str, HostResult] | None,
               kit: fastup.KitReference | str | None, seconds: float,
               ) -> tuple[list[preflight.Check], fastup.FastCheck]:
        """The preflight's checks and the fast path's verdict (``--full`` without a check) from their
        rounds' results."""
        cluster, doc = self.cluster, self.doc
        checks = preflight.preflight_checks(cluster, probe.parse_facts(doc, pre), self.force)
        fast = (fastup.FastCheck(["--full"]) if chk is None
                else fastup.verdict(cluster, doc, chk, kit, seconds))
        return checks, fast

    def say_path(self, fast: fastup.FastCheck) -> None:
        """Which path starts the units, and why."""
        if fast.ok:
            self.out.say(f"nothing to install on {len(self.cluster.nodes)} nodes (unit, environment, secrets "
                         f"and kit files, kit, image checked in {fast.seconds:.1f} s, with the preflight): "
                         "starting over SSH without the playbook", OK)
            return
        for line in fast.playbook_lines("playbooks/up.yml"):
            self.out.say(line)

    def start_and_watch(self, fleet: FleetLike, http: httpx.Client, fast: fastup.FastCheck | None = None,
                        timeline: dict[str, float] | None = None,
                        started: float | None = None) -> bootwatch.BootState:
        """Start the units (ranks 1..n, then 0): over SSH when ``fast`` says nothing needs installing,
        else install and start them with the playbook; then watch the gates; raise on any failure.
        ``timeline`` gets seconds since ``started``: the last start returned, rank 0 /ready, each gate
        after it passed, done (and, from :meth:`run`, the status snapshot, preflight and the fast
        path's check done)."""
        cluster, doc = self.cluster, self.doc
        marks = timeline if timeline is not None else {}
        origin = started if started is not None else time.monotonic()
        run_dir = self.run_dir()
        try:
            if fast is not None and fast.ok:
                fastup.start(cluster, doc, fleet)
            else:
                the_plan = for_up(cluster)
                if self.limit is not None:  # one group of several: its nodes only
                    the_plan = dataclasses.replace(the_plan, limit=self.limit)
                self.run_playbook(the_plan, "installing and starting the rank units", run_dir)
            marks["last_start_s"] = round(time.monotonic() - origin, 3)
        except SparkctlError as exc:
            named = exc.nodes or [d.split(":", 1)[0] for d in exc.details]
            failed_hosts = [h for h in dict.fromkeys(named) if h in fleet.targets]
            if failed_hosts:
                # A unit that failed while starting because its container stopped in the kit's
                # pre-start checks: that gate, with its checks, is the reason (under load the
                # playbook's wait sees the failed unit before the boot watch would).
                gate = bootwatch.prestart_gate_failure(fleet, probe.unit_name(doc), failed_hosts[:2])
                if gate is not None:
                    gate.record_dir = run_dir
                    raise gate from exc
            for host in failed_hosts[:2]:
                text, _ = bootwatch.read_journal(fleet, probe.unit_name(doc), host, 15)
                if text is not None:
                    exc.details += bootwatch.tail_details(f"log tail of {host}:", text)
            raise
        qualify = self.tools.qualify(cluster, run_dir)
        watch = bootwatch.BootWatch(cluster, doc, fleet, http, self.api_key, record_dir=run_dir,
                                    qualify=qualify, ready_file=verdict.ready_file(cluster.name))
        head = cluster.head.name

        def mark(s: bootwatch.BootState) -> None:
            if "ready_s" not in marks and s.rows[head].phases["ready"] == bootwatch.OK:
                marks["ready_s"] = round(time.monotonic() - origin, 3)
            for phase in ("server_info", "markers", "chat", "qualify"):  # the gates after /ready
                if f"{phase}_s" not in marks and s.rows[head].phases.get(phase) == bootwatch.OK:
                    marks[f"{phase}_s"] = round(time.monotonic() - origin, 3)

        try:
            with self.out.watching(watch.state) as show:

                def update(s: bootwatch.BootState) -> None:
                    mark(s)
                    show(s)

                watch.on_update = update
                state = watch.run()
            marks["done_s"] = round(time.monotonic() - origin, 3)
            return state
        except bootwatch.GateFailure as exc:
            exc.record_dir = run_dir
            raise

    def run_playbook(self, plan: Plan, what: str, run_dir: Path | None) -> RunResult:
        result = self.tools.execute(plan, self.out.playbook_event, run_dir)
        if not result.ok:
            hint = None if result.unreachable_hosts else f"artifacts: {result.artifact_dir}"
            raise failures.error_for(result, self.cluster, f"{what} failed ({plan.playbook}, rc {result.rc})",
                                     hint)
        return result


def up_groups(cluster: Cluster, tools: Tools, out: Output, names: Iterable[str] | None = None, *,
              force: bool = False, restart: bool = False, yes: bool = False, full: bool = False,
              verbose: bool = False, gates: dict[str, Any] | None = None,
              ) -> Iterator[tuple[serve_groups.Target, bool, UpResult]]:
    """`up` of each serving group ``names`` picks (default all; a site of one group is one target, the
    site itself), one after the other in the site's order, each ready before the next starts: (its
    target, whether the site reports per group, its result) as each is ready. On a site of several
    groups each group is announced before it starts. After the last group, an `up` that covered
    every group of a site with a router waits until the router lists every group's rank 0
    (``serve.routergate``; its record goes into ``gates`` under ``router``)."""
    from sparkctl.render import plan_document
    from sparkctl.serve import routergate

    site_doc = plan_document(cluster)
    found = serve_groups.targets(cluster, site_doc, names)
    per_group = serve_groups.several(found)
    for t in found:
        if per_group:
            out.say(f"[bold]group {t.group}[/bold] ({t.limit})")
        up = Up(t.cluster, t.doc, tools, out, force=force, restart=restart, yes=yes, full=full,
                verbose=verbose, limit=t.limit)
        yield t, per_group, up.run()
    if per_group and routergate.applies(cluster, site_doc, [t.group for t in found]):
        out.say(f"waiting for the router on {site_doc['router']['node']} to list every group's rank 0")
        record = routergate.RouterGate(cluster, site_doc, tools, bound_s=routergate.GATE_S,
                                       poll_s=routergate.POLL_S).wait()
        if gates is not None:
            gates["router"] = record
        out.say(f"the router on {record['node']} routes to every group ({', '.join(record['workers'])}) "
                f"after {record['seconds']:.1f} s", OK)


def down_then_up(cluster: Cluster, tools: Tools, out: Output) -> dict[str, Any]:
    """The group stopped as `down` stops it, then started as `up --yes` starts it, serving ``cluster``
    (bench --ab's switch between its arms): how it was stopped, whether `up` started anything, the
    seconds both took."""
    from sparkctl.render import plan_document

    start = time.perf_counter()
    down = Down(cluster, plan_document(cluster), tools, out).run()
    up = Up(cluster, plan_document(cluster), tools, out, yes=True).run()
    return {"down": down.path, "up_changed": up.changed, "seconds": round(time.perf_counter() - start, 1)}


def _breach_failure(breach: Any, seen: bootwatch.GateFailure | None) -> bootwatch.GateFailure:
    """The memory guard's breach as the failed gate, with the log tail and records of the gate that
    failed after it (``seen``), if any."""
    tail = seen.log_tail if seen else ""
    failure = bootwatch.GateFailure("memory guard", breach.node, breach.describe(), tail,
                                    seen.head if seen else None, seen.head_tail if seen else "")
    failure.record_dir = seen.record_dir if seen else None
    return failure
