"""Serving: `sparkctl up`, `down`, `status`, `logs`, `bundle`.

up:     validate → preflight on every node (all reported together) → playbooks/up.yml (install the
        rank units, start ranks 1..n then rank 0), or with nothing to install the same start over
        SSH (serve/fastup.py; --full forces the playbook) → readiness gates shown live, memory guarded.
        Any failure stops every rank (as `down` does) and names the gate, the node and its log.
        Running ranks are replaced only after a yes at the terminal, or with --yes.
down:   rank 0 first, grace period, forced shutdown, SIGKILL backstop: over SSH when every node
        answers (serve/faststop.py), else playbooks/down.yml (--full forces it).
status: one SSH probe per node in parallel plus rank 0's HTTP endpoints → ready/degraded/down.
logs:   the rank units' journals over SSH. bundle: a support tarball, every secret redacted.

One module over 400 lines on purpose: the five verbs share the seams the CLI tests replace
(``_execute``, ``_fleet``, ``_http``, ``_new_run_dir``), so a fake site is wired in one place.
"""

from __future__ import annotations

import functools
import io
import json
import platform
import shlex
import sys
import tarfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from sparkctl import __version__, ui
from sparkctl.ansible import content, runner
from sparkctl.ansible.plan import Plan, for_down, for_up
from sparkctl.ansible.runner import RunnerEvent, RunResult
from sparkctl.cli.cluster import cluster_summary
from sparkctl.cli.shell import OBSERVE, SERVE, complete_rank, example
from sparkctl.errors import EXIT_FAILED, EXIT_UNHEALTHY, InputError, SparkctlError, UnhealthyError
from sparkctl.model import load_inventory
from sparkctl.qa.qualify import run_qualify
from sparkctl.render import plan_document
from sparkctl.render.kit import kit_facts
from sparkctl.serve import bootwatch, faststop, fastup, preflight, probe, redact, verdict
from sparkctl.serve.events import (
    Event,
    EventLog,
    breaker_reason,
    close_breaker,
    lifecycle,
    pause,
    resume,
    supervisor_notes,
)
from sparkctl.serve.guard import R4_MIN_MEM_AVAILABLE_GIB, MemoryGuard, abort_ranks
from sparkctl.serve.thermals import CRIT
from sparkctl.serve.thermals import gpu_text as gpu_cell
from sparkctl.ssh import fleet as remote
from sparkctl.stage import kit as stage_kit

# --- seams the CLI tests replace ------------------------------------------------------------------


def _execute(plan: Plan, on_event: Any = None) -> RunResult:
    return runner.execute(plan, on_event)


def _fleet(cluster: Any) -> Any:
    return remote.Fleet(remote.targets_for(cluster))


def _http() -> httpx.Client:
    return httpx.Client(timeout=5.0)


def _new_run_dir(verb: str) -> Path:
    return runner.new_run_dir(verb)


