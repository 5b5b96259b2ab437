"""How the command line meets the shell: lifecycle panels, their order, examples, value completion.

``sparkctl --help`` lists the commands in the order a site meets them — inventory, provision,
stage, serve, observe, qualify/bench, lab — one panel each (``PANELS``). A command joins a panel
with ``rich_help_panel=`` where it is registered and carries one example in its epilog
(``example(...)``). Within a panel, commands keep the order their modules register them (typer
adds command groups such as ``switch`` after the plain commands).

Completion of values (node names, ranks, profiles, provision tags) is ``cli.completion``; which
inventory a command line names when it names none is ``site_inventory`` here.

The top-level group (``LifecycleGroup``) lists the commands from the registry's index
(``registry.Index``) and imports a command's module only when that command runs, shows its own
help or is completed past its name: ``--version``, ``--help`` and a <TAB> on the first word import
no command module.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer import _click as click
from typer.core import TyperGroup

from sparkctl.cli.helptext import flowing_help
from sparkctl.errors import EXIT_USAGE, SparkctlError

if TYPE_CHECKING:
    from sparkctl.cli.registry import Index

INVENTORY = "Inventory"
PROVISION = "Provision"
STAGE = "Stage"
SERVE = "Serve"
OBSERVE = "Observe"
QUALIFY = "Qualify and bench"
LAB = "Lab"
PANELS = (INVENTORY, PROVISION, STAGE, SERVE, OBSERVE, QUALIFY, LAB)

INVENTORY_ENV = "SPARKCTL_INVENTORY"


def example(*commands: str) -> str:
    """The epilog of a command: its example invocation(s)."""
    from rich.markup import escape  # the command modules import rich anyway; the top level need not

    lines = "\n\n".join(f"  [cyan]$ {escape(c)}[/cyan]" for c in commands)
    return f"[bold]Example[/bold]\n\n{lines}"


class OrderedGroup(TyperGroup):
    """A command group that lists its commands in registration order (click sorts them by name)."""

    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        return list(self.commands)


def quiet_flags(cmd: click.Command, ctx: click.Context) -> None:
    """No value placeholder beside a flag in help: typer prints every option's type (``<bool>``), but
    a flag takes no value. Applied to ``cmd``'s options and its ``--help`` (which click makes once
    per command), then to its sub-commands and theirs."""
    for param in [*cmd.params, cmd.get_help_option(ctx)]:
        if param is not None and getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(cmd, "commands", {}).values():
        quiet_flags(sub, ctx)


class PlainValues:
    """typer's coercion of a parameter's value, without pydantic where the value needs none.

    typer checks every value that is not a flag's with a pydantic ``TypeAdapter``, and importing
    pydantic costs about 0.1 s: half of a <TAB>'s budget, and more than ``--version`` needs. A
    value that is absent, already of the parameter's type (its default) or, for a plain ``Path``
    option (no existence, permission or resolution asked), a string naming a readable path or
    nothing yet, comes back as typer would give it; any other value goes to typer's own coercion,
    errors and all. Installed on the commands' parameters by ``plain_values``."""

    def __init__(self, param: Any) -> None:
        self._typer: Any = None

    def coerce(self, value: Any, param: Any, ctx: click.Context) -> Any:
        descriptor = param.type_descriptor
        info, annotation = descriptor.parameter_info, descriptor.annotation
        single = not param.multiple and param.nargs == 1
        plain = single and info.parser is None and descriptor.file_annotation is None
        if value is None and single:
            return None
        if param.multiple and param.nargs == 1 and info.parser is None and value in (None, ()):
            return () if value is None else []  # a repeatable option not given: typer's own values
        if plain and isinstance(annotation, type) and isinstance(value, annotation):
            return value
        if plain and annotation is Path and isinstance(value, str) and _plain_path(info) and (
            not os.path.exists(value) or os.access(value, os.R_OK)
        ):
            return Path(value)
        if self._typer is None:
            from typer._coercion import build_runtime_param

            self._typer = build_runtime_param(descriptor)
        return self._typer.coerce(value, param=param, ctx=ctx)


