"""How `qualify` and `bench` look on a terminal: progress lines, the report tables, the memory guard's
and the GPUs' summaries."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.text import Text

from sparkctl import ui
from sparkctl.qa.qualify import ACCEPTANCE, AFTER, CheckResult, QualifyReport
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
    titles and details wrapped in a boxed table). The full suite's acceptance checks come under two
    headings, before and after the long request, each title said once; a title is kept whole up to
    40 characters (the detail beside it wraps first)."""
    heading = Text(f"qualify ({report.suite}) — {report.model} at {report.endpoint}")
    if report.simulator:
        heading.append(" · ").append("simulator", style="bold yellow")
    rows: list[tuple[str, str | Text, str, str]] = []
    phase = None
    for c in report.checks:
        title = c.title
        if c.phase and c.phase != phase:
            rows.append(("", Text(f"{c.phase} the long request", style="dim"), "", ""))
        if c.phase == "after":  # said once by the heading above, not on every row under it
            title = ACCEPTANCE.get(c.name.removesuffix(AFTER), title)
        phase = c.phase or phase
        mark = ui.SKIP if c.skipped else (ui.OK if c.passed else ui.FAIL)
        rows.append((mark, title, "" if c.skipped else f"{c.seconds:.1f}s", c.detail))
    longest = max((len(str(r[1])) for r in rows), default=5)
    table = ui.compact_table(columns=("",))
    # A fixed width, not min_width: rich wrapped a neighbour's words for a wider column than it
    # then drew with min_width, and cut what did not fit ("16/16" printed as "16/").
    table.add_column("check", width=min(longest, 40))
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for row in rows:
        table.add_row(*row)
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


DEFINITIONS = ("coding: C1 decode per stream, C>1 batch aggregate · prose: post-first-token aggregate · "
               "mixed: mean of the eight categories' batch aggregates")


def bench_table(report: BenchReport, levels: list[Any] | None = None, note: str = "") -> Group:
    """Within 80 columns (ten columns side by side cut every cell to "…"): what was asked; one row
    per (workload, C) with sparkctl's mean, min–max of n and TTFT; then every published figure of the
    same workload bytes and definition, one row each with sparkctl's ratio to it; then each source
    once, with its citation and date. Numbers never wrap."""
    from sparkctl.qa import published as pub

    levels = report.levels if levels is None else levels
    measured = "simulator" if report.simulator else "sparkctl"
    title = f"bench — {report.model}{note}"
    if report.profile:
        title += f" · profile {report.profile}"
    if report.simulator:
        title += " · [bold yellow]simulator[/bold yellow]"
    tps = f"{measured} tok/s"
    table = ui.compact_table(columns=("workload", "C", "definition", tps, "min–max (n)", "TTFT s"),
                             right=("C", tps, "min–max (n)", "TTFT s"))
    for lvl in levels:
        data = lvl.to_dict()
        head, ttft = data["headline_tps"], data["ttft_s"]
        table.add_row(
            lvl.workload.name, str(lvl.concurrency), lvl.definition,
            _fmt(head["mean"]) if head else "[red]failed[/red]",
            f"{head['min']:.1f}–{head['max']:.1f} ({head['n']})" if head else "—",
            _fmt(ttft["mean"], 3) if ttft else "—",
        )
    parts: list[Any] = [Text.from_markup(title), table, Text(DEFINITIONS, style="dim")]
    figures = [(lvl, f) for lvl in levels for f in lvl.published]
    if figures:
        ref = ui.compact_table(columns=("workload", "C", "published", "tok/s", "ratio", "range", "TTFT s"),
                               right=("C", "tok/s", "ratio", "range", "TTFT s"))
        for lvl, f in figures:
            ratio = lvl.ratio(f)
            ref.add_row(lvl.workload.name, str(lvl.concurrency), f.label, _fmt(f.value),
                        "—" if ratio is None else f"{ratio:.2f}×",
                        f"{f.low:.2f}–{f.high:.2f}" if f.low is not None and f.high is not None else "",
                        _fmt(f.ttft_s, 3) if f.ttft_s is not None else "—")
        parts += [Text(""), Text(f"published, same workload bytes and definition (ratio = {measured} ÷ "
                                 "published)"), ref]
        used = pub.sources_used([f for _, f in figures])
        for k in used:
            source = pub.SOURCES[k]
            parts.append(Text(f"{source.label}: {source.citation} ({source.date})", style="dim"))
    else:
        parts.append(Text("no published figure matches these workloads", style="dim"))
    if report.simulator:
        parts.append(Text("figures from the rank simulator, not from hardware", style="dim"))
    return Group(*parts)