def _interactive() -> bool:
    """Whether a person can be asked (stdin and stderr are a terminal)."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def _ask(question: str) -> bool:
    return typer.confirm(question, default=False, err=True)


# --- shared helpers -------------------------------------------------------------------------------


def _load(ctx: typer.Context) -> tuple[Any, dict[str, Any]]:
    cluster = load_inventory(ctx.obj.inventory_dir())
    return cluster, plan_document(cluster)


def _api_key(cluster: Any) -> str | None:
    ref = cluster.secrets.get("api_key")
    return ref.resolve() if ref is not None else None


def _secrets(cluster: Any) -> list[str]:
    """Every secret value that resolves now (for redaction); unresolvable ones are skipped."""
    values = []
    for ref in cluster.secrets.values():
        try:
            values.append(ref.resolve())
        except SparkctlError:
            continue
    return values


def _gib(value: int | None) -> str:
    return f"{value / verdict.GIB:.1f}" if value is not None else "–"


def _event_printer(verbose: bool) -> Any:
    """A quiet playbook display: failures always, every task with --verbose."""

    def on_event(ev: RunnerEvent) -> None:
        if ev.kind in ("failed", "unreachable") and not ev.ignored:
            ui.err_console.print(f"  {ui.FAIL} {ev.host}: {ev.task}: {ev.msg}")
        elif verbose and ev.kind in ("ok", "changed"):
            mark = "[yellow]changed[/yellow]" if ev.kind == "changed" else "ok"
            ui.err_console.print(f"  {ui.OK} {ev.host}: {ev.task} ({mark})")

    return on_event


def _run_playbook(plan: Plan, what: str, verbose: bool) -> RunResult:
    result = _execute(plan, _event_printer(verbose))
    if not result.ok:
        raise SparkctlError(
            f"{what} failed ({plan.playbook}, rc {result.rc})",
            hint=f"artifacts: {result.artifact_dir}",
            details=[str(f) for f in result.failures][:12],
        )
    return result


def _stop_all(cluster: Any, verbose: bool, grace_s: int | None = None) -> RunResult:
    return _execute(for_down(cluster, grace_s), _event_printer(verbose))


@dataclass
class Stopped:
    """How every rank was stopped: over SSH, or by playbooks/down.yml where that could not be done."""

    path: str                      # "ssh" | "playbook"
    ok: bool
    stopped: bool                  # a rank unit was not inactive before
    failed_hosts: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    artifact_dir: Path | None = None


def _stop_ranks(cluster: Any, doc: dict[str, Any], fleet: Any, verbose: bool, grace_s: int | None = None,
                over_ssh: bool = True) -> Stopped:
    """Stop every rank: the spark_rank role's stop steps over SSH in one round (serve/faststop.py);
    when a node does not answer or its stop fails (or ``over_ssh`` is False), playbooks/down.yml,
    which reports every node."""
    if over_ssh:
        try:
            done = faststop.stop(doc, fleet, grace_s)
            return Stopped("ssh", True, any(what != "inactive" for what in done.values()))
        except SparkctlError as exc:
            why = escape(f"{exc} ({'; '.join(exc.details)})")
            ui.err_console.print(f"{ui.SKIP} {why}: running playbooks/down.yml")
    result = _stop_all(cluster, verbose, grace_s)
    return Stopped("playbook", result.ok, result.changed_total > 0, list(result.failed_hosts),
                   [str(f) for f in result.failures], result.artifact_dir)


# --- status ---------------------------------------------------------------------------------------

VERDICT_STYLE = {verdict.READY: "green", verdict.DEGRADED: "yellow", verdict.DOWN: "red"}


def status_table(snap: verdict.Snapshot) -> Table:
    table = Table(title=None, expand=False)
    for col in ("rank", "node", "unit", "MemAvail GiB", "GPU", "fabric", "shards"):
        table.add_column(col)
    for f in sorted(snap.nodes.values(), key=lambda f: f.rank):
        if not f.reachable:
            table.add_row(str(f.rank), f.name, f"[red]unreachable[/red] {f.error}", "", "", "", "")
            continue
        state = f.active
        color = "green" if state == "active" else "red" if state in ("failed",) else "yellow"
        unit = f"[{color}]{state}[/{color}]"
        up_s = f.unit.get("up_s")
        if state == "active" and up_s is not None:
            unit += f" {int(up_s)}s"
        gpu_text = gpu_cell(f)
        links = []
        for dev, link in (f.data.get("links") or {}).items():
            if not link.get("present"):
                links.append(f"[red]{dev} missing[/red]")
            else:
                c = "green" if link.get("state") in ("up", "unknown") else "red"
                links.append(f"[{c}]{link.get('state')}[/{c}] {link.get('mtu')}")
        shards = f.data.get("shards")
        shard_text = "–" if shards is None else ("[green]verified[/green]" if shards.get("verified")
                                                 else "[red]not verified[/red]")
        table.add_row(str(f.rank), f.name, unit, _gib(f.mem_available), gpu_text, " ".join(links), shard_text)
    return table


def render_status(snap: verdict.Snapshot) -> Any:
    style = VERDICT_STYLE[snap.verdict]
    lines: list[Any] = [status_table(snap)]
    head = snap.head
    if head is not None:
        parts = [f"{p} {a.code if a.code is not None else a.error}"
                 for p, a in (("/health", head.health), ("/ready", head.ready), ("/v1/models", head.models))]
        lines.append(Text(f"rank 0 {head.url}: " + ", ".join(parts)))
    verdict = Text.from_markup(f"[bold {style}]{snap.verdict}[/bold {style}]  ({snap.seconds:.2f} s)")
    lines.append(verdict)
    for reason in snap.reasons:
        lines.append(Text(f"  • {reason}"))
    for w in snap.warnings:
        color = "red" if w.level == CRIT else "yellow"
        lines.append(Text.from_markup(f"  [{color}]![/{color}] ") + Text(w.describe()))
    return Group(*lines)


class StatusFormat(StrEnum):
    table = "table"
    json = "json"
    prometheus = "prometheus"


def status(
    ctx: typer.Context,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Redraw every 2 s until Ctrl-C.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")] = False,
    fmt: Annotated[
        StatusFormat | None,
        typer.Option("--format", help="table, json (as --json) or prometheus (text exposition for "
                                      "node_exporter's textfile collector)."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="With --format prometheus: write this file atomically "
                                            "(e.g. <textfile dir>/sparkctl.prom) instead of stdout."),
    ] = None,
) -> None:
    """Where every rank stands: reachable, unit, memory, GPU, fabric, shards; rank 0's API; hot or throttled GPUs. Exit 0 when ready, 3 otherwise."""  # noqa: E501
    if output is not None and fmt != StatusFormat.prometheus:
        raise InputError("--output: only with --format prometheus")
    prometheus = fmt == StatusFormat.prometheus
    if prometheus and (watch or as_json):
        raise InputError("--format prometheus: not with --watch or --json (one snapshot, text exposition)")
    cluster, doc = _load(ctx)
    as_json = (as_json or ctx.obj.json or fmt == StatusFormat.json) and not prometheus
    try:
        api_key = _api_key(cluster)
    except SparkctlError:
        api_key = None  # status still shows everything else; /v1/models will say 401
    fleet = _fleet(cluster)
    http = _http()
    try:
        snap = verdict.snapshot(cluster, doc, fleet, http, api_key)
        _note_supervisor(cluster, snap)
        if watch and not as_json:
            with Live(render_status(snap), console=ui.console, refresh_per_second=4, transient=False) as live:
                try:
                    while True:
                        time.sleep(max(0.0, bootwatch.SAMPLE_INTERVAL_S - snap.seconds))
                        snap = verdict.snapshot(cluster, doc, fleet, http, api_key)
                        live.update(render_status(snap))
                except KeyboardInterrupt:
                    pass
        elif prometheus:
            _write_prometheus(cluster, snap, output)
        elif as_json:
            ui.print_json({"cluster": cluster.name, **snap.as_dict()})
        else:
            ui.console.print(render_status(snap))
    finally:
        fleet.close()
        http.close()
    if snap.verdict != verdict.READY:
        raise typer.Exit(EXIT_UNHEALTHY)


