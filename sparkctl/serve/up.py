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

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.ansible.plan import Plan, for_up
from sparkctl.ansible.runner import RunResult
from sparkctl.errors import EXIT_FAILED, InputError, SparkctlError
from sparkctl.serve import bootwatch, fastup, preflight, probe, verdict
from sparkctl.serve.down import stop_after_failure, stop_ranks
from sparkctl.serve.guard import MemoryGuard, abort_ranks
from sparkctl.serve.probe import FleetLike
from sparkctl.serve.supervisor import RUNNING
from sparkctl.serve.tools import FAIL, OK, Output, Tools, api_key

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
    ``verbose``: every preflight check, every playbook task."""

    def __init__(self, cluster: Cluster, doc: dict[str, Any], tools: Tools, out: Output, *,
                 force: bool = False, restart: bool = False, yes: bool = False, full: bool = False,
                 verbose: bool = False):
        self.cluster, self.doc, self.tools, self.out = cluster, doc, tools, out
        self.force, self.restart, self.yes, self.full, self.verbose = force, restart, yes, full, verbose
        self.api_key = api_key(cluster)  # a missing secret is bad input: exit 2 before anything is touched
        self._run_dir: Path | None = None

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
            before = verdict.snapshot(cluster, doc, fleet, http, self.api_key)
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
                stop = stop_ranks(cluster, doc, fleet, self.tools, out, run_dir=self.run_dir())
                if not stop.ok:
                    raise SparkctlError("could not stop the running ranks",
                                        hint=f"artifacts: {stop.artifact_dir}", details=stop.failures[:12])

            checks, _facts = preflight.preflight(cluster, doc, fleet, self.force)
            failed = [c for c in checks if not c.ok]
            if failed or self.verbose:
                out.preflight(checks if self.verbose else failed)
            if failed:
                raise SparkctlError(
                    f"preflight refused the start: {len(failed)} problem(s); nothing was started",
                    hint="fix the items above (or pass --force for a GPU in use) and run `sparkctl up` again",
                    details=[f"{c.node}: {c.name}: {c.detail}" for c in failed],
                )
            out.say(f"preflight: {len(checks)} checks passed on {len(cluster.nodes)} nodes", OK)
            fast = self.fast_check(fleet)
            return self._start(fleet, http, fast, started)
        finally:
            fleet.close()
            http.close()

    def _start(self, fleet: FleetLike, http: httpx.Client, fast: fastup.FastCheck,
               started: float) -> UpResult:
        cluster, doc = self.cluster, self.doc
        timeline: dict[str, float] = {}
        # From here on a unit may have started: every way out but success stops all ranks again
        # (a failure, a gate, Ctrl-C, an error while recording) and says what it really stopped.
        # The memory guard samples every node every ~2 s for the whole start, whatever the gates
        # are waiting on; below the floor it kills every rank at once (its own SSH connections).
        guard_fleet = self.tools.fleet(cluster)
        guard: MemoryGuard = self.tools.memory_guard(cluster, doc, guard_fleet,
                                                     on_breach=lambda b: abort_ranks(doc, guard_fleet))
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
        stopped = stop_after_failure(self.cluster, self.doc, self.tools, self.out, self._run_dir)
        if isinstance(exc, bootwatch.GateFailure):
            details = [f"node: {exc.node or 'cluster'}", f"records: {exc.record_dir or '-'}"]
            for label, text in (("log tail:", exc.log_tail),
                                (f"log tail of rank 0 ({exc.head}):", exc.head_tail)):
                lines = bootwatch.shown_tail(text)
                details += [label] + [f"    {ln}" for ln in lines] if lines else []
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

    def fast_check(self, fleet: FleetLike) -> fastup.FastCheck:
        """Whether the installed units can start without the playbook; says which path runs and why."""
        cluster = self.cluster
        fast = (fastup.FastCheck(["--full"]) if self.full
                else fastup.check(cluster, self.doc, fleet, self.tools.kit_reference(cluster)))
        if fast.ok:
            self.out.say(f"nothing to install on {len(cluster.nodes)} nodes (unit, environment, secrets and "
                         f"kit files, kit, image checked in {fast.seconds:.1f} s): starting over SSH without "
                         "the playbook", OK)
            return fast
        for line in fast.playbook_lines("playbooks/up.yml"):
            self.out.say(line)
        return fast

    def start_and_watch(self, fleet: FleetLike, http: httpx.Client, fast: fastup.FastCheck | None = None,
                        timeline: dict[str, float] | None = None,
                        started: float | None = None) -> bootwatch.BootState:
        """Start the units (ranks 1..n, then 0): over SSH when ``fast`` says nothing needs installing,
        else install and start them with the playbook; then watch the gates; raise on any failure.
        ``timeline`` gets seconds since ``started``: the last start returned, rank 0 /ready, done."""
        cluster, doc = self.cluster, self.doc
        marks = timeline if timeline is not None else {}
        origin = started if started is not None else time.monotonic()
        run_dir = self.run_dir()
        try:
            if fast is not None and fast.ok:
                fastup.start(cluster, doc, fleet)
            else:
                self.run_playbook(for_up(cluster), "installing and starting the rank units", run_dir)
            marks["last_start_s"] = round(time.monotonic() - origin, 3)
        except SparkctlError as exc:
            failed_hosts = sorted({d.split(":", 1)[0] for d in exc.details} & set(fleet.targets))
            for host in failed_hosts[:2]:
                cmd = f"journalctl -u {probe.unit_name(doc)} -n 15 --no-pager -o short-iso 2>&1\n"
                res = fleet.run({host: cmd}, timeout=15, only=[host])[host]
                if res.reachable:
                    shown = bootwatch.shown_tail(res.stdout)
                    exc.details += [f"log tail of {host}:"] + [f"    {ln}" for ln in shown]
            raise
        qualify = self.tools.qualify(cluster, run_dir)
        watch = bootwatch.BootWatch(cluster, doc, fleet, http, self.api_key, record_dir=run_dir,
                                    qualify=qualify, ready_file=verdict.ready_file(cluster.name))
        head = cluster.head.name

        def mark(s: bootwatch.BootState) -> None:
            if "ready_s" not in marks and s.rows[head].phases["ready"] == bootwatch.OK:
                marks["ready_s"] = round(time.monotonic() - origin, 3)

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
            raise SparkctlError(
                f"{what} failed ({plan.playbook}, rc {result.rc})",
                hint=f"artifacts: {result.artifact_dir}",
                details=[str(f) for f in result.failures][:12],
            )
        return result


def _breach_failure(breach: Any, seen: bootwatch.GateFailure | None) -> bootwatch.GateFailure:
    """The memory guard's breach as the failed gate, with the log tail and records of the gate that
    failed after it (``seen``), if any."""
    tail = seen.log_tail if seen else ""
    failure = bootwatch.GateFailure("memory guard", breach.node, breach.describe(), tail,
                                    seen.head if seen else None, seen.head_tail if seen else "")
    failure.record_dir = seen.record_dir if seen else None
    return failure