def prefill_table(report: BenchReport) -> Group:
    assert report.prefill is not None
    measured = "simulator" if report.simulator else "sparkctl"
    numbers = ("prompt tok", "TTFT s", f"{measured} tok/s", "M1 tok/s (ratio)")
    table = ui.compact_table(columns=("size", *numbers, "note"), right=numbers, wrap=("note",))
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
    caption = "prompt_tokens / TTFT of one cold request per size (fresh prefix, 8-token budget)"
    if report.simulator:
        caption += " · simulator"
    return Group(Text(""), Text(f"prefill sweep — served context {report.prefill.context_length or '?'}"),
                 table, Text(caption, style="dim"))


def arrivals_table(report: BenchReport) -> Group:
    result = report.arrivals or {}
    numbers = ("requests", "done", "tok/s", "latency s", "median s", "p95 s", "TTFT s")
    table = ui.compact_table(columns=(*numbers, "source"), right=numbers, wrap=("source",))
    lat, ttft = result.get("latency_s") or {}, result.get("ttft_s") or {}
    measured = "simulator" if report.simulator else "sparkctl"
    table.add_row(str(result.get("requests")), str(result.get("completed")),
                  _fmt(result.get("throughput_tps")), _fmt(lat.get("mean"), 3),
                  _fmt(result.get("median_latency_mean_of_cohorts_s"), 3), _fmt(lat.get("p95"), 3),
                  _fmt(ttft.get("mean"), 3), measured)
    for fig in result.get("published") or []:  # R4's figures, for R4's own schedule bytes only
        table.add_row("", "", _fmt(fig["throughput_tps"]), _fmt(fig["mean_latency_s"], 3),
                      _fmt(fig["median_latency_mean_of_cohorts_s"], 3), "—", "—",
                      f"{fig['label']} ({fig['date']}): {fig['note']}")
    caption = ("open loop: each request sent at its offset; latency = send → last byte; throughput, "
               "mean and median: the mean over the measured cohorts (R4's figures)")
    heading = f"arrivals — {result.get('file')} (sha256 {str(result.get('sha256'))[:12]}…)"
    return Group(Text(""), Text(heading), table, Text(caption, style="dim"))


def ab_table(report: BenchReport) -> Group:
    ab = report.ab or {}
    numbers = ("baseline 1", "lever", "baseline 2", "difference", "range", "drift")
    table = ui.compact_table(columns=("value", *numbers), right=numbers)
    for d in ab["differences"]:
        b1, b2 = d["baseline"]
        pct = d.get("difference_pct")
        rng = d.get("difference_range_pct")
        table.add_row(d["value"], _fmt(b1), _fmt(d["lever"]), _fmt(b2),
                      f"{pct:+.1f} %" if pct is not None else "—",
                      f"{rng[0]:+.1f} … {rng[1]:+.1f} %" if rng else "—",
                      f"{d['baseline_drift_pct']:+.1f} %" if d.get("baseline_drift_pct") is not None else "—")
    heading = f"A/B — variant {ab['variant'].get('name')} ({' / '.join(ab['order'])})"
    return Group(Text(""), Text(heading), table, Text(ab.get("difference_text", ""), style="dim"),
                 Text("drift: the second baseline against the first", style="dim"))


def say_bench(report: BenchReport, json_path: Path, plot_path: Path) -> None:
    if report.levels:
        note = " · suite 1, before the long request" if report.after_levels else ""
        ui.console.print(bench_table(report, report.levels, note))
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