def _write_prometheus(cluster: Any, snap: verdict.Snapshot, output: Path | None) -> None:
    # Imported here, not at the top: prometheus_client adds about 50 ms to every start of sparkctl.
    from sparkctl.serve import status_metrics

    if output is None:
        sys.stdout.write(status_metrics.exposition(cluster, snap))
        sys.stdout.flush()
        return
    try:
        status_metrics.write_textfile(output, cluster, snap)
    except OSError as exc:
        raise SparkctlError(f"--output {output}: {exc.strerror or exc}") from exc


# --- up -------------------------------------------------------------------------------------------

PHASE_MARK = {bootwatch.OK: ui.OK, bootwatch.FAIL: ui.FAIL, bootwatch.WAIT: "[cyan]…[/cyan]",
              bootwatch.SKIP: ui.SKIP, bootwatch.PENDING: "[dim]·[/dim]"}


def phase_table(state: bootwatch.BootState) -> Table:
    table = Table(title=f"gate: {state.gate}  ({state.elapsed:.0f} s, {state.samples} memory samples)")
    for col in ("rank", "node", "unit", *bootwatch.PHASES[1:], "MemAvail min GiB", "note"):
        table.add_column(col.replace("_", " "))
    for row in sorted(state.rows.values(), key=lambda r: r.rank):
        table.add_row(
            str(row.rank), row.name, f"{PHASE_MARK[row.phases['unit']]} {row.unit}",
            *(PHASE_MARK[row.phases[p]] for p in bootwatch.PHASES[1:]),
            _gib(row.mem_min), row.note,
        )
    return table


def preflight_table(checks: list[preflight.Check]) -> Table:
    table = Table(title="preflight")
    for col in ("node", "check", "", "detail"):
        table.add_column(col)
    for c in checks:
        mark = ui.SKIP if c.skipped else ui.OK if c.ok else ui.FAIL
        table.add_row(c.node, c.name, mark, c.detail)
    return table


