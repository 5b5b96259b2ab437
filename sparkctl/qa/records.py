"""What `qualify` and `bench` keep beside their results: the options a bench runs with, the memory
guard's summary against R4's receipt, the bench's report, JSON and plot in its results directory, and
beside every result (as R4 ships them) ``source-identity.json``, ``measurement-summary.json`` and
``measured-profile.json`` (``qa.identity``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkctl.qa.bench import BenchReport
    from sparkctl.qa.qualify import QualifyReport


def bench_options(concurrency: str | None, repeats: int | None, c1_samples: int | None, prefill: str | None,
                  quick: bool, warmup: bool) -> dict[str, Any]:
    """`bench`'s options with their defaults (the published counts; --quick: the lab's short ones)."""
    from sparkctl.qa.bench import DEFAULT_LEVELS, parse_concurrency
    from sparkctl.qa.prefill import parse_sizes

    waves = repeats or (2 if quick else 3)
    sizes = prefill if prefill is not None else ("4K" if quick else "4K,16K,32K,64K,128K")
    return {
        "concurrency": parse_concurrency(concurrency or ",".join(map(str, DEFAULT_LEVELS))),
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


def write_identity(kind: str, doc: dict[str, Any], out_dir: Path, measured: dict[str, Any] | None) -> None:
    """The source identity, the machine-readable summary and the sanitized measured profile of a
    result, each in its own file beside it."""
    from sparkctl.qa.identity import summary

    out_dir.mkdir(parents=True, exist_ok=True)
    files = {"source-identity.json": doc.get("source_identity"),
             "measurement-summary.json": summary(kind, doc), "measured-profile.json": measured}
    for name, value in files.items():
        if value is not None:
            (out_dir / name).write_text(json.dumps(value, indent=2, default=str) + "\n")


def write_bench(
    report: BenchReport, memory: dict[str, Any], out_dir: Path, plot: Path | None,
    measured: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], Path, Path]:
    """The bench's report (with the memory guard's summary) and its plot in ``out_dir``, with the
    identity files beside them; returns the document, the JSON's path and the plot's."""
    from sparkctl.qa.bench import write_report
    from sparkctl.qa.plot import plot_ladder

    json_path = write_report(report, out_dir)
    doc = {**report.to_dict(), "memory_guard": memory, "measured_profile": measured}
    json_path.write_text(json.dumps(doc, indent=2))
    write_identity("bench", doc, out_dir, measured)
    plot_path = plot_ladder(report, plot or out_dir / "ladder.png")
    return doc, json_path, plot_path


def qualify_record(report: QualifyReport, extra: dict[str, Any]) -> dict[str, Any]:
    """qualify's document with what the command adds around the checks (the memory guard, how the
    GPUs and memory were watched, the source identity, the GPU maxima read after the suite), also
    written into the run's report.json so the evidence on disk says the same."""
    doc = {**report.to_dict(), **extra}
    out_dir = Path(report.results_dir)
    path = out_dir / "report.json"
    if path.exists():
        on_disk = json.loads(path.read_text())
        path.write_text(json.dumps({**on_disk, **extra, "thermals": report.thermals}, indent=2, default=str))
    write_identity("qualify", doc, out_dir, extra.get("measured_profile"))
    return doc
