"""Everything printed goes through here: rich for people, JSON for machines."""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

if TYPE_CHECKING:
    from rich.table import Table

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

OK = "[green]✓[/green]"
FAIL = "[red]⨯[/red]"
SKIP = "[yellow]–[/yellow]"


# Whether this process has printed its JSON document (``print_json``): with --json, a failure after
# that adds nothing to stdout; a failure before it prints the error as the document (``json_error``).
json_written = False


def compact_table(title: str | None = None, columns: Sequence[str] = (), *, right: Collection[str] = (),
                  wrap: Collection[str] = ()) -> Table:
    """The tables a verb prints per node or port: a rule under the header, one space between columns,
    no borders, so that four Sparks fit 80 columns one line each (`status`, `stage`, `check fabric`).

    ``columns`` are added in order, left-aligned and kept on one line; those named in ``right`` are
    right-aligned (numbers), those in ``wrap`` may wrap, a word too long for the column folded,
    never cut. A column that needs more (a width, centring) is added by the caller after these."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", expand=False, box=box.SIMPLE_HEAD, padding=(0, 1),
                  pad_edge=False, collapse_padding=True, show_edge=False)
    for name in columns:
        if name in wrap:
            table.add_column(name, justify="right" if name in right else "left", overflow="fold")
        else:
            table.add_column(name, justify="right" if name in right else "left", no_wrap=True)
    return table


def live(renderable: Any, console: Console, **options: Any) -> Any:
    """rich's ``Live`` (imported when a command draws one), ending its last line where the console is
    not a terminal: rich ends it only on a terminal, so in a pipe or a log the next line printed ran
    on after the table's last row."""
    from rich.live import Live

    class _Live(Live):
        def stop(self) -> None:
            drew = self._started and not self.transient and not console.is_terminal and not console.is_jupyter
            super().stop()
            if drew:
                console.line()

    return _Live(renderable, console=console, **options)


def print_json(data: Any) -> None:
    """Machine output: one JSON document on stdout, nothing else."""
    global json_written
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()
    json_written = True


def json_error(code: int, message: str, hint: str | None = None, details: list[str] | None = None,
               nodes: list[str] | None = None) -> None:
    """With --json, a failure is one JSON object on stdout — ``{"error": {code, message, hint, details,
    nodes}}`` — unless the command already printed its document (which then carries the failure)."""
    if not json_written:
        print_json({"error": {"code": code, "message": message, "hint": hint, "details": details or [],
                              "nodes": nodes or []}})


def error_panel(message: str, hint: str | None = None, details: list[str] | None = None) -> None:
    body = message
    if details:  # plain text (a node's output, a path): never read as rich markup ("[receiver]")
        body += "\n" + "\n".join(f"  • {escape(str(d))}" for d in details)
    if hint:
        body += f"\n\n[bold]what to do:[/bold] {hint}"
    err_console.print(Panel(body, title="[red]sparkctl: error[/red]", border_style="red", expand=False))
