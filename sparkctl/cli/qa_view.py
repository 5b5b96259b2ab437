"""How `qualify` and `bench` look on a terminal: progress lines, the report tables, the memory guard's
and the GPUs' summaries."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from sparkctl import ui
from sparkctl.qa.qualify import CheckResult, QualifyReport
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


def qualify_table(report: QualifyReport) -> Group:
    """What was asked, then one line per check where the words fit (80 columns: the quick suite's
    titles and details wrapped in a boxed table)."""
    heading = Text(f"qualify ({report.suite}) — {report.model} at {report.endpoint}")
    if report.simulator:
        heading.append(" · ").append("simulator", style="bold yellow")
    table = ui.compact_table()
    table.add_column("", no_wrap=True)
    table.add_column("check", max_width=40)  # the quick suite's names whole; longer ones wrap
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for c in report.checks:
        mark = ui.SKIP if c.skipped else (ui.OK if c.passed else ui.FAIL)
        table.add_row(mark, c.title, "" if c.skipped else f"{c.seconds:.1f}s", c.detail)
    return Group(heading, table)


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


def say_check(result: CheckResult) -> None:
    """One check of qualify as it ends: its mark and time, or why it was skipped."""
    if result.skipped:
        ui.console.print(f"{ui.SKIP} {result.title} [dim](skipped: {result.skipped})[/dim]")
    else:
        mark = ui.OK if result.passed else ui.FAIL
        ui.console.print(f"{mark} {result.title} [dim]({result.seconds:.1f}s)[/dim]")


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _published_cell(value: float | None, ratio: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.2f}" + (f" ({ratio:.2f}×)" if ratio is not None else "")


# Sources with columns of their own in the bench table (R4's suites, M1, the served profile's own);
# every other matching reference set is listed in reference_table.
COLUMN_SOURCES = ("r4-s1", "r4-s2", "m1")


def _column_sources(report: BenchReport, levels: list[Any]) -> list[str]:
    from sparkctl.qa import published as pub

    own = pub.PROFILE_SOURCES.get(report.profile or "", ())
    used = pub.sources_used([f for lvl in levels for f in lvl.published])
    return [k for k in used if k in COLUMN_SOURCES or k in own]


def bench_table(report: BenchReport, levels: list[Any] | None = None, note: str = "") -> Table:
    """One row per (workload, C): sparkctl's mean, min–max of n, TTFT, then one column per published
    source whose workload matches (value and sparkctl's ratio to it). Numbers never wrap."""
    from sparkctl.qa import published as pub

    levels = report.levels if levels is None else levels
    measured = "simulator" if report.simulator else "sparkctl"
    title = f"bench — {report.model}{note}"
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
    sources = _column_sources(report, levels)
    for key in sources:
        table.add_column(f"{pub.SOURCES[key].label}\ntok/s (ratio)", justify="right", no_wrap=True)
        table.add_column(f"{pub.SOURCES[key].label}\nTTFT s", justify="right", no_wrap=True)
    for lvl in levels:
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
    caption = ["coding: C1 decode per stream, C>1 batch aggregate · prose: post-first-token aggregate · "
               "mixed: mean of the eight categories' batch aggregates"]
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


def reference_table(report: BenchReport, levels: list[Any]) -> Table | None:
    """The reference sets measured with the same workload bytes that have no column of their own
    (R4's sweep, Tony's runs, SG17 TP8 …): one row per figure, with sparkctl's ratio, source and date."""
    from sparkctl.qa import published as pub

    columns = set(_column_sources(report, levels))
    rows = [(lvl, f) for lvl in levels for f in lvl.published if f.source not in columns]
    if not rows:
        return None
    table = Table(title="reference sets (same workload bytes and definition)", title_justify="left")
    for name in ("workload", "C", "reference", "tok/s (ratio)", "TTFT s", "source", "date"):
        table.add_column(name, no_wrap=name not in ("source",),
                         justify="right" if name in ("C", "tok/s (ratio)", "TTFT s") else "left")
    for lvl, f in rows:
        source = pub.SOURCES[f.source]
        table.add_row(lvl.workload.name, str(lvl.concurrency), f.label,
                      _published_cell(f.value, lvl.ratio(f)), _fmt(f.ttft_s, 3), source.citation, source.date)
    return table


def arrivals_table(report: BenchReport) -> Table:
    result = report.arrivals or {}
    table = Table(title=f"arrivals — {result.get('file')} (sha256 {str(result.get('sha256'))[:12]}…)",
                  title_justify="left")
    for name in ("requests", "completed", "throughput tok/s", "latency mean s", "median s", "p95 s",
                 "TTFT mean s"):
        table.add_column(name, justify="right", no_wrap=True)
    lat, ttft = result.get("latency_s") or {}, result.get("ttft_s") or {}
    table.add_column("source", no_wrap=False)
    measured = "simulator" if report.simulator else "sparkctl"
    table.add_row(str(result.get("requests")), str(result.get("completed")),
                  _fmt(result.get("throughput_tps")), _fmt(lat.get("mean"), 3),
                  _fmt(result.get("median_latency_mean_of_cohorts_s"), 3), _fmt(lat.get("p95"), 3),
                  _fmt(ttft.get("mean"), 3), measured)
    for fig in result.get("published") or []:  # R4's figures, for R4's own schedule bytes only
        table.add_row("", "", _fmt(fig["throughput_tps"]), _fmt(fig["mean_latency_s"], 3),
                      _fmt(fig["median_latency_mean_of_cohorts_s"], 3), "—", "—",
                      f"{fig['label']} ({fig['date']}): {fig['note']}")
    table.caption = ("open loop: each request sent at its offset; latency = send → last byte; throughput, "
                     "mean and median: the mean over the measured cohorts (R4's figures)")
    return table


def ab_table(report: BenchReport) -> Table:
    ab = report.ab or {}
    table = Table(title=f"A/B — variant {ab['variant'].get('name')} ({' / '.join(ab['order'])})",
                  title_justify="left")
    for name in ("value", "baseline 1", "lever", "baseline 2", "difference", "range", "baseline drift"):
        table.add_column(name, justify="left" if name == "value" else "right", no_wrap=True)
    for d in ab["differences"]:
        b1, b2 = d["baseline"]
        pct = d.get("difference_pct")
        rng = d.get("difference_range_pct")
        table.add_row(d["value"], _fmt(b1), _fmt(d["lever"]), _fmt(b2),
                      f"{pct:+.1f} %" if pct is not None else "—",
                      f"{rng[0]:+.1f} … {rng[1]:+.1f} %" if rng else "—",
                      f"{d['baseline_drift_pct']:+.1f} %" if d.get("baseline_drift_pct") is not None else "—")
    table.caption = ab.get("difference_text", "")
    return table


def say_bench(report: BenchReport, json_path: Path, plot_path: Path) -> None:
    if report.levels:
        note = " · suite 1, before the long request" if report.after_levels else ""
        ui.console.print(bench_table(report, report.levels, note))
        if (refs := reference_table(report, report.levels)) is not None:
            ui.console.print(refs)
    if report.after_long is not None:
        long = report.after_long
        failed = f" — {long['error']}" if long["error"] else ""
        ui.console.print(f"long request: {long['filler_units']:,} filler units, {long['prompt_tokens']:,} "
                         f"prompt tokens in {_fmt(long['e2e_s'], 1)} s{failed}")
    if report.after_levels:
        ui.console.print(bench_table(report, report.after_levels, " · suite 2, after the long request"))
    if report.arrivals is not None:
        ui.console.print(arrivals_table(report))
    if report.ab is not None:
        ui.console.print(ab_table(report))
    if report.prefill is not None:
        ui.console.print(prefill_table(report))
    ui.console.print(f"results: {json_path}\nplot:    {plot_path}")
    left_out = {(n["label"], n["reason"]) for lvl in report.levels for n in lvl.not_compared}
    for label, reason in sorted(left_out):
        ui.console.print(f"[dim]not compared with {label}: {reason}[/dim]")
    tel = report.telemetry
    if tel:
        ui.console.print(f"[dim]GPU telemetry: {tel['gpu_checkpoints']} read(s) between "
                         f"{tel['timed_windows']} timed windows, {tel['gpu_queries_inside_windows']} "
                         "inside one[/dim]")
    for err in report.suite_errors:
        ui.console.print(f"{ui.FAIL} {err}")
    for err in [e for e in report.errors if e not in report.suite_errors][:5]:
        ui.console.print(f"{ui.FAIL} request failed: {err}")
    short = sum(lvl.short_requests for lvl in report.levels)
    if short:
        ui.console.print(
            f"[yellow]warning:[/yellow] {short} request(s) stopped before max_tokens; "
            "their rates are not comparable with the published figures"
        )
