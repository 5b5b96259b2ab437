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
