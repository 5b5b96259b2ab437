"""The live table of `up`'s gates reads on an 80-column terminal: every header, node name and unit
state whole, and each rank's note under the table in full (in a column of its own, at 80 columns the
table broke every cell: "spa…", "act…", a note one word per line)."""

from __future__ import annotations

from rich.console import Console

from sparkctl.cli.serving import phase_table
from sparkctl.serve import bootwatch

NOTE = "1 check failed (model-config) in the rank's container; the engine was not started"


def _state(names: list[str]) -> bootwatch.BootState:
    rows = {}
    for rank, name in enumerate(names):
        row = bootwatch.RankRow(name=name, rank=rank, unit="activating", mem_min=21 * 2**30)
        for phase in bootwatch.PHASES:
            done = rank == 0 or phase in ("unit", "health")
            row.phases[phase] = bootwatch.OK if done else bootwatch.PENDING
        rows[name] = row
    rows[names[0]].note = "answered '42'"
    rows[names[2]].note = NOTE
    return bootwatch.BootState(rows=rows, gate="ready", elapsed=7.3, samples=4)


def test_the_gate_table_fits_80_columns_with_every_cell_whole() -> None:
    long_names = [f"dgx-spark-rack1-{i:02d}" for i in range(4)]
    for names in (["spark-0", "spark-1", "spark-2", "spark-3"], long_names):
        console = Console(width=80, record=True, color_system=None)
        console.print(phase_table(_state(names), console.width))
        text = console.export_text()
        assert "…" not in text, text
        for word in ("rank", "node", "unit", "health", "ready", "info", "markers", "chat", "qualify",
                     "MemAvail"):
            assert word in text, (word, text)
        for name in names:
            assert f" {name} " in text, text
        flat = " ".join(text.split())
        assert f"rank 0 ({names[0]}): unit activating; answered '42'" in flat
        assert f"rank 2 ({names[2]}): unit activating; {NOTE}" in flat
        assert f"rank 1 ({names[1]}): unit activating" in flat