def up(
    ctx: typer.Context,
    force: Annotated[bool, typer.Option("--force", help="Start even if another GPU workload runs.")] = False,
    restart: Annotated[bool, typer.Option("--restart", help="Restart the ranks even if ready.")] = False,
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Replace running ranks without asking (needed without a terminal)."),
    ] = False,
    full: Annotated[
        bool,
        typer.Option("--full", help="Always run the up playbook (install, kit and image checks), even when "
                                    "every node already holds what it would install."),
    ] = False,
) -> None:
    """Start the four ranks in order and wait until they serve (preflight, gates, memory guard).

    Ranks that already run are stopped and started again only after a yes (or with --yes). When every
    node's unit, environment, secrets and kit files, staged kit and image already match, the units are
    started over SSH without the playbook (the output says which path ran and why; --full forces it)."""
    cluster, doc = _load(ctx)
    verbose = ctx.obj.verbose
    as_json = ctx.obj.json
    api_key = _api_key(cluster)  # a missing secret is bad input: exit 2 before anything is touched
    started = time.monotonic()
    fleet = _fleet(cluster)
    http = _http()
    say = ui.err_console.print if as_json else ui.console.print
    try:
        before = verdict.snapshot(cluster, doc, fleet, http, api_key)
        current = all(before.nodes[e["name"]].data.get("file_digest") == probe.expected_hashes(cluster, e)
                      for e in doc["nodes"])
        if before.verdict == verdict.READY and current and not restart:
            say(f"{ui.OK} already up and ready; nothing to do (use --restart to restart the ranks)")
            if as_json:
                ui.print_json({"cluster": cluster.name, "result": "ready", "changed": False,
                               **before.as_dict()})
            return
        if any(f.reachable and f.active != "inactive" for f in before.nodes.values()):
            why = "restarting" if before.verdict == verdict.READY else f"cluster is {before.verdict}"
            if not yes:
                _confirm_replace(before, why)
            say(f"stopping the running ranks first ({why})")
            stop = _stop_ranks(cluster, doc, fleet, verbose)
            if not stop.ok:
                raise SparkctlError("could not stop the running ranks",
                                    hint=f"artifacts: {stop.artifact_dir}", details=stop.failures[:12])

        checks, _facts = preflight.preflight(cluster, doc, fleet, force)
        failed = [c for c in checks if not c.ok]
        if failed or verbose:
            ui.err_console.print(preflight_table(checks if verbose else failed))
        if failed:
            raise SparkctlError(
                f"preflight refused the start: {len(failed)} problem(s); nothing was started",
                hint="fix the items above (or pass --force for a GPU in use) and run `sparkctl up` again",
                details=[f"{c.node}: {c.name}: {c.detail}" for c in failed],
            )
        say(f"{ui.OK} preflight: {len(checks)} checks passed on {len(cluster.nodes)} nodes")
        fast = _fast_check(cluster, doc, fleet, full, say)
        timeline: dict[str, float] = {}

        # From here on a unit may have started: every way out but success stops all ranks again
        # (a failure, a gate, Ctrl-C, an error while recording) and says what it really stopped.
        # The memory guard samples every node every ~2 s for the whole start, whatever the gates
        # are waiting on; below the floor it kills every rank at once (its own SSH connections).
        guard_fleet = _guard_fleet(cluster)
        guard = MemoryGuard(cluster, doc, guard_fleet, on_breach=lambda b: abort_ranks(doc, guard_fleet))
        guard.start()
        try:
            state, run_dir = _start_and_watch(cluster, doc, fleet, http, api_key, verbose, as_json, say,
                                              fast, timeline, started)
            guard.record_dir = run_dir
            if guard.breach is not None:
                raise _breach_failure(guard.breach, None)
        except BaseException as exc:
            guard.stop()
            # A breach kills every rank: whatever failed after it (a gate seeing a rank unit exit,
            # an error) is its consequence, and the breach is what the admin must be told.
            if guard.breach is not None and not isinstance(exc, KeyboardInterrupt) and not (
                isinstance(exc, bootwatch.GateFailure) and exc.gate == "memory guard"
            ):
                exc = _breach_failure(guard.breach, exc if isinstance(exc, bootwatch.GateFailure) else None)
            reason = (f"gate {exc.gate!r} failed" if isinstance(exc, bootwatch.GateFailure)
                      else "interrupted" if isinstance(exc, KeyboardInterrupt)
                      else "the start failed")
            say(f"{ui.FAIL} {reason} — stopping every rank")
            stopped = _stop_after_failure(cluster, doc, verbose)
            if isinstance(exc, bootwatch.GateFailure):
                details = [f"node: {exc.node or 'cluster'}", f"records: {exc.record_dir or '-'}"]
                for label, text in (("log tail:", exc.log_tail),
                                    (f"log tail of rank 0 ({exc.head}):", exc.head_tail)):
                    lines = bootwatch.shown_tail(text)
                    details += [label] + [f"    {ln}" for ln in lines] if lines else []
                raise SparkctlError(
                    f"`up` failed at the gate {exc.gate!r} on {exc.node or 'the cluster'}: {exc.detail}",
                    hint=f"{stopped}; see the log tail, fix, and run `sparkctl up` again",
                    details=details,
                ) from None
            if isinstance(exc, SparkctlError):
                exc.hint = f"{stopped}; {exc.hint}" if exc.hint else stopped
                raise
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                say(stopped)
                raise
            raise SparkctlError(f"`up` failed: {type(exc).__name__}: {exc}", hint=stopped,
                                exit_code=EXIT_FAILED) from exc
        guard.stop()
        seconds = time.monotonic() - started
        mins = {n: min((v for v in (r.mem_min, guard.lowest.get(n)) if v is not None), default=None)
                for n, r in state.rows.items()}
        if as_json:
            ui.print_json({"cluster": cluster.name, "result": "ready", "changed": True,
                           "seconds": round(seconds, 2), "boot_seconds": round(state.elapsed, 2),
                           "start": fast.as_dict(), "timeline": timeline,
                           "min_mem_available": mins, "memory_guard": guard.summary(),
                           "records": str(run_dir)})
        else:
            low = min((v for v in mins.values() if v is not None), default=None)
            say(f"{ui.OK} [bold green]ready[/bold green] in {seconds:.1f} s "
                f"(gates {state.elapsed:.1f} s, lowest MemAvailable {_gib(low)} GiB against R4's published "
                f"{R4_MIN_MEM_AVAILABLE_GIB} GiB); records in {run_dir}")
    finally:
        fleet.close()
        http.close()


