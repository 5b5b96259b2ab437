"""Everything printed goes through here: rich for people, JSON for machines."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.panel import Panel

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

OK = "[green]✓[/green]"
FAIL = "[red]⨯[/red]"
SKIP = "[yellow]–[/yellow]"


def print_json(data: Any) -> None:
    """Machine output: one JSON document on stdout, nothing else."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def error_panel(message: str, hint: str | None = None, details: list[str] | None = None) -> None:
    body = message
    if details:
        body += "\n" + "\n".join(f"  • {d}" for d in details)
    if hint:
        body += f"\n\n[bold]what to do:[/bold] {hint}"
    err_console.print(Panel(body, title="[red]sparkctl: error[/red]", border_style="red", expand=False))
