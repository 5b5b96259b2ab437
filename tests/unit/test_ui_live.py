"""A live display's last line ends before the next print, in a pipe as on a terminal."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from sparkctl import ui
from sparkctl.ansible.hosttable import HostTable


def _table() -> Table:
    table = Table()
    table.add_column("rank")
    table.add_row("spark-1 ✓ ready")
    return table


def _drawn(terminal: bool) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=terminal, color_system=None)
    with ui.live(_table(), console, refresh_per_second=4) as live:
        live.update(_table())
    console.print("after")
    return out.getvalue().splitlines()


def test_in_a_pipe_the_next_line_starts_on_a_line_of_its_own() -> None:
    lines = _drawn(terminal=False)
    assert lines[-1] == "after"
    assert lines[-2].startswith("└")


def test_on_a_terminal_no_blank_line_is_added() -> None:
    lines = _drawn(terminal=True)
    assert lines[-1].endswith("after") and lines[-2].startswith("└")  # rich ends the line itself there


def test_the_host_table_in_a_pipe_ends_its_line() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    with HostTable("provision", ["spark-1"], console=console):
        pass
    console.print("after")
    assert out.getvalue().endswith("\nafter\n") and "after" not in out.getvalue().splitlines()[-2]


def test_a_compact_tables_columns_are_named_once_with_their_alignment_and_wrapping() -> None:
    table = ui.compact_table("t", ("node", "tok/s", "note"), right=("tok/s",), wrap=("note",))
    assert [(c.header, c.justify, c.no_wrap, c.overflow) for c in table.columns] == [
        ("node", "left", True, "ellipsis"), ("tok/s", "right", True, "ellipsis"),
        ("note", "left", False, "fold")]
    word = "a-note-without-spaces-that-is-longer-than-the-room-left"
    table.add_row("spark-0", "41.20", word)
    console = Console(width=40, record=True, color_system=None)
    console.print(table)
    lines = console.export_text().splitlines()
    assert all(len(ln) <= 40 for ln in lines) and "…" not in "".join(lines), lines
    note = lines[3].index("a-note")  # folded into its own column, line after line
    assert "".join(ln[note:].strip() for ln in lines[3:]) == word, lines