def _breach_failure(breach: Any, seen: bootwatch.GateFailure | None) -> bootwatch.GateFailure:
    """The memory guard's breach as the failed gate, with the log tail and records of the gate that
    failed after it (``seen``), if any."""
    tail = seen.log_tail if seen else ""
    failure = bootwatch.GateFailure("memory guard", breach.node, breach.describe(), tail,
                                    seen.head if seen else None, seen.head_tail if seen else "")
    failure.record_dir = seen.record_dir if seen else None
    return failure


def _guard_fleet(cluster: Any) -> Any:
    """The memory guard's own SSH connections (it samples while the gates use theirs)."""
    return _fleet(cluster)


def kit_reference(cluster: Any) -> fastup.KitReference | str | None:
    """The configured kit as spark_kit's verify reads it on the controller (from what the playbook
    fetched or unpacked into the state directory; a fast path never fetches); None without a kit,
    a string saying why it cannot be had here (the fast paths of `up` and `stage` share it)."""
    facts = kit_facts(cluster)
    if facts is None:
        return None
    if facts["location"] != "controller":
        return "the kit is kept on the head; the playbook reads it there"
    try:
        ref = stage_kit.prepare(
            facts["source"], str(content.state_dir() / "kit"), url=facts.get("url"),
            commit=facts.get("commit"), path=facts.get("path"), sha256=facts.get("sha256"),
            manifest=facts.get("manifest") or "patches/manifest.json",
            overlay_source=facts.get("overlay_source") or "patches/source",
            overlays=list(facts.get("overlays") or []), offline=True,
        )
    except (stage_kit.KitSourceError, OSError) as exc:
        return str(exc)
    return fastup.KitReference(str(facts["store"]), str(ref["version"]), ref["manifest"])


def _fast_check(cluster: Any, doc: dict[str, Any], fleet: Any, full: bool, say: Any) -> fastup.FastCheck:
    """Whether the installed units can start without the playbook; says which path runs and why."""
    fast = fastup.FastCheck(["--full"]) if full else fastup.check(cluster, doc, fleet, kit_reference(cluster))
    if fast.ok:
        say(f"{ui.OK} nothing to install on {len(cluster.nodes)} nodes (unit, environment, secrets and kit "
            f"files, kit, image checked in {fast.seconds:.1f} s): starting over SSH without the playbook")
        return fast
    for line in fast.playbook_lines("playbooks/up.yml"):
        say(line)
    return fast


def _start_and_watch(cluster: Any, doc: dict[str, Any], fleet: Any, http: Any, api_key: str | None,
                     verbose: bool, as_json: bool, say: Any, fast: fastup.FastCheck | None = None,
                     timeline: dict[str, float] | None = None,
                     started: float | None = None) -> tuple[bootwatch.BootState, Path]:
    """Start the units (ranks 1..n, then 0): over SSH when ``fast`` says nothing needs installing,
    else install and start them with the playbook; then watch the gates; raise on any failure.
    ``timeline`` gets seconds since ``started``: the last start returned, rank 0 /ready, done."""
    marks = timeline if timeline is not None else {}
    origin = started if started is not None else time.monotonic()
    try:
        if fast is not None and fast.ok:
            fastup.start(cluster, doc, fleet)
        else:
            _run_playbook(for_up(cluster), "installing and starting the rank units", verbose)
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
    run_dir = _new_run_dir("up")
    qualify = _qualify_fn(cluster, run_dir)
    watch = bootwatch.BootWatch(cluster, doc, fleet, http, api_key, record_dir=run_dir, qualify=qualify)
    head = next(e["name"] for e in doc["nodes"] if int(e["rank"]) == 0)

    def mark(s: bootwatch.BootState) -> None:
        if "ready_s" not in marks and s.rows[head].phases["ready"] == bootwatch.OK:
            marks["ready_s"] = round(time.monotonic() - origin, 3)

    try:
        if as_json:
            watch.on_update = mark
            state = watch.run()
        else:
            with Live(phase_table(watch.state), console=ui.console, refresh_per_second=4) as live:

                def show(s: bootwatch.BootState) -> None:
                    mark(s)
                    live.update(phase_table(s))

                watch.on_update = show
                state = watch.run()
        marks["done_s"] = round(time.monotonic() - origin, 3)
        return state, run_dir
    except bootwatch.GateFailure as exc:
        exc.record_dir = run_dir
        raise


