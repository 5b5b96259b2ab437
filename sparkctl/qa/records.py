"""What `qualify` and `bench` keep beside their results: the options a bench runs with, the memory
guard's summary against R4's receipt, and the bench's report, JSON and plot in its results directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkctl.qa.bench import BenchReport


def bench_options(concurrency: str | None, repeats: int | None, c1_samples: int | None, prefill: str | None,
                  quick: bool, warmup: bool) -> dict[str, Any]:
    """`bench`'s options with their defaults (the published counts; --quick: the lab's short ones)."""
    from sparkctl.qa.bench import parse_concurrency
    from sparkctl.qa.prefill import parse_sizes

    waves = repeats or (2 if quick else 3)
    sizes = prefill if prefill is not None else ("4K" if quick else "4K,16K,32K,64K,128K")
    return {
        "concurrency": parse_concurrency(concurrency or "1,4,8,16"),
        "waves": waves,
        "c1_samples": c1_samples or (waves if quick else 5),
        "warmup": ("short" if quick else "published") if warmup else "none",
        "prefill_sizes": parse_sizes(sizes),
    }


def memory_report(summary: dict[str, Any], out_dir: Path | None) -> dict[str, Any]:
    """The memory guard's ``summary`` with each node's lowest MemAvailable against R4's validation
    receipt (19.52 GiB), in GiB; written to ``out_dir``/memory-guard.json when there is one."""
    r4 = summary.get("r4_published_lowest_gib")
    lowest = summary.get("lowest_mem_available_gib") or {}
    if r4 is not None and lowest:
        summary["vs_r4_receipt_gib"] = {node: round(gib - r4, 2) for node, gib in lowest.items()}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "memory-guard.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def write_bench(report: BenchReport, memory: dict[str, Any], out_dir: Path,
                plot: Path | None) -> tuple[dict[str, Any], Path, Path]:
    """The bench's report (with the memory guard's summary) and its plot in ``out_dir``; returns the
    document, the JSON's path and the plot's."""
    from sparkctl.qa.bench import write_report
    from sparkctl.qa.plot import plot_ladder

    json_path = write_report(report, out_dir)
    doc = {**report.to_dict(), "memory_guard": memory}
    json_path.write_text(json.dumps(doc, indent=2))
    plot_path = plot_ladder(report, plot or out_dir / "ladder.png")
    return doc, json_path, plot_path
