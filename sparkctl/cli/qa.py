"""`sparkctl qualify` and `sparkctl bench`: is the served model right, and how fast is it."""

from __future__ import annotations

import contextlib
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sparkctl import ui
from sparkctl.cli import common
from sparkctl.cli import qa_view as view
from sparkctl.cli.shell import QUALIFY, example
from sparkctl.errors import EXIT_FAILED, EXIT_OK
from sparkctl.model import Cluster, load_inventory
from sparkctl.qa.qualify import new_results_dir
from sparkctl.qa.records import bench_options, memory_report, write_bench
from sparkctl.serve import thermals
from sparkctl.serve.guard import MemoryGuard
from sparkctl.serve.guarded import guarded

if TYPE_CHECKING:
    from sparkctl.qa.bench import BenchReport

RESULTS_ENV = "SPARKCTL_RESULTS"


class SuiteName(StrEnum):
    quick = "quick"
    full = "full"


def _load(ctx: typer.Context) -> Cluster:
    return load_inventory(ctx.obj.inventory_dir())


# -------------------------------------------------------------------------------------------- qualify
def _guard(cluster: Cluster) -> contextlib.AbstractContextManager[MemoryGuard]:
    """The memory guard around a qualify or bench run (``serve.guarded``)."""
    return guarded(cluster, common.tools().fleet)


def _thermals(cluster: Cluster) -> contextlib.AbstractContextManager[thermals.ThermalSampler]:
    """Every node's GPU read every 5 s during the run (its own SSH connections): the maxima are
    recorded with the results."""
    return thermals.sampling(cluster)


def _guard_report(guard: MemoryGuard, out_dir: Path | None) -> dict[str, Any]:
    guard.record_dir = out_dir
    return memory_report(guard.summary(), out_dir)


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
        report = view.qualify_run(cluster, suite.value, results, as_json, heat.summary)
    memory = _guard_report(guard, report.results_dir)
    passed = report.passed and not memory.get("breach")
    if as_json:
        ui.print_json({**report.to_dict(), "memory_guard": memory})
    else:
        view.say_qualify(report)
        view.say_guard(memory)
        view.say_thermals(report.thermals)
        view.say_verdict(report)
    raise typer.Exit(EXIT_OK if passed else EXIT_FAILED)


# ---------------------------------------------------------------------------------------------- bench
def bench(
    ctx: typer.Context,
    concurrency: Annotated[
        str | None, typer.Option("--concurrency", help="Comma-separated levels \\[default: 1,4,8,16].")
    ] = None,
    workload: Annotated[
        list[str] | None,
        typer.Option(
            "--workload",
            help="coding, prose, both, or a workload file pinned by digest: FILE@SHA256 (repeatable) "
            "\\[default: both].",
        ),
    ] = None,
    repeats: Annotated[
        int | None,
        typer.Option("--repeats", min=1, help="Waves per level (R4: 3) \\[default: 3; --quick: 2]."),
    ] = None,
    c1_samples: Annotated[
        int | None,
        typer.Option(
            "--c1-samples", min=1, help="Coding C1 samples (R4: 5) \\[default: 5; --quick: --repeats]."
        ),
    ] = None,
    prefill: Annotated[
        str | None,
        typer.Option(
            "--prefill",
            help="Prefill sweep sizes, or none \\[default: 4K,16K,32K,64K,128K; --quick: 4K]; "
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
    from sparkctl.qa.bench import run_bench
    from sparkctl.qa.endpoint import for_cluster
    from sparkctl.qa.workload import resolve

    as_json = json_out or ctx.obj.json
    options = bench_options(concurrency, repeats, c1_samples, prefill, quick, warmup)
    loaded = resolve(workload or ["both"])
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
    doc, json_path, plot_path = write_bench(report, memory, out_dir, plot)
    if as_json:
        ui.print_json({**doc, "results_json": str(json_path), "plot": str(plot_path)})
    else:
        view.say_guard(memory)
        view.say_thermals(report.thermals)
        view.say_bench(report, json_path, plot_path)
    raise typer.Exit(EXIT_FAILED if report.errors or memory.get("breach") else EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command("qualify", rich_help_panel=QUALIFY, epilog=example("sparkctl qualify --suite full"))(qualify)
    sample = "sparkctl bench --workload coding --workload prompts.json@<sha256>"
    app.command("bench", rich_help_panel=QUALIFY, epilog=example(sample))(bench)
