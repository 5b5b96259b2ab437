"""The `sparkctl` command line: global options, sub-commands, and the one place errors become exit codes.

Each noun lives in its own module (cluster, switch, stage, serve, lab, qa); each command there only
loads the model, plans, runs and renders. Register a module by adding it to ``_COMMAND_MODULES``; a
command names its lifecycle panel and carries an example where it registers (see ``shell``).

A run imports only the module of the command it runs: the top level knows every command's name,
panel and one-line help from the registry's index (``registry``), so ``--version``, ``--help`` and
completion of a command name import no command module, and ``sparkctl status`` none but its own.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from typer import _click as click
from typer._click.exceptions import ClickException
from typer.main import get_command

from sparkctl import __version__
from sparkctl.cli.shell import INVENTORY_ENV, LifecycleGroup, site_inventory
from sparkctl.errors import EXIT_FAILED, EXIT_MEANINGS, EXIT_USAGE, SparkctlError


def _as_written(text: str) -> str:
    """``text`` shown as written in rich markup: every ``[`` escaped (rich.markup.escape escapes the
    tag-like ones only, and importing it costs every start, ``--version`` and <TAB> included)."""
    return text.replace("[", "\\[")


app = typer.Typer(
    name="sparkctl",
    help="Provision, stage and serve DeepSeek-V4.1-Flash with SGLang across four DGX Sparks.",
    epilog=(
        "A site's first run: [cyan]sparkctl validate[/cyan] → [cyan]provision[/cyan] → "
        "[cyan]stage[/cyan] → [cyan]up[/cyan] → [cyan]status[/cyan]. "
        "[cyan]sparkctl COMMAND --help[/cyan] shows an example of each command.\n\n"
        "[bold]Exit codes[/bold]\n\n"
        + "\n\n".join(f"  {code}  {_as_written(meaning)}" for code, meaning in EXIT_MEANINGS.items())
    ),
    cls=LifecycleGroup,
    no_args_is_help=True,
    add_completion=True,
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
        """The inventory to use: --inventory (or $SPARKCTL_INVENTORY), then ./inventory/<only site>."""
        return self.inventory if self.inventory is not None else site_inventory()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sparkctl {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory",
            "-i",
            envvar=INVENTORY_ENV,
            help="Inventory directory (default: ./inventory/<only site>).",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="More detail.")] = False,
    vault_password_file: Annotated[
        Path | None,
        typer.Option(
            "--vault-password-file",
            envvar="ANSIBLE_VAULT_PASSWORD_FILE",
            help="The inventory's ansible-vault password file (or a script that prints it).",
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    if vault_password_file is not None:  # read by the inventory loader and by ansible-playbook
        os.environ["ANSIBLE_VAULT_PASSWORD_FILE"] = str(vault_password_file.expanduser().absolute())
    ctx.obj = State(inventory=inventory, json=json_out, verbose=verbose)


# Modules that add commands to ``app``; each exposes ``register(app)``.
# Within a help panel, commands are listed in registration order, plain commands before command
# groups (typer's rule): Provision reads preflight, provision, switch, check.
_COMMAND_MODULES = [
    "sparkctl.cli.bootstrap",
    "sparkctl.cli.init_cmd",
    "sparkctl.cli.cluster",
    "sparkctl.cli.preflight",
    "sparkctl.cli.switch",
    "sparkctl.cli.provision",
    "sparkctl.cli.stage",
    "sparkctl.cli.status",
    "sparkctl.cli.serve",
    "sparkctl.cli.watch",
    "sparkctl.cli.qa",
    "sparkctl.cli.monitoring",
    "sparkctl.cli.lifecycle",
    "sparkctl.cli.ansible_cmd",
]


# Commands from other installed distributions (the local lab registers `sparkctl lab` this way), so
# the product never imports them: entry points in the group below, each a ``register(app)``.
PLUGIN_GROUP = "sparkctl.commands"

_registered: set[str] = set()


def _register() -> None:
    # Once per module: main() runs many times in one test process.
    for name in _COMMAND_MODULES:
        if name not in _registered:
            importlib.import_module(name).register(app)
            _registered.add(name)
    from importlib.metadata import entry_points

    for ep in entry_points(group=PLUGIN_GROUP):
        if ep.value not in _registered:
            ep.load()(app)
            _registered.add(ep.value)


def _all_registered() -> bool:
    return set(_COMMAND_MODULES) <= _registered


def _group() -> click.Command:
    """``app`` as a click group. Commands not registered in this process (all of them, in a plain
    run) come from the registry's index, each built from its own module when it is asked for."""
    group = get_command(app)
    if isinstance(group, LifecycleGroup) and not _all_registered():
        group.index_from = _index
    return group


def _index() -> Any:
    from sparkctl.cli.registry import Index
    from sparkctl.model.cache import state_dir

    try:
        state: Path | None = state_dir()
    except (RuntimeError, KeyError):  # no home directory: the index lives in memory for this run
        state = None
    return Index(_COMMAND_MODULES, PLUGIN_GROUP, app, state)


def _subcommand(cmd: click.Command, name: str) -> click.Command | None:
    if isinstance(cmd, LifecycleGroup):
        return cmd.get_command(click.Context(cmd), name)
    return getattr(cmd, "commands", {}).get(name)


_GLOBAL_FLAGS = {
    "--json": False, "--verbose": False, "-v": False, "--inventory": True, "-i": True,
    "--vault-password-file": True,
}


def _hoist_globals(argv: list[str], cmd: click.Command | None = None) -> list[str]:
    """Let global options also follow the command (`sparkctl validate -i DIR --json`).

    An option that the chosen command declares itself stays where it is; any other global option
    found after the command words moves in front of them.
    """
    cmd = _group() if cmd is None else cmd
    words: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok in _GLOBAL_FLAGS:
            i += 2 if _GLOBAL_FLAGS[tok] else 1
            continue
        sub = _subcommand(cmd, tok) if not tok.startswith("-") else None
        if sub is None:
            break
        words.append(tok)
        cmd = sub
        i += 1
    if not words:
        return argv
    own = {opt for p in getattr(cmd, "params", []) for opt in (*p.opts, *p.secondary_opts)}
    front: list[str] = []
    rest: list[str] = []
    j = 0
    while j < len(argv):
        tok = argv[j]
        name = tok.split("=", 1)[0]
        if name in _GLOBAL_FLAGS and name not in own and tok != "--":
            takes = _GLOBAL_FLAGS[name] and "=" not in tok
            front.extend(argv[j : j + (2 if takes else 1)])
            j += 2 if takes else 1
            continue
        if tok == "--":
            rest.extend(argv[j:])
            break
        rest.append(tok)
        j += 1
    return front + rest


def _ui() -> Any:
    """sparkctl.ui (rich's console), imported where an error is printed: ``--version`` and a
    completion never need it."""
    from sparkctl import ui

    return ui


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turn expected errors into exit codes."""
    try:
        _main(argv)
    finally:
        if argv is None:
            # The process ends here. Its objects need no last collection: the interpreter's own
            # collections while it tears down walked every object the libraries left (pydantic,
            # openai, fabric) for ~0.2 s, 7 % of `up`'s own time on the lab. Frozen, they are skipped
            # (exit handlers and the joins of running threads still run).
            gc.freeze()


def _main(argv: list[str] | None) -> None:
    group = _group()
    debug = os.environ.get("SPARKCTL_DEBUG") == "1"
    args = _hoist_globals(list(sys.argv[1:] if argv is None else argv), group)
    as_json = "--json" in args[: args.index("--")] if "--" in args else "--json" in args
    if "sparkctl.ui" in sys.modules:  # an earlier run in this process (tests): its JSON is not ours
        setattr(sys.modules["sparkctl.ui"], "json_written", False)  # noqa: B010
    try:
        # Without standalone mode click returns typer.Exit's code instead of raising it.
        # One program name however it was started (console script, `python -m sparkctl`): usage lines
        # and the completion protocol's variable (_SPARKCTL_COMPLETE) follow it.
        rc = group(args=args, prog_name="sparkctl", standalone_mode=False)
        if isinstance(rc, int) and rc:
            if as_json:
                _ui().json_error(rc, f"exited {rc}; stderr says why")
            sys.exit(rc)
    except SparkctlError as exc:
        if debug:
            raise
        _ui().error_panel(exc.message, exc.hint, exc.details)
        if as_json:
            _ui().json_error(exc.exit_code, exc.message, exc.hint, exc.details, getattr(exc, "nodes", None))
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        if as_json and exc.exit_code:
            _ui().json_error(exc.exit_code, f"exited {exc.exit_code}; stderr says why")
        sys.exit(exc.exit_code)
    except typer.Abort:
        _ui().err_console.print("aborted")
        if as_json:
            _ui().json_error(EXIT_FAILED, "aborted")
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:
        _ui().err_console.print("interrupted")
        if as_json:
            _ui().json_error(130, "interrupted")
        sys.exit(130)
    except ClickException as exc:  # usage errors: bad option, missing argument
        exc.show()
        if as_json:
            _ui().json_error(EXIT_USAGE, exc.format_message(), "see --help")
        sys.exit(EXIT_USAGE)
    except Exception as exc:  # the unexpected
        if debug:
            raise
        message = f"internal error: {type(exc).__name__}: {exc}"
        _ui().error_panel(message, "re-run with SPARKCTL_DEBUG=1 for a traceback")
        if as_json:
            _ui().json_error(EXIT_FAILED, message, "re-run with SPARKCTL_DEBUG=1 for a traceback")
        sys.exit(EXIT_FAILED)
    sys.exit(0)
