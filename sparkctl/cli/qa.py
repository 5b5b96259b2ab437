"""`sparkctl qualify` and `sparkctl bench`: is the served model right, and how fast is it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
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
from sparkctl.serve import thermals
from sparkctl.serve.guard import MemoryGuard, abort_ranks
from sparkctl.ssh.fleet import Fleet, targets_for

if TYPE_CHECKING:
    from sparkctl.qa.bench import BenchReport

RESULTS_ENV = "SPARKCTL_RESULTS"


class SuiteName(StrEnum):
    quick = "quick"
    full = "full"


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


def _thermals(cluster: Cluster) -> contextlib.AbstractContextManager[thermals.ThermalSampler]:
    """Every node's GPU read every 5 s during the run (its own SSH connections): the maxima are
    recorded with the results."""
    return thermals.sampling(cluster)


def _say_thermals(summary: dict[str, Any] | None) -> None:
    line = thermals.summary_line(summary or {})
    if line:
        ui.console.print(line)
    for warning in (summary or {}).get("warnings", []):
        ui.console.print(f"[yellow]warning:[/yellow] {warning}")


def _guard_report(guard: MemoryGuard, out_dir: Path | None) -> dict[str, Any]:
    guard.record_dir = out_dir
    summary = guard.summary()
    r4 = summary.get("r4_published_lowest_gib")
    lowest = summary.get("lowest_mem_available_gib") or {}
    if r4 is not None and lowest:
        # Each node's lowest MemAvailable against R4's validation receipt (19.52 GiB), in GiB.
        summary["vs_r4_receipt_gib"] = {node: round(gib - r4, 2) for node, gib in lowest.items()}
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
    with _guard(cluster) as guard, _thermals(cluster) as heat:
        report = _qualify_run(cluster, suite.value, results, as_json, heat.summary)
    memory = _guard_report(guard, report.results_dir)
    passed = report.passed and not memory.get("breach")
    if as_json:
        ui.print_json({**report.to_dict(), "memory_guard": memory})
    else:
        ui.console.print(qualify_table(report))
        ui.console.print(f"evidence: {report.results_dir}")
        _say_guard(memory)
        _say_thermals(report.thermals)
        if report.passed:
            where = " on the simulator" if report.simulator else ""
            ran = len(report.checks) - len(report.skipped)
            skipped = f" ({len(report.skipped)} skipped)" if report.skipped else ""
            ui.console.print(f"{ui.OK} all {ran} checks passed{where}{skipped}")
        else:
            ui.console.print(f"{ui.FAIL} failed: {', '.join(report.failed)}")
    raise typer.Exit(EXIT_OK if passed else EXIT_FAILED)


def _qualify_run(cluster: Cluster, suite: str, results: Path, as_json: bool,
                 heat: Callable[[], dict[str, Any]] | None = None) -> QualifyReport:
    if as_json:
        report = run_qualify(cluster, suite, results, thermals=heat)
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

            report = run_qualify(cluster, suite, results, on_progress=progress, thermals=heat)
    return report


# ---------------------------------------------------------------------------------------------- bench
def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _published_cell(value: float | None, ratio: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.2f}" + (f" ({ratio:.2f}×)" if ratio is not None else "")


def bench_table(report: BenchReport) -> Table:
    """One row per (workload, C): sparkctl's mean, min–max of n, TTFT, then one column per published
    source whose workload matches (value and sparkctl's ratio to it). Numbers never wrap."""
    from sparkctl.qa import published as pub

    measured = "simulator" if report.simulator else "sparkctl"
    title = f"bench — {report.model}"
    if report.profile:
        title += f" · profile {report.profile}"
    if report.simulator:
        title += " · [bold yellow]simulator[/bold yellow]"
    table = Table(title=title, title_justify="left")
    table.add_column("workload", no_wrap=True)
    table.add_column("C", justify="right", no_wrap=True)
    table.add_column("definition", no_wrap=True)
    table.add_column(f"{measured}\nmean tok/s", justify="right", no_wrap=True)
    table.add_column("min–max (n)", justify="right", no_wrap=True)
    table.add_column("TTFT s\nmean", justify="right", no_wrap=True)
    sources = pub.sources_used([f for lvl in report.levels for f in lvl.published])
    for key in sources:
        table.add_column(f"{pub.SOURCES[key].label}\ntok/s (ratio)", justify="right", no_wrap=True)
        table.add_column(f"{pub.SOURCES[key].label}\nTTFT s", justify="right", no_wrap=True)
    for lvl in report.levels:
        data = lvl.to_dict()
        head, ttft = data["headline_tps"], data["ttft_s"]
        row = [
            lvl.workload.name,
            str(lvl.concurrency),
            lvl.definition,
            _fmt(head["mean"]) if head else "[red]failed[/red]",
            f"{head['min']:.1f}–{head['max']:.1f} ({head['n']})" if head else "—",
            _fmt(ttft["mean"], 3) if ttft else "—",
        ]
        by_source = {f.source: f for f in lvl.published}
        for key in sources:
            fig = by_source.get(key)
            cell = _published_cell(fig.value, lvl.ratio(fig)) if fig else "—"
            if fig and fig.low is not None:
                cell += f" [{fig.low:.2f}–{fig.high:.2f}]"
            row += [cell, _fmt(fig.ttft_s, 3) if fig and fig.ttft_s is not None else "—"]
        table.add_row(*row)
    caption = ["coding: C1 decode per stream, C>1 batch aggregate · prose: post-first-token aggregate"]
    if sources:
        caption.append("published: " + "; ".join(f"{pub.SOURCES[k].label} = {pub.SOURCES[k].citation}"
                                                  for k in sources))
    else:
        caption.append("no published figure matches these workloads")
    if report.simulator:
        caption.append("figures from the rank simulator, not from hardware")
    table.caption = " · ".join(caption)
    return table


def prefill_table(report: BenchReport) -> Table:
    assert report.prefill is not None
    measured = "simulator" if report.simulator else "sparkctl"
    table = Table(title=f"prefill sweep — served context {report.prefill.context_length or '?'}",
                  title_justify="left")
    for name, justify in (("size", "left"), ("prompt tok", "right"), ("TTFT s", "right"),
                          (f"{measured} tok/s", "right"), ("M1 tok/s (ratio)", "right"), ("note", "left")):
        table.add_column(name, justify=justify, no_wrap=name != "note")  # type: ignore[arg-type]
    for p in report.prefill.points:
        t = p.timing
        figs = p.published
        note = p.skipped or p.clamped or (t.error if t and t.error else "")
        table.add_row(
            p.size,
            f"{t.prompt_tokens:,}" if t and t.prompt_tokens else "—",
            _fmt(t.ttft, 3) if t and t.ok else "—",
            _fmt(p.tps, 1),
            _published_cell(figs[0].value, (p.tps or 0) / figs[0].value if p.tps else None) if figs else "—",
            note,
        )
    table.caption = "prompt_tokens / TTFT of one cold request per size (fresh prefix, 8-token budget)"
    if report.simulator:
        table.caption += " · simulator"
    return table


def bench(
    ctx: typer.Context,
    concurrency: Annotated[
        str | None, typer.Option("--concurrency", help="Comma-separated levels [default: 1,4,8,16].")
    ] = None,
    workload: Annotated[
        list[str] | None,
        typer.Option(
            "--workload",
            help="coding, prose, both, or a workload file pinned by digest: FILE@SHA256 (repeatable) "
            "[default: both].",
        ),
    ] = None,
    repeats: Annotated[
        int | None,
        typer.Option("--repeats", min=1, help="Waves per level (R4: 3) [default: 3; --quick: 2]."),
    ] = None,
    c1_samples: Annotated[
        int | None,
        typer.Option(
            "--c1-samples", min=1, help="Coding C1 samples (R4: 5) [default: 5; --quick: --repeats]."
        ),
    ] = None,
    prefill: Annotated[
        str | None,
        typer.Option(
            "--prefill",
            help="Prefill sweep sizes, or none [default: 4K,16K,32K,64K,128K; --quick: 4K]; "
            "sizes over the served context are clamped.",
        ),
    ] = None,
    quick: Annotated[
        bool,
        typer.Option("--quick", help="Lab/demo: 2 waves, 2 C1 samples, short warm-up, 4K prefill only. "
                     "Not the published counts."),
    ] = False,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Write the plot here (default: <results>/ladder.png)."),
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
        bool,
        typer.Option("--warmup/--no-warmup", help="Run the excluded warm-ups (R4's; short with --quick)."),
    ] = True,
) -> None:
    """Measure the ladder, TTFT and prefill by the published definitions, beside R4's and M1's figures."""
    # Imported here, not at the top: the ladder's modules (asyncio, the plot) add about 30 ms to every
    # start of sparkctl, completion included, and only `bench` needs them.
    from sparkctl.qa.bench import parse_concurrency, run_bench, write_report
    from sparkctl.qa.endpoint import for_cluster
    from sparkctl.qa.plot import plot_ladder
    from sparkctl.qa.prefill import parse_sizes
    from sparkctl.qa.workload import resolve

    as_json = json_out or ctx.obj.json
    levels = parse_concurrency(concurrency or "1,4,8,16")
    loaded = resolve(workload or ["both"])
    waves = repeats or (2 if quick else 3)
    sizes = prefill if prefill is not None else ("4K" if quick else "4K,16K,32K,64K,128K")
    options: dict[str, Any] = {
        "concurrency": levels,
        "waves": waves,
        "c1_samples": c1_samples or (waves if quick else 5),
        "warmup": ("short" if quick else "published") if warmup else "none",
        "prefill_sizes": parse_sizes(sizes),
    }
    cluster = _load(ctx)

    def measure(progress: Any = None) -> BenchReport:
        return run_bench(for_cluster(cluster), loaded, profile=cluster.profile.name, on_progress=progress,
                         **options)

    with _guard(cluster) as guard, _thermals(cluster) as heat:
        if as_json:
            report = measure()
        else:
            with ui.console.status("bench: connecting …") as status:
                report = measure(lambda what: status.update(f"bench: {what} …"))
        report.thermals = heat.summary()
    out_dir = new_results_dir(results, "bench")
    memory = _guard_report(guard, out_dir)
    json_path = write_report(report, out_dir)
    doc = {**report.to_dict(), "memory_guard": memory}
    json_path.write_text(json.dumps(doc, indent=2))
    plot_path = plot_ladder(report, plot or out_dir / "ladder.png")
    if as_json:
        ui.print_json({**doc, "results_json": str(json_path), "plot": str(plot_path)})
    else:
        _say_guard(memory)
        _say_thermals(report.thermals)
        ui.console.print(bench_table(report))
        if report.prefill is not None:
            ui.console.print(prefill_table(report))
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
    sample = "sparkctl bench --workload coding --workload prompts.json@<sha256>"
    app.command("bench", rich_help_panel=QUALIFY, epilog=example(sample))(bench)
