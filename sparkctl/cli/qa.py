"""`sparkctl qualify` and `sparkctl bench`: is the served model right, and how fast is it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from sparkctl import ui
from sparkctl.cli.shell import QUALIFY, example
from sparkctl.errors import EXIT_FAILED, EXIT_OK
from sparkctl.model import Cluster, load_inventory
from sparkctl.qa.qualify import CheckResult, QualifyReport, new_results_dir, run_qualify
from sparkctl.render import plan_document
from sparkctl.serve.guard import MemoryGuard, abort_ranks
from sparkctl.ssh.fleet import Fleet, targets_for

if TYPE_CHECKING:
    from sparkctl.qa.bench import BenchReport, LevelResult

RESULTS_ENV = "SPARKCTL_RESULTS"


class SuiteName(StrEnum):
    quick = "quick"
    full = "full"


class WorkloadName(StrEnum):
    coding = "coding"
    prose = "prose"
    both = "both"


def _load(ctx: typer.Context) -> Cluster:
    return load_inventory(ctx.obj.inventory_dir())


# -------------------------------------------------------------------------------------------- qualify
@contextlib.contextmanager
def _guard(cluster: Cluster) -> Iterator[MemoryGuard]:
    """The memory guard around a qualify or bench run: every node sampled every ~2 s on its own
    SSH connections; below the floor every rank is killed (the run then fails on its requests)."""
    doc = plan_document(cluster)
    fleet = Fleet(targets_for(cluster))
    guard = MemoryGuard(cluster, doc, fleet, on_breach=lambda b: abort_ranks(doc, fleet))
    try:
        with guard:
            yield guard
    finally:
        fleet.close()


def _guard_report(guard: MemoryGuard, out_dir: Path | None) -> dict[str, Any]:
    guard.record_dir = out_dir
    summary = guard.summary()
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "memory-guard.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _say_guard(summary: dict[str, Any]) -> None:
    if summary.get("breach"):
        ui.console.print(f"{ui.FAIL} memory guard: {summary['breach']} — every rank was stopped")
    elif summary.get("lowest_gib") is not None:
        ui.console.print(f"lowest MemAvailable {summary['lowest_gib']} GiB "
                         f"(R4's published validation: {summary['r4_published_lowest_gib']} GiB)")


def qualify_table(report: QualifyReport) -> Table:
    where = " · [bold yellow]simulator[/bold yellow]" if report.simulator else ""
    table = Table(
        title=f"qualify ({report.suite}) — {report.model} at {report.endpoint}{where}", title_justify="left"
    )
    table.add_column("check")
    table.add_column("", justify="center")
    table.add_column("time", justify="right")
    table.add_column("detail", overflow="fold")
    for c in report.checks:
        mark = ui.SKIP if c.skipped else (ui.OK if c.passed else ui.FAIL)
        table.add_row(c.title, mark, "" if c.skipped else f"{c.seconds:.1f}s", c.detail)
    return table


def qualify(
    ctx: typer.Context,
    suite: Annotated[
        SuiteName,
        typer.Option("--suite", help="quick: plain, arithmetic, json, determinism; full: every check."),
    ] = SuiteName.quick,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable report on stdout.")] = False,
    results: Annotated[
        Path,
        typer.Option(
            "--results",
            envvar=RESULTS_ENV,
            help="Parent directory of the evidence (qualify-<timestamp>/ is made in it).",
        ),
    ] = Path("results"),
) -> None:
    """Check that rank 0 answers right: text, arithmetic at C8, images, JSON, tools, needle, determinism."""
    as_json = json_out or ctx.obj.json
    cluster = _load(ctx)
    with _guard(cluster) as guard:
        report = _qualify_run(cluster, suite.value, results, as_json)
    memory = _guard_report(guard, report.results_dir)
    passed = report.passed and not memory.get("breach")
    if as_json:
        ui.print_json({**report.to_dict(), "memory_guard": memory})
    else:
        ui.console.print(qualify_table(report))
        ui.console.print(f"evidence: {report.results_dir}")
        _say_guard(memory)
        if report.passed:
            where = " on the simulator" if report.simulator else ""
            ran = len(report.checks) - len(report.skipped)
            skipped = f" ({len(report.skipped)} skipped)" if report.skipped else ""
            ui.console.print(f"{ui.OK} all {ran} checks passed{where}{skipped}")
        else:
            ui.console.print(f"{ui.FAIL} failed: {', '.join(report.failed)}")
    raise typer.Exit(EXIT_OK if passed else EXIT_FAILED)


def _qualify_run(cluster: Cluster, suite: str, results: Path, as_json: bool) -> QualifyReport:
    if as_json:
        report = run_qualify(cluster, suite, results)
    else:
        with ui.console.status("qualify: connecting …") as status:

            def progress(name: str, result: CheckResult | None) -> None:
                if result is None:
                    status.update(f"qualify: {name} …")
                elif result.skipped:
                    ui.console.print(f"{ui.SKIP} {result.title} [dim](skipped: {result.skipped})[/dim]")
                else:
                    mark = ui.OK if result.passed else ui.FAIL
                    ui.console.print(f"{mark} {result.title} [dim]({result.seconds:.1f}s)[/dim]")

            report = run_qualify(cluster, suite, results, on_progress=progress)
    return report


# ---------------------------------------------------------------------------------------------- bench
def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _range(lvl: LevelResult) -> str:
    """min–max of the complete batches, with how many of the batches run they are when some failed."""
    head = lvl.headline()
    if head is None:
        return "—"
    text = f"{_fmt(head['min'], 1)}–{_fmt(head['max'], 1)}"
    if len(lvl.measured) < len(lvl.batches):
        text += f" ({len(lvl.measured)}/{len(lvl.batches)})"
    return text


def bench_table(report: BenchReport) -> Table:
    """One row per (workload, C): the headline (C1 decode per stream, C>1 aggregate) beside the
    published figure, then latency percentiles. Numbers never wrap; prose columns do."""
    measured = "simulator" if report.simulator else "measured"
    title = f"bench — {report.model}"
    if report.profile:
        title += f" vs profile {report.profile}"
    if report.simulator:
        title += " · [bold yellow]simulator[/bold yellow]"
    table = Table(title=title, title_justify="left")
    table.add_column("workload", no_wrap=True)
    table.add_column("C", justify="right", no_wrap=True)
    table.add_column(f"{measured}\ntok/s", justify="right", no_wrap=True)
    table.add_column(f"min–max\nof {report.repeats}", justify="right", no_wrap=True)
    if report.has_published:
        table.add_column("published\ntok/s", justify="right", no_wrap=True)
        table.add_column("ratio", justify="right", no_wrap=True)
    table.add_column("TTFT s\np50 p90 p99", justify="right", no_wrap=True)
    table.add_column("e2e s\np50 p90 p99", justify="right", no_wrap=True)
    for lvl in report.levels:
        data = lvl.to_dict()
        head = data["headline_tps"]
        ratio = data["ratio_to_published"]
        ttft, e2e = data["ttft_s"], data["e2e_s"]
        row = [
            lvl.workload,
            str(lvl.concurrency),
            _fmt(head["median"]) if head else "[red]failed[/red]",
            _range(lvl),
        ]
        if report.has_published:
            row += [_fmt(lvl.published), f"{ratio:.2f}×" if ratio is not None else "—"]
        row += [
            " ".join(_fmt(ttft[k], 3) for k in ("p50", "p90", "p99")) if ttft else "—",
            " ".join(_fmt(e2e[k], 2) for k in ("p50", "p90", "p99")) if e2e else "—",
        ]
        table.add_row(*row)
    table.caption = "tok/s: C1 decode per stream, C>1 aggregate over the whole batch"
    if report.has_published:
        table.caption += f" · published: {report.published_source}"
    else:
        table.caption += f" · profile {report.profile or '?'} publishes no figures; compared to nothing"
    if report.simulator:
        table.caption += " · figures from the rank simulator, not from hardware"
    return table


def bench(
    ctx: typer.Context,
    concurrency: Annotated[str, typer.Option("--concurrency", help="Comma-separated levels.")] = "1,4,8",
    workload: Annotated[
        WorkloadName, typer.Option("--workload", help="Prompt set(s) to run.")
    ] = WorkloadName.both,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Measured batches per level.")] = 3,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Write the ladder plot here (default: <results>/ladder.png)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable results on stdout.")] = False,
    results: Annotated[
        Path,
        typer.Option(
            "--results",
            envvar=RESULTS_ENV,
            help="Parent directory of the results (bench-<timestamp>/ is made in it).",
        ),
    ] = Path("results"),
    warmup: Annotated[
        bool, typer.Option("--warmup/--no-warmup", help="Run a discarded warm-up batch per level.")
    ] = True,
) -> None:
    """Measure the concurrency ladder (C1 decode per stream, C>1 aggregate) against the published figures."""
    # Imported here, not at the top: the ladder's modules (asyncio, the plot) add about 30 ms to every
    # start of sparkctl, completion included, and only `bench` needs them.
    from sparkctl.qa.bench import bench_cluster, parse_concurrency, parse_workloads, write_report
    from sparkctl.qa.plot import plot_ladder

    as_json = json_out or ctx.obj.json
    levels = parse_concurrency(concurrency)
    names = parse_workloads(workload.value)
    cluster = _load(ctx)
    options = {"workloads": names, "concurrency": levels, "repeats": repeats, "warmup": warmup}
    with _guard(cluster) as guard:
        if as_json:
            report = bench_cluster(cluster, **options)
        else:
            with ui.console.status("bench: connecting …") as status:
                report = bench_cluster(
                    cluster, on_progress=lambda what: status.update(f"bench: {what} …"), **options
                )
    out_dir = new_results_dir(results, "bench")
    memory = _guard_report(guard, out_dir)
    json_path = write_report(report, out_dir)
    plot_path = plot_ladder(report, plot or out_dir / "ladder.png")
    if as_json:
        ui.print_json({**report.to_dict(), "memory_guard": memory, "results_json": str(json_path),
                       "plot": str(plot_path)})
    else:
        _say_guard(memory)
        ui.console.print(bench_table(report))
        ui.console.print(f"results: {json_path}\nplot:    {plot_path}")
        for err in report.errors[:5]:
            ui.console.print(f"{ui.FAIL} request failed: {err}")
        short = sum(lvl.short_requests for lvl in report.levels)
        if short:
            ui.console.print(
                f"[yellow]warning:[/yellow] {short} request(s) stopped before max_tokens; "
                "their rates are not comparable with the published figures"
            )
    raise typer.Exit(EXIT_FAILED if report.errors or memory.get("breach") else EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command("qualify", rich_help_panel=QUALIFY, epilog=example("sparkctl qualify --suite full"))(qualify)
    sample = "sparkctl bench --concurrency 1,4,8 --workload coding"
    app.command("bench", rich_help_panel=QUALIFY, epilog=example(sample))(bench)