def _stop_after_failure(cluster: Any, doc: dict[str, Any], verbose: bool) -> str:
    """Stop every rank after a failed start; say what was really stopped (never assume it). Its own
    SSH connections: the start's may be in the middle of what was interrupted."""
    fleet = None
    try:
        fleet = _fleet(cluster)
        stop = _stop_ranks(cluster, doc, fleet, verbose)
    except BaseException as exc:  # even a second Ctrl-C or a runner crash must be reported
        return f"stopping the ranks failed too ({type(exc).__name__}: {exc}); run `sparkctl down`"
    finally:
        if fleet is not None:
            fleet.close()
    if stop.ok:
        return f"all {len(cluster.nodes)} ranks were stopped"
    where = ", ".join(stop.failed_hosts) or "the controller"
    return (f"stopping the ranks FAILED on {where} (ranks there may still run; run `sparkctl down`); "
            f"artifacts: {stop.artifact_dir}")


def _confirm_replace(before: verdict.Snapshot, why: str) -> None:
    """Ask before running ranks are stopped; without a terminal, refuse (exit 2) unless --yes was given."""
    running = sorted((f for f in before.nodes.values() if f.reachable and f.active in RUNNING),
                     key=lambda f: f.rank)
    if not running:
        return  # only failed or stopped units: nothing that serves is replaced
    which = ", ".join(f"rank {f.rank} on {f.name} ({f.active})" for f in running)
    if not _interactive():
        raise InputError(
            f"`up` would stop {len(running)} running rank(s) and start them again ({why}): {which}",
            hint="pass --yes to replace them without asking (there is no terminal to ask)",
        )
    ui.err_console.print(f"running: {which}")
    if not _ask(f"Stop the running ranks and start them again ({why})?"):
        raise SparkctlError("the running ranks were left as they were; nothing was changed",
                            exit_code=EXIT_FAILED)


# systemd ActiveState values of a unit whose rank is (still) running.
RUNNING = ("active", "activating", "reloading", "deactivating")


def _qualify_fn(cluster: Any, run_dir: Path) -> Any:
    if not cluster.profile.gates.qualify_on_up:
        return None

    def call() -> tuple[bool, str]:
        try:
            report = run_qualify(cluster, "quick", run_dir)
        except SparkctlError as exc:
            return False, exc.message
        return report.passed, ("passed" if report.passed else "failed: " + ", ".join(report.failed))

    return call


# --- down -----------------------------------------------------------------------------------------


def down(
    ctx: typer.Context,
    grace: Annotated[int | None, typer.Option("--grace", help="Seconds rank 0 may drain before the forced shutdown (default: the profile's gates.drain_s).")] = None,  # noqa: E501
    full: Annotated[bool, typer.Option("--full", help="Run the playbook (playbooks/down.yml) even when every node answers.")] = False,  # noqa: E501
) -> None:
    """Stop every rank: SIGTERM rank 0, grace period, forced shutdown, SIGKILL backstop. Idempotent.
    With every node answering, the playbook's steps run over SSH (one round; nothing to do when every
    rank unit is inactive); a node that does not answer, or a stop over SSH that fails, runs
    playbooks/down.yml, which reports it (--full runs the playbook anyway)."""
    cluster, doc = _load(ctx)
    if grace is not None and grace < 0:
        raise InputError("--grace must be >= 0")
    fleet = _fleet(cluster)
    try:
        t0 = time.monotonic()
        facts = None if full else probe.collect(cluster, doc, fleet, "watch", timeout=10)
        checked_s = time.monotonic() - t0
        stopped = False
        if facts is not None and nothing_to_stop(facts):
            path = "fast"
        else:
            result = _stop_ranks(cluster, doc, fleet, ctx.obj.verbose, grace,
                                 over_ssh=facts is not None and every_node_answered(facts))
            if not result.ok:
                raise SparkctlError("stopping the ranks failed", hint=f"artifacts: {result.artifact_dir}",
                                    details=result.failures[:12])
            stopped, path = result.stopped, result.path
            facts = probe.collect(cluster, doc, fleet, "watch", timeout=10)
    finally:
        fleet.close()
    running = [f"{f.name}: {f.active}" for f in facts.values() if f.reachable and f.active != "inactive"]
    if running:
        raise SparkctlError("ranks still running after down", details=running)
    if ctx.obj.json:
        ui.print_json({"cluster": cluster.name, "result": "down", "stopped": stopped, "path": path,
                       "nodes": {n: f.active if f.reachable else f"unreachable: {f.error}"
                                 for n, f in facts.items()}})
    elif path == "fast":
        ui.console.print(f"{ui.OK} every rank is stopped (nothing was running: every rank unit inactive, "
                         f"checked in {checked_s:.1f} s over SSH)")
    elif path == "ssh":
        ui.console.print(f"{ui.OK} every rank is stopped (rank 0 first, over SSH without the playbook: every "
                         f"node answered; {time.monotonic() - t0:.1f} s)")
    else:
        ui.console.print(f"{ui.OK} every rank is stopped" + ("" if stopped else " (nothing was running)"))


