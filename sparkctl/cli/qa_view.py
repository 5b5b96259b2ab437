"""How `qualify` and `bench` look on a terminal: progress lines, the report tables, the memory guard's
and the GPUs' summaries."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from sparkctl import ui
from sparkctl.model import Cluster
from sparkctl.qa.qualify import CheckResult, QualifyReport, run_qualify
from sparkctl.serve import thermals

if TYPE_CHECKING:
    from sparkctl.qa.bench import BenchReport


def say_thermals(summary: dict[str, Any] | None) -> None:
    line = thermals.summary_line(summary or {})
    if line:
        ui.console.print(line)
    for warning in (summary or {}).get("warnings", []):
        ui.console.print(f"[yellow]warning:[/yellow] {warning}")


def say_guard(summary: dict[str, Any]) -> None:
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


def say_qualify(report: QualifyReport) -> None:
    ui.console.print(qualify_table(report))
    ui.console.print(f"evidence: {report.results_dir}")


def say_verdict(report: QualifyReport) -> None:
    if report.passed:
        where = " on the simulator" if report.simulator else ""
        ran = len(report.checks) - len(report.skipped)
        skipped = f" ({len(report.skipped)} skipped)" if report.skipped else ""
        ui.console.print(f"{ui.OK} all {ran} checks passed{where}{skipped}")
    else:
        ui.console.print(f"{ui.FAIL} failed: {', '.join(report.failed)}")


def qualify_run(cluster: Cluster, suite: str, results: Path, as_json: bool,
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


def say_bench(report: BenchReport, json_path: Path, plot_path: Path) -> None:
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
