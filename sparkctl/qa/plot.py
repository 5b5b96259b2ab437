"""A PNG of the bench ladder: measured (median, min–max) beside the profile's published figures."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.qa.bench import BenchReport, LevelResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MEASURED = "#2b6cb0"
PUBLISHED = "#a0aec0"


def ladder_figure(report: BenchReport) -> Figure:
    """One panel per workload, grouped bars per concurrency (no pyplot state, safe in threads)."""
    # Imported on use: matplotlib costs ~0.5 s to import (python -X importtime) and only
    # `bench --plot` draws.
    from matplotlib.figure import Figure

    names = list(dict.fromkeys(lvl.workload for lvl in report.levels))
    if not names:
        raise ValueError("nothing was measured")
    fig = Figure(figsize=(max(8.0, 6.2 * len(names)), 4.8))
    axes = fig.subplots(1, len(names), squeeze=False)
    where = "simulator" if report.simulator else "measured"
    for ax, name in zip(axes[0], names, strict=True):
        levels: list[LevelResult] = [lvl for lvl in report.levels if lvl.workload == name]
        xs = list(range(len(levels)))
        width = 0.38
        heads = [lvl.headline() or {"min": 0.0, "median": 0.0, "max": 0.0} for lvl in levels]
        med = [h["median"] for h in heads]
        low = [h["median"] - h["min"] for h in heads]
        high = [h["max"] - h["median"] for h in heads]
        has_pub = any(lvl.published is not None for lvl in levels)
        offset = width / 2 if has_pub else 0.0
        bars = ax.bar(
            [x - offset for x in xs],
            med,
            width,
            yerr=[low, high],
            capsize=4,
            color=MEASURED,
            label=f"{where} (median, min–max of {report.repeats})",
        )
        labels = [
            f"{h['median']:.1f}" if lvl.headline() else "failed" for h, lvl in zip(heads, levels, strict=True)
        ]
        ax.bar_label(bars, labels=labels, padding=3, fontsize=8)
        if has_pub:
            pub_vals = [lvl.published or 0.0 for lvl in levels]
            pbars = ax.bar([x + offset for x in xs], pub_vals, width, color=PUBLISHED, label="published")
            ax.bar_label(pbars, labels=[f"{v:.1f}" if v else "—" for v in pub_vals], padding=3, fontsize=8)
        ax.set_xticks(
            xs,
            [
                f"C{lvl.concurrency}\n{'decode/stream' if lvl.concurrency == 1 else 'aggregate'}"
                for lvl in levels
            ],
        )
        ax.set_ylabel("tokens / s")
        ax.set_title(
            f"{name} ({report.workloads[name].max_tokens} tokens)" if name in report.workloads else name
        )
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.margins(y=0.15)
        ax.legend(fontsize=8, loc="upper left")
    title = f"sparkctl bench — {report.model}"
    if report.profile:
        title += f" · profile {report.profile}"
    notes = []
    if report.simulator:
        notes.append("SIMULATOR (not real hardware)")
    if not report.has_published:
        notes.append("no published figures for this profile")
    if notes:
        title += "\n" + " · ".join(notes)
    fig.suptitle(title, fontsize=11)
    foot = "C1: (completion − 1) / (done − first token) · C>1: Σ completion / (last done − first sent)"
    if report.has_published and report.published_source:
        foot += f"\npublished: {report.published_source}"
    fig.text(0.01, 0.01, foot, fontsize=7, color="#4a5568", va="bottom")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def plot_ladder(report: BenchReport, path: Path) -> Path:
    """Write the ladder figure to ``path`` (PNG) and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ladder_figure(report).savefig(path, dpi=120, format="png")
    return path
