"""`stage`'s table at 80 columns: one line per node, no cell cut or wrapped (every cell ran over
three to seven lines: "checkpoi/nt", "verifie/d", each rate in its cell), the rates and notes below."""

from __future__ import annotations

import types
from typing import Any

from rich.console import Console

from sparkctl.cli.stage_view import summary_table
from sparkctl.nodeside.progress import gib, human_bytes

NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]
KIT = "61ace71c22887688b9dc1e129106f3b6807c94b7"
IMAGE = "sha256:be12dfa37c0d5e1f9a0b6c2d4e8f1a3b5c7d9e0f2a4b6c8d0e1f3a5b7c9d1e3f"


def _cluster() -> Any:
    return types.SimpleNamespace(name="lab1", nodes=[types.SimpleNamespace(name=n, rank=i)
                                                     for i, n in enumerate(NODES)],
                                 kit=object(), runtime=types.SimpleNamespace(kind="container"))


def _summaries() -> dict[str, dict[str, Any]]:
    """What `stage all` reported from a first run: the head built the image, the workers received it,
    every node the checkpoint (rank 2 slower) and its packed shards."""
    out = {}
    for i, n in enumerate(NODES):
        out[n] = {
            "rank": i, "tp": 4,
            "kit": {"version": KIT, "current": KIT, "verified": True,
                    "transfer": {"bytes_moved": 16_128}},
            "image": {"id": IMAGE, "bytes_moved": 0 if i == 0 else 81_862_000,
                      "rate_mib_s": 0 if i == 0 else 141.0 + i},
            "weights": {"verified": True, "present": True},
            "transfer": {"bytes_moved": 167_772_160, "rate_mib_s": 129.0 if i == 2 else 135.0},
            "engram": {"verified": True, "files": ["shard-a", "shard-b"]},
            "pack": {"bytes_written": 27_965_000, "rate_mib_s": 115.0 + 5 * i},
        }
    return out


def _lines(summaries: dict[str, dict[str, Any]], cluster: Any = None) -> list[str]:
    console = Console(width=80, record=True, color_system=None)
    console.print(summary_table(cluster or _cluster(), summaries, False, "all"))
    return console.export_text().splitlines()


def test_four_sparks_fit_80_columns_one_line_each() -> None:
    lines = _lines(_summaries())
    assert all(len(ln) <= 80 for ln in lines), lines
    assert not any("…" in ln for ln in lines), lines
    assert lines[0].split() == ["stage:", "lab1"]
    assert lines[1].split() == ["node", "rank", "kit", "image", "weights", "engram", "moved", "packed"]
    rows = [ln for ln in lines if ln.startswith("spark-")]
    assert len(rows) == 4, lines
    assert rows[0].split() == ["spark-0", "0", "✓", "61ace71c", "✓", "be12dfa3", "✓", "✓", "2×r0of4",
                               "160", "MiB", "27", "MiB"]
    assert rows[3].split()[-4:] == ["238", "MiB", "27", "MiB"]  # checkpoint, image and kit together
    assert lines[-1] == "MiB/s per node: checkpoint 129–135, image 142–144, packing 115–130"


def test_a_failed_node_says_why_under_the_column_it_failed_in() -> None:
    summaries = _summaries()
    summaries["spark-1"] = {"rank": 1, "tp": 4, "error": "spark-1: no space on /mnt/nvme (needs 160 MiB)",
                            "cause": "no space on /mnt/nvme", "kit": summaries["spark-1"]["kit"],
                            "image": summaries["spark-1"]["image"]}
    lines = _lines(summaries)
    assert all(len(ln) <= 80 for ln in lines), lines
    text = "\n".join(lines)
    assert "⨯ no space" in text and "/mnt/nvme" in text


def test_a_pending_build_and_a_kit_that_is_not_current_are_noted_below() -> None:
    summaries = _summaries()
    summaries["spark-0"]["kit"]["build"] = {"pending": True}
    summaries["spark-3"]["kit"]["current"] = "0" * 40
    lines = _lines(summaries)
    assert "kit verified; its build waits on spark-0 for the image (sparkctl stage image)" in lines
    assert "kit staged but not current (spark-3: current 00000000)" in lines
    assert [ln.split()[2] for ln in lines if ln.startswith("spark-")] == ["–", "✓", "✓", "✓"]


def test_sizes_in_two_or_three_figures_for_the_table_and_two_decimals_elsewhere() -> None:
    sizes = (0, 1000, 16_128, 27_965_000, 167_772_160, 3 << 30, 5 << 40)
    assert [human_bytes(n, short=True) for n in sizes] == [
        "0 B", "1000 B", "16 KiB", "27 MiB", "160 MiB", "3.0 GiB", "5.0 TiB"]
    assert [human_bytes(n) for n in sizes] == [
        "0 B", "1000 B", "15.75 KiB", "26.67 MiB", "160.00 MiB", "3.00 GiB", "5.00 TiB"]
    # Free-space messages keep one unit whatever the size, so need and free compare at a glance.
    assert [gib(n) for n in (0, 512 << 20, 3 << 30, 5 << 40)] == ["0.00 GiB", "0.50 GiB", "3.00 GiB",
                                                                   "5120.00 GiB"]


def test_the_rates_are_dimmed_and_the_notes_are_not() -> None:
    summaries = _summaries()
    summaries["spark-3"]["kit"]["current"] = "0" * 40
    below = summary_table(_cluster(), summaries, False, "all").renderables[1:]
    assert [(str(t), t.style) for t in below] == [
        ("MiB/s per node: checkpoint 129–135, image 142–144, packing 115–130", "dim"),
        ("kit staged but not current (spark-3: current 00000000)", ""),
    ]
