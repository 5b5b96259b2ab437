"""The `sparkctl` command line: global options, sub-commands, and the one place errors become exit codes.

Each noun lives in its own module (cluster, switch, stage, serve, lab, qa); each command there only
loads the model, plans, runs and renders. Register a module by adding it to ``_COMMAND_MODULES``.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from sparkctl import __version__, ui
from sparkctl.errors import EXIT_FAILED, EXIT_USAGE, SparkctlError

app = typer.Typer(
    name="sparkctl",
    help="Provision, stage and serve DeepSeek-V4.1-Flash with SGLang across four DGX Sparks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


@dataclass
class State:
    """Global options, shared by every command through ``ctx.obj``."""

    inventory: Path | None = None
    json: bool = False
    verbose: bool = False
    extra: dict[str, object] = field(default_factory=dict)

    def inventory_dir(self) -> Path:
        """The inventory to use: --inventory, then $SPARKCTL_INVENTORY, then ./inventory/<only site>."""
        if self.inventory is not None:
            return self.inventory
        env = os.environ.get("SPARKCTL_INVENTORY")
        if env:
            return Path(env)
        root = Path("inventory")
        sites = sorted(p for p in root.iterdir() if p.is_dir() and p.name != "example") if root.is_dir() else []
        if len(sites) == 1:
            return sites[0]
        names = ", ".join(p.name for p in sites) or "none"
        raise SparkctlError(
            f"no inventory chosen (sites under ./inventory: {names})",
            hint="pass --inventory DIR (or -i), or set SPARKCTL_INVENTORY",
            exit_code=EXIT_USAGE,
        )


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sparkctl {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
    inventory: Annotated[
        Path | None,
        typer.Option("--inventory", "-i", help="Inventory directory (default: $SPARKCTL_INVENTORY or ./inventory/<only site>)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="More detail.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    ctx.obj = State(inventory=inventory, json=json_out, verbose=verbose)


# Modules that add commands to ``app``; each exposes ``register(app)``.
_COMMAND_MODULES = [
    "sparkctl.cli.provision",
    "sparkctl.cli.lab",
    "sparkctl.cli.cluster",
    "sparkctl.cli.qa",
    "sparkctl.cli.stage",
    "sparkctl.cli.serve",
]


_registered: set[str] = set()


def _register() -> None:
    # Once per module: main() runs many times in one test process.
    for name in _COMMAND_MODULES:
        if name not in _registered:
            importlib.import_module(name).register(app)
            _registered.add(name)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turn expected errors into exit codes."""
    _register()
    debug = os.environ.get("SPARKCTL_DEBUG") == "1"
    try:
        # Without standalone mode click returns typer.Exit's code instead of raising it.
        rc = app(args=argv, standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except SparkctlError as exc:
        if debug:
            raise
        ui.error_panel(exc.message, exc.hint, exc.details)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        ui.err_console.print("aborted")
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:
        ui.err_console.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # click usage errors and the unexpected
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(EXIT_USAGE)
        if isinstance(exc, click.exceptions.Exit):
            sys.exit(exc.exit_code)
        if debug:
            raise
        ui.error_panel(f"internal error: {type(exc).__name__}: {exc}", "re-run with SPARKCTL_DEBUG=1 for a traceback")
        sys.exit(EXIT_FAILED)
    sys.exit(0)
