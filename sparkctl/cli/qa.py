"""`sparkctl qualify` and `sparkctl bench`: is the served model right, and how fast is it.

Options in, one call (``qa.verbs.Qualify`` / ``qa.verbs.Bench``), output. What the verbs take from
serve (memory guard, GPU sampler, ``/server_info`` comparison, ready marks, down and up) comes from
``tools``, the one factory the CLI tests replace; ``ConsoleQa`` draws their progress and results.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sparkctl import ui
from sparkctl.cli import qa_view as view
from sparkctl.cli.serve import GroupOption
from sparkctl.cli.shell import QUALIFY, example
from sparkctl.errors import EXIT_FAILED, EXIT_OK
from sparkctl.model import Cluster, load_inventory
from sparkctl.qa.verbs import Outcome, QaTools, Qualify, via_router

if TYPE_CHECKING:
    from sparkctl.qa.bench import BenchReport
    from sparkctl.qa.qualify import CheckResult, ProgressFn, QualifyReport

RESULTS_ENV = "SPARKCTL_RESULTS"


class SuiteName(StrEnum):
    quick = "quick"
    full = "full"


def _load(ctx: typer.Context) -> Cluster:
    return load_inventory(ctx.obj.inventory_dir())


def _targets(ctx: typer.Context, names: list[str] | None,
             router: bool = False) -> list[tuple[str | None, Cluster]]:
    from sparkctl.serve.groups import named_clusters

    return list(via_router(_load(ctx), names)) if router else named_clusters(_load(ctx), names)


ViaRouter = Annotated[bool, typer.Option(
    "--via-router", help="Measure the whole site once through its router (sparkctl_router), each group's "
    "rank 0 checked idle and as its profile behind it; not with --group.")]


def tools() -> QaTools:
    """qualify's and bench's collaborators from serve: the memory guard over the CLI's SSH fleet, the
    GPUs read when asked, the boot watch's /server_info comparison, the ready marks `up` left, and
    `down` then `up --yes` with progress on stderr (CLI tests replace this factory)."""
    from sparkctl.cli import common
    from sparkctl.cli.serving import ConsoleOutput
    from sparkctl.qa.verbs import identity
    from sparkctl.serve import bootwatch, thermals, verdict
    from sparkctl.serve.guarded import guarded
    from sparkctl.serve.up import down_then_up

    serving = common.tools()
    return QaTools(
        guard=lambda cluster: guarded(cluster, serving.fleet),
        thermals=thermals.on_demand,
        server_check=bootwatch.server_check,
        identity=lambda cluster, **kw: identity(
            cluster, verdict.load_ready_marks(verdict.ready_file(cluster.name)), **kw),
        cycle=lambda cluster: down_then_up(cluster, common.tools(), ConsoleOutput(True, False)),
    )


class ConsoleQa:
    """``qa.verbs.QaOutput`` on the terminal; ``quiet`` (--json): nothing but the document at the end."""

    def __init__(self, quiet: bool):
        self.quiet = quiet

    def group(self, name: str, cluster: Cluster) -> None:
        if not self.quiet:
            ui.console.print(f"[bold]group {name}[/bold] (rank 0 on {cluster.head.name})")

    @contextlib.contextmanager
    def qualifying(self) -> Iterator[ProgressFn | None]:
        if self.quiet:
            yield None
            return
        with ui.console.status("qualify: connecting …") as status:

            def progress(name: str, result: CheckResult | None) -> None:
                if result is None:
                    status.update(f"qualify: {name} …")
                else:
                    view.say_check(result)

            yield progress

    def qualified(self, report: QualifyReport, memory: dict[str, Any]) -> None:
        if not self.quiet:
            view.say_qualify(report)
            view.say_guard(memory)
            view.say_thermals(report.thermals)
            view.say_verdict(report)

    @contextlib.contextmanager
    def benching(self) -> Iterator[Callable[[str], None] | None]:
        if self.quiet:
            yield None
            return
        with ui.console.status("bench: connecting …") as status:
            yield lambda what: status.update(f"bench: {what} …")

    def benched(self, report: BenchReport, memory: dict[str, Any], json_path: Path, plot_path: Path) -> None:
        if not self.quiet:
            view.say_guard(memory)
            view.say_thermals(report.thermals)
            view.say_bench(report, json_path, plot_path)


def _finish(outcome: Outcome, as_json: bool) -> None:
    """The --json document, then the exit code: 0 when every group passed, else 1."""
    if as_json:
        ui.print_json(outcome.document())
    raise typer.Exit(EXIT_OK if outcome.passed else EXIT_FAILED)


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
    group: GroupOption = None,
    router: ViaRouter = False,
) -> None:
    """Check that rank 0 answers right: text, arithmetic at C8, images, JSON, tools, needle, determinism."""
    as_json = json_out or ctx.obj.json
    verb = Qualify(_targets(ctx, group, router), tools(), ConsoleQa(as_json), suite.value, results,
                   router=router)
    _finish(verb.run(), as_json)


# ---------------------------------------------------------------------------------------------- bench
def bench(
    ctx: typer.Context,
    concurrency: Annotated[
        str | None, typer.Option("--concurrency", help="Comma-separated levels \\[default: 1,4,6,8,16].")
    ] = None,
    workload: Annotated[
        list[str] | None,
        typer.Option(
            "--workload",
            help="coding (the community runner's merge_intervals prompt), prose (sparkDash's hash-map "
            "prompt), both, mixed (the runner's eight categories, one batch each), or a workload file "
            "pinned by digest: FILE@SHA256 (repeatable) \\[default: both].",
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
        typer.Option("--plot", help="Write the plot here \\[default: ladder.png beside bench.json]."),
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
    group: GroupOption = None,
    after_long: Annotated[
        bool,
        typer.Option("--after-long", help="R4's second suite: the suites, R4's long needle request, then "
                     "the suites again; both reported."),
    ] = False,
    arrivals: Annotated[
        str | None,
        typer.Option("--arrivals", metavar="r4|FILE@SHA256",
                     help="Run a frozen arrival schedule instead of the ladder, as R4 did: r4 (R4's twelve "
                     "arrivals) or JSON lines (at, workload or prompt) pinned by digest; a warm-up cohort, "
                     "then --repeats cohorts; throughput and request latency mean/median/p95."),
    ] = None,
    ab: Annotated[
        str | None,
        typer.Option("--ab", metavar="VARIANT",
                     help="Interleaved baseline/lever/baseline: the group brought down and up with the "
                     "variant's profile overrides (bench-variants/VARIANT.yml in the inventory, or a "
                     "file) between the arms; the difference with its spread."),
    ] = None,
    router: ViaRouter = False,
) -> None:
    """Measure the ladder, TTFT and prefill with the publishers' workloads and definitions, beside the
    figures published for the same workloads; the server must be idle, no GPU is read while timing."""
    # Imported here, not at the top: the ladder's modules (asyncio, the plot) add about 30 ms to every
    # start of sparkctl, completion included, and only `bench` needs them.
    from sparkctl.qa.records import bench_options
    from sparkctl.qa.verbs import Bench
    from sparkctl.qa.workload import resolve

    as_json = json_out or ctx.obj.json
    options = bench_options(concurrency, repeats, c1_samples, prefill, quick, warmup)
    loaded = resolve(workload or ["both"])
    verb = Bench(_targets(ctx, group, router), tools(), ConsoleQa(as_json), loaded, options, results,
                 plot=plot, inventory=ctx.obj.inventory_dir() if ab is not None else None,
                 after_long=after_long, arrivals=arrivals, ab=ab, router=router)
    _finish(verb.run(), as_json)


def register(app: typer.Typer) -> None:
    app.command("qualify", rich_help_panel=QUALIFY, epilog=example("sparkctl qualify --suite full"))(qualify)
    sample = "sparkctl bench --workload coding --workload prompts.json@<sha256>"
    app.command("bench", rich_help_panel=QUALIFY, epilog=example(sample))(bench)
