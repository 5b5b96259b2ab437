"""A command's help text as the terminal should wrap it (the top-level group and the registry's
builder both apply it, so a lazily built command reads as an eagerly registered one)."""

from __future__ import annotations

import inspect

from typer import _click as click


def flowing_help(cmd: click.Command) -> None:
    """Each paragraph of a command's help as one flowing line: typer's rich mode keeps the single line
    breaks of a docstring's later paragraphs, so the terminal's wrap and the docstring's broke the
    text twice ("... is" / "skipped ..."). A paragraph that starts with ``\\b`` (click's "keep as
    written") or holds an indented line is left as written. Applied to ``cmd`` and its sub-commands."""
    if cmd.help and "\n" in cmd.help:
        paragraphs = inspect.cleandoc(cmd.help).split("\n\n")
        cmd.help = "\n\n".join(
            p if p.startswith("\b") or any(line[:1].isspace() for line in p.splitlines())
            else " ".join(line.strip() for line in p.splitlines())
            for p in paragraphs
        )
    for sub in getattr(cmd, "commands", {}).values():
        flowing_help(sub)