def every_node_answered(facts: Mapping[str, probe.NodeFacts]) -> bool:
    """True when every node answered the probe: then `down` stops the ranks over SSH
    (sparkctl.serve.faststop); a node that did not answer is the playbook's to report."""
    return bool(facts) and all(f.reachable and not f.error for f in facts.values())


def nothing_to_stop(facts: Mapping[str, probe.NodeFacts]) -> bool:
    """True when `down` has nothing to do on any node: every node answered and its rank unit is
    inactive. A failed unit (the playbook clears its failed state), a unit still starting or
    stopping, or a node that did not answer (the playbook reports it) goes to the playbook."""
    return bool(facts) and all(f.reachable and not f.error and f.active == "inactive" for f in facts.values())


# --- logs -----------------------------------------------------------------------------------------


def journal_command(unit: str, lines: int | None, since: str | None, follow: bool) -> str:
    cmd = ["journalctl", "-u", unit, "--no-pager", "-o", "short-iso"]
    if since:
        cmd += ["--since", since]
    if lines is not None:
        cmd += ["-n", str(lines)]
    if follow:
        cmd.append("-f")
    return " ".join(shlex.quote(w) for w in cmd)


def logs(
    ctx: typer.Context,
    rank: Annotated[
        int | None, typer.Argument(help="Only this rank (default: all).", autocompletion=complete_rank)
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    since: Annotated[str | None, typer.Option("--since", help="journalctl --since, e.g. '-10min'.")] = None,
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines per rank.")] = 100,
) -> None:
    """The journal of the rank units, prefixed by rank and node."""
    cluster, doc = _load(ctx)
    nodes = [n for n in cluster.nodes if rank is None or n.rank == rank]
    if not nodes:
        raise InputError(f"no rank {rank} in this cluster", hint=f"ranks are 0..{len(cluster.nodes) - 1}")
    unit = probe.unit_name(doc)
    secrets = _secrets(cluster)
    fleet = _fleet(cluster)
    label = {n.name: f"[r{n.rank} {n.name}]" for n in nodes}
    lock = threading.Lock()

    def emit(node: str, line: str) -> None:
        with lock:
            sys.stdout.write(f"{label[node]} {redact.redact(line, secrets)}\n")
            sys.stdout.flush()

    try:
        if not follow:
            cmd = journal_command(unit, lines, since, False) + "\n"
            results = fleet.run(cmd, timeout=30, only=[n.name for n in nodes])
            bad = []
            for n in nodes:
                res = results[n.name]
                if not res.reachable:
                    bad.append(f"{n.name}: {res.error}")
                    continue
                for line in res.stdout.splitlines():
                    emit(n.name, line)
            if bad:
                raise UnhealthyError("some nodes could not be read", details=bad)
            return
        stop = threading.Event()
        cmd = journal_command(unit, lines, since, True)
        threads = [threading.Thread(target=fleet.stream, args=(n.name, cmd, emit, stop), daemon=True)
                   for n in nodes]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                time.sleep(0.2)
        except KeyboardInterrupt:
            stop.set()
    finally:
        fleet.close()


# --- bundle ---------------------------------------------------------------------------------------

BUNDLE_SCRIPT = """\
echo '--- uname'; uname -a
echo '--- os-release'; cat /etc/os-release 2>/dev/null
echo '--- python'; python3 --version 2>&1
echo '--- unit'; systemctl status {unit} --no-pager -n 0 2>&1
echo '--- unit-file'; systemctl cat {unit} --no-pager 2>&1
echo '--- files'; ls -l /etc/sparkctl 2>&1
echo '--- journal'; journalctl -u {unit} -n {lines} --no-pager -o short-iso 2>&1
echo '--- links'; ip -s -d link show 2>&1
echo '--- addresses'; ip -br addr 2>&1
echo '--- rdma'; (rdma link show 2>&1 || echo 'no rdma tool')
echo '--- gpu'; (nvidia-smi 2>&1 || echo 'no nvidia-smi')
echo '--- meminfo'; cat /proc/meminfo
echo '--- docker'; (docker ps -a 2>&1 || echo 'no docker')
"""


def build_bundle(
    cluster: Any, doc: dict[str, Any], fleet: Any, http: httpx.Client, lines: int = 300
) -> bytes:
    """The support tarball (gzip) as bytes; every secret value and bearer token redacted."""
    secrets = _secrets(cluster)
    try:
        api_key = _api_key(cluster)
    except SparkctlError:
        api_key = None
    snap = verdict.snapshot(cluster, doc, fleet, http, api_key)
    node_out = fleet.run(BUNDLE_SCRIPT.format(unit=probe.unit_name(doc), lines=int(lines)), timeout=60)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = f"sparkctl-bundle-{cluster.name}-{stamp}"
    files: dict[str, str] = {
        "versions.json": json.dumps(_versions(), indent=2),
        "identity.json": json.dumps(cluster_summary(cluster), indent=2, default=str),
        "plan.json": json.dumps(doc, indent=2),
        "status.json": json.dumps(snap.as_dict(), indent=2, default=str),
    }
    for name, res in node_out.items():
        if not res.reachable:
            files[f"nodes/{name}/unreachable.txt"] = f"{res.error}\n"
            continue
        parsed = remote.parse_sections(res.stdout)
        for section, text in parsed.blocks.items():
            files[f"nodes/{name}/{section}.txt"] = text + "\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, text in sorted(files.items()):
            data = redact.redact(text, secrets).encode()
            info = tarfile.TarInfo(f"{root}/{rel}")
            info.size = len(data)
            info.mtime = int(time.time())
            info.mode = 0o600
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _versions() -> dict[str, Any]:
    out: dict[str, Any] = {"sparkctl": __version__, "python": platform.python_version(),
                           "platform": platform.platform()}
    for pkg in ("ansible-core", "ansible-runner", "paramiko", "httpx"):
        try:
            out[pkg] = version(pkg)
        except Exception:
            out[pkg] = None
    return out


def bundle(
    ctx: typer.Context,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Tarball path (default: ./sparkctl-bundle-<site>-<time>.tar.gz).")] = None,  # noqa: E501
    lines: Annotated[int, typer.Option("--lines", "-n", help="Journal lines per rank.")] = 300,
) -> None:
    """A support tarball: versions, identity table, rendered config, unit states, journals, link counters; secrets redacted."""  # noqa: E501
    cluster, doc = _load(ctx)
    fleet = _fleet(cluster)
    http = _http()
    try:
        data = build_bundle(cluster, doc, fleet, http, lines)
    finally:
        fleet.close()
        http.close()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = output or Path(f"sparkctl-bundle-{cluster.name}-{stamp}.tar.gz")
    path.write_bytes(data)
    path.chmod(0o600)
    if ctx.obj.json:
        ui.print_json({"bundle": str(path), "bytes": len(data)})
    else:
        ui.console.print(f"{ui.OK} wrote {path} ({len(data) / 1024:.0f} KiB, secrets redacted)")


# --- the supervisor and the admin ------------------------------------------------------------------


def _note_supervisor(cluster: Any, snap: verdict.Snapshot) -> None:
    """An open circuit breaker (`sparkctl watch`) is a reason of its own: status names it, exits 3."""
    reason = breaker_reason(supervisor_notes(cluster.name))
    if reason is not None:
        snap.reasons.insert(0, reason)
        if snap.verdict == verdict.READY:
            snap.verdict = verdict.DEGRADED


def _by_admin(verb: str, command: Any) -> Any:
    """`up` or `down` typed by a person. `down` pauses the supervisor's healing until the next `up`;
    `up` resumes it and closes the circuit breaker. Both wait while the supervisor is restarting the
    group. (`sparkctl watch` calls ``up`` and ``down`` themselves, so its restarts change none of this.)"""

    @functools.wraps(command)
    def by_admin(ctx: typer.Context, *args: Any, **kwargs: Any) -> Any:
        name = load_inventory(ctx.obj.inventory_dir()).name
        wait = lambda who: ui.err_console.print(f"waiting for {who}")  # noqa: E731
        with lifecycle(name, f"sparkctl {verb}", on_wait=wait):
            if verb == "down":
                pause(name, "sparkctl down")
                EventLog(name).append(Event("admin-down", "healing paused until the next `sparkctl up`"))
            else:
                was_open = close_breaker(name)
                if resume(name) or was_open:
                    EventLog(name).append(Event("admin-up", "healing resumed" + (
                        "; circuit breaker closed" if was_open else "")))
            return command(ctx, *args, **kwargs)

    return by_admin


def register(app: typer.Typer) -> None:
    for name, func, panel, sample in (
        ("up", _by_admin("up", up), SERVE, "sparkctl up --yes"),
        ("down", _by_admin("down", down), SERVE, "sparkctl down --grace 30"),
        ("status", status, OBSERVE, "sparkctl status --watch"),
        ("logs", logs, OBSERVE, "sparkctl logs 0 --follow --since -10min"),
        ("bundle", bundle, OBSERVE, "sparkctl bundle -o support.tar.gz"),
    ):
        app.command(name, rich_help_panel=panel, epilog=example(sample))(func)


__all__ = ["EXIT_FAILED", "register"]