def _plain_path(info: Any) -> bool:
    return (not info.exists and info.file_okay and info.dir_okay and not info.writable
            and not info.resolve_path and not info.allow_dash and info.path_type is None)


def plain_values(cmd: click.Command, ctx: click.Context) -> None:
    """``PlainValues`` for every parameter of ``cmd`` (its ``--help`` too) and of its sub-commands."""
    for param in [*cmd.params, cmd.get_help_option(ctx)]:
        if hasattr(param, "type_descriptor") and getattr(param, "_runtime_param", False) is None:
            param._runtime_param = PlainValues(param)  # type: ignore[union-attr]
    for sub in getattr(cmd, "commands", {}).values():
        plain_values(sub, ctx)


class LifecycleGroup(OrderedGroup):
    """The top-level group: commands by lifecycle panel (``PANELS``), then in registration order.

    With an index (``sparkctl.cli.main`` gives ``index_from``, called when first needed: never for
    ``--version``), the commands not registered in this process come from it: listed, shown in the
    top-level help and offered on <TAB> from the index alone (``Entry.stub``), and built from their
    own module when one is run, asked for its help or completed past its name."""

    index_from: Callable[[], Index] | None = None
    _index: Index | None = None
    _listing = False  # inside the top-level help or the completion of a command name

    @property
    def index(self) -> Index | None:
        if self._index is None and self.index_from is not None:
            self._index = self.index_from()
        return self._index

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        quiet_flags(self, ctx)  # before parsing: --help prints while the options are parsed
        plain_values(self, ctx)
        flowing_help(self)
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        names = super().list_commands(ctx)
        panels = {name: getattr(cmd, "rich_help_panel", None) for name, cmd in self.commands.items()}
        index = self.index
        if index is not None:
            for name, entry in index.entries().items():
                if name not in panels:
                    names.append(name)
                    panels[name] = entry.panel

        def rank(name: str) -> int:
            panel = panels[name]
            return PANELS.index(panel) if panel in PANELS else len(PANELS)

        return sorted(names, key=rank)  # stable: the order within a panel stays

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = self.commands.get(cmd_name)
        index = self.index
        if cmd is not None or index is None:
            return cmd
        if self._listing:
            entry = index.entries().get(cmd_name)
            return None if entry is None else entry.stub()
        cmd = index.command(cmd_name)
        if cmd is not None:
            quiet_flags(cmd, ctx)
            plain_values(cmd, ctx)
            flowing_help(cmd)
            self.commands[cmd_name] = cmd
        return cmd

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.UsageError as exc:
            # typer suggests from the commands built so far; the index knows them all
            known = self.index is not None and self.suggest_commands and bool(args)
            if known and "Did you mean" not in exc.message:
                import difflib

                matches = difflib.get_close_matches(args[0], self.list_commands(ctx))  # type: ignore[arg-type]
                if matches:
                    suggestions = ", ".join(f"{m!r}" for m in matches)
                    exc.message = f"{exc.message.rstrip('.')}. Did you mean {suggestions}?"
            raise

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with self._listed():
            super().format_help(ctx, formatter)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[Any]:
        with self._listed():
            return super().shell_complete(ctx, incomplete)

    @contextlib.contextmanager
    def _listed(self) -> Iterator[None]:
        saved, self._listing = self._listing, True
        try:
            yield
        finally:
            self._listing = saved


# --- which inventory ---------------------------------------------------------------------------


def site_inventory() -> Path:
    """The only site under ./inventory (``example`` and hidden directories, such as a site `init` left
    staged, aside); InputError naming the choices otherwise."""
    root = Path("inventory")
    found = root.iterdir() if root.is_dir() else iter(())
    sites = sorted(p for p in found if p.is_dir() and p.name != "example" and not p.name.startswith("."))
    if len(sites) == 1:
        return sites[0]
    names = ", ".join(p.name for p in sites) or "none"
    raise SparkctlError(
        f"no inventory chosen (sites under ./inventory: {names})",
        hint=f"pass --inventory DIR (or -i), or set {INVENTORY_ENV}",
        exit_code=EXIT_USAGE,
    )
