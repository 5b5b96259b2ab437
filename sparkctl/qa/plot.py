"""A PNG of the bench: sparkctl's bars next to every published figure of the same workload, each bar
labelled with its source (R4 suite 1, R4 suite 2, M1, the reference sets), and "simulator" when the lab
measured it; the protocols each get a panel (the second suite after the long request, the arrival
schedule's latencies, the A/B's differences with their range)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.qa import published as pub
from sparkctl.qa.bench import BenchReport, LevelResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MEASURED = "#2b6cb0"
SOURCE_COLOURS = {"r4-s1": "#cbd5e0", "r4-s2": "#718096", "m1": "#ed8936", "r4-sweep": "#a0aec0",
                  "tony-rep1": "#9ae6b4", "tony-rep2": "#48bb78", "tony-exl3": "#c6f6d5",
                  "tony-boot10": "#2f855a", "sg17-tp8": "#b794f4", "mia-tp3": "#f6ad55"}


def measured_label(report: BenchReport) -> str:
    return "sparkctl · simulator" if report.simulator else "sparkctl · measured"


def _grouped(
    ax: Axes,
    ticks: list[str],
    ours: list[float | None],
    spans: list[tuple[float, float]],
    theirs: dict[str, list[float | None]],
    ours_label: str,
) -> None:
    """One group per tick: our bar (with its min–max) and one bar per published source."""
    series = 1 + len(theirs)
    width = min(0.8 / series, 0.38)
    xs = list(range(len(ticks)))
    start = -width * (series - 1) / 2
    heights = [v or 0.0 for v in ours]
    low = [max(0.0, h - s[0]) if v is not None else 0.0 for h, s, v in zip(heights, spans, ours, strict=True)]
    high = [
        max(0.0, s[1] - h) if v is not None else 0.0 for h, s, v in zip(heights, spans, ours, strict=True)
    ]
    bars = ax.bar(
        [x + start for x in xs], heights, width, yerr=[low, high], capsize=3, color=MEASURED, label=ours_label
    )
    ax.bar_label(
        bars, labels=[f"{v:.1f}" if v is not None else "failed" for v in ours], padding=2, fontsize=7
    )
    for i, (key, values) in enumerate(theirs.items(), start=1):
        pbars = ax.bar(
            [x + start + i * width for x in xs],
            [v or 0.0 for v in values],
            width,
            color=SOURCE_COLOURS.get(key, "#a0aec0"),
            label=f"{pub.SOURCES[key].label} (published)",
        )
        ax.bar_label(
            pbars, labels=[f"{v:.1f}" if v is not None else "" for v in values], padding=2, fontsize=7
        )
    ax.set_xticks(xs, ticks, fontsize=8)
    ax.set_ylabel("tokens / s")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    tallest = max(
        [h + e for h, e in zip(heights, high, strict=True)] + [v or 0.0 for vs in theirs.values() for v in vs]
    )
    ax.set_ylim(0, max(1.0, tallest) * (1.25 + 0.07 * series))  # headroom: the legend sits above the bars
    ax.legend(fontsize=7, loc="upper left")


def _decode_panel(ax: Axes, report: BenchReport, levels: list[LevelResult], note: str = "") -> None:
    sources = pub.sources_used([f for lvl in levels for f in lvl.published])
    theirs: dict[str, list[float | None]] = {key: [] for key in sources}
    ticks, ours, spans = [], [], []
    for lvl in levels:
        data = lvl.to_dict()
        head = data["headline_tps"]
        ours.append(head["mean"] if head else None)
        spans.append((head["min"], head["max"]) if head else (0.0, 0.0))
        ttft = data["ttft_s"]
        ticks.append(f"C{lvl.concurrency}" + (f"\nTTFT {ttft['mean']:.2f}s" if ttft else ""))
        by_source = {f.source: f.value for f in lvl.published}
        for key in sources:
            theirs[key].append(by_source.get(key))
    n = max((len(lvl.samples) for lvl in levels), default=0)
    _grouped(ax, ticks, ours, spans, theirs, f"{measured_label(report)} (mean, min–max, ≤{n} samples)")
    w = levels[0].workload
    defs = dict.fromkeys(f"C{lvl.concurrency}: {lvl.definition}" for lvl in levels)
    ax.set_title(f"{w.name} ({w.kind}, {w.max_tokens} tokens){note}\n{' · '.join(defs)}", fontsize=9)


def _arrivals_panel(ax: Axes, report: BenchReport) -> None:
    result = report.arrivals or {}
    latency = result.get("latency_s") or {}
    keys = ("mean", "median", "p95")
    bars = ax.bar(list(keys), [latency.get(k) or 0.0 for k in keys], color=MEASURED,
                  label=measured_label(report))
    ax.bar_label(bars, labels=[f"{latency[k]:.2f}" if k in latency else "—" for k in keys], fontsize=7)
    ax.set_ylabel("request latency, s")
    tps = result.get("throughput_tps")
    for n, fig in enumerate(result.get("published") or []):  # R4's figures, for R4's own schedule only
        ax.axhline(fig["mean_latency_s"], color=SOURCE_COLOURS["r4-s2"] if n else SOURCE_COLOURS["r4-s1"],
                   linestyle="--", linewidth=1,
                   label=f"{fig['label']} mean latency (published): {fig['mean_latency_s']} s, "
                   f"{fig['throughput_tps']} tok/s")
    ax.set_title(f"arrivals {str(result.get('sha256', ''))[:12]}… ({result.get('requests', 0)} requests)\n"
                 f"throughput {tps if tps is not None else '—'} tok/s", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def _ab_panel(ax: Axes, report: BenchReport) -> None:
    ab = report.ab or {}
    rows = [d for d in ab.get("differences", []) if d.get("difference_pct") is not None]
    values = [d["difference_pct"] for d in rows]
    low = [max(0.0, v - d["difference_range_pct"][0]) for v, d in zip(values, rows, strict=True)]
    high = [max(0.0, d["difference_range_pct"][1] - v) for v, d in zip(values, rows, strict=True)]
    bars = ax.bar([d["value"] for d in rows], values, yerr=[low, high], capsize=3, color=MEASURED,
                  label="lever − baseline mean (range: against either baseline arm)")
    ax.bar_label(bars, labels=[f"{v:+.1f}%" for v in values], fontsize=7)
    ax.axhline(0, color="#4a5568", linewidth=0.8)
    ax.set_ylabel("difference, %")
    ax.tick_params(axis="x", labelsize=7)
    name = (ab.get("variant") or {}).get("name", "?")
    ax.set_title(f"A/B: {name} ({' / '.join(ab.get('order', []))})", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def _prefill_panel(ax: Axes, report: BenchReport) -> None:
    assert report.prefill is not None
    points = [p for p in report.prefill.points if not p.skipped]
    theirs: dict[str, list[float | None]] = {"m1": []}
    ticks, ours, spans = [], [], []
    for p in points:
        tps = p.tps
        ours.append(tps)
        spans.append((tps or 0.0, tps or 0.0))
        tokens = p.timing.prompt_tokens if p.timing else 0
        ticks.append(f"{p.size}\n{tokens:,} tok" + ("\n(clamped)" if p.clamped else ""))
        match = {f.source: f.value for f in p.published}
        theirs["m1"].append(match.get("m1"))
    if not any(v is not None for v in theirs["m1"]):
        theirs = {}
    _grouped(ax, ticks, ours, spans, theirs, f"{measured_label(report)} (1 cold request per size)")
    ax.set_title("prefill (prompt_tokens / TTFT)", fontsize=9)


def ladder_figure(report: BenchReport) -> Figure:
    """One panel per workload and one for the prefill sweep (no pyplot state, safe in threads)."""
    # Imported on use: matplotlib costs ~0.5 s to import (python -X importtime) and only bench draws.
    from matplotlib.figure import Figure

    draw: list[Any] = []
    after = " — before the long request" if report.after_levels else ""
    for name in dict.fromkeys(lvl.workload.name for lvl in report.levels):
        levels = [lvl for lvl in report.levels if lvl.workload.name == name]
        draw.append(lambda ax, levels=levels: _decode_panel(ax, report, levels, after))
    for name in dict.fromkeys(lvl.workload.name for lvl in report.after_levels):
        levels = [lvl for lvl in report.after_levels if lvl.workload.name == name]
        draw.append(lambda ax, levels=levels: _decode_panel(ax, report, levels, " — after the long request"))
    if report.prefill and report.prefill.points:
        draw.append(lambda ax: _prefill_panel(ax, report))
    if report.arrivals:
        draw.append(lambda ax: _arrivals_panel(ax, report))
    if report.ab:
        draw.append(lambda ax: _ab_panel(ax, report))
    panels = len(draw)
    if not panels:
        raise ValueError("nothing was measured")
    fig = Figure(figsize=(max(8.0, 6.4 * panels), 5.2))
    axes = fig.subplots(1, panels, squeeze=False)[0]
    for ax, panel in zip(axes, draw, strict=True):
        panel(ax)
    title = f"sparkctl bench — {report.model}"
    if report.profile:
        title += f" · profile {report.profile}"
    notes = []
    if report.simulator:
        notes.append("SIMULATOR (not real hardware): compare shapes, not values")
    if not report.sources and not (report.arrivals and report.arrivals.get("published")):
        notes.append("no published figure matches these workloads")
    if notes:
        title += "\n" + " · ".join(notes)
    fig.suptitle(title, fontsize=11)
    foot: list[str] = [
        f"{pub.SOURCES[k].label}: {pub.SOURCES[k].citation} ({pub.SOURCES[k].date})" for k in report.sources
    ]
    fig.text(
        0.01, 0.01, "\n".join(foot) or "published: none matched", fontsize=6.5, color="#4a5568", va="bottom"
    )
    fig.tight_layout(rect=(0, 0.03 + 0.025 * len(foot), 1, 1))
    return fig


def plot_ladder(report: BenchReport, path: Path) -> Path:
    """Write the figure to ``path`` (PNG) and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ladder_figure(report).savefig(path, dpi=120, format="png")
    return path


def labels(fig: Any) -> str:
    """Every text of the figure (legend entries, bar labels, titles), for tests and accessibility."""
    return " ".join(t.get_text() for t in fig.findobj(lambda o: hasattr(o, "get_text")))
