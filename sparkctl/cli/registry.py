"""Which module gives each top-level command, known without importing the command modules.

``sparkctl --version``, ``sparkctl --help`` and a <TAB> on the first word need only the commands'
names, panels and one-line help; running ``sparkctl status`` needs ``status`` and what it imports,
not ``provision``'s Ansible runner or ``qualify``'s clients. The index holds, for every top-level
command, the module (or the plugin's entry point) that registers it and what the top-level help
and completion show of it (``Entry``). It is built by importing every module of
``_COMMAND_MODULES`` and every plugin of the entry-point group once, and kept in the state
directory (``index-cli.json``) under a key made of sparkctl's version, the size and modification
time of every ``.py`` file of ``sparkctl/cli/`` and of each plugin's package directory, and the
plugins installed: any change to one of them builds it again. Where the state directory cannot be
written, the index is built in memory for that run (the old, slower start).

A command itself is built from its own module only (``load``), into a Typer app with the main
app's settings, so that its help, options and completion are exactly what registering every module
gives (a CLI test compares every command's help both ways).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import typer
from typer import _click as click
from typer.core import TyperCommand, TyperGroup

from sparkctl import __version__
from sparkctl.cli.helptext import flowing_help

INDEX_FILE = "index-cli.json"
FORMAT = 1
_CLI_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Entry:
    """What the top level knows of one command without importing its module."""

    name: str
    source: str  # a module of _COMMAND_MODULES, or a plugin's "module:function"
    help: str | None
    short_help: str | None
    panel: str | None
    hidden: bool
    deprecated: bool
    group: bool  # a command group (typer lists them after the plain commands)

    def stub(self) -> click.Command:
        """A command that shows in help and completion as the real one does, and does nothing."""
        return TyperCommand(self.name, help=self.help, short_help=self.short_help, hidden=self.hidden,
                            deprecated=self.deprecated, rich_help_panel=self.panel)


# --- building commands from one module ---------------------------------------------------------


def _register_function(source: str) -> Callable[[typer.Typer], None]:
    module, _, attr = source.partition(":")
    return getattr(importlib.import_module(module), attr or "register")  # type: ignore[no-any-return]


def load(source: str, settings: typer.Typer) -> dict[str, click.Command]:
    """The click commands ``source`` registers, built as ``settings`` (the main app) builds its own."""
    temp = typer.Typer(
        rich_markup_mode=settings.rich_markup_mode,
        pretty_exceptions_short=settings.pretty_exceptions_short,
        suggest_commands=settings.suggest_commands,
        add_completion=False,
    )
    temp.callback()(_nothing)
    _register_function(source)(temp)
    group = typer.main.get_command(temp)
    assert isinstance(group, TyperGroup)
    flowing_help(group)
    return dict(group.commands)


def _nothing() -> None:
    """A callback, so that a module with one command still builds as a group."""


def entries_of(source: str, commands: dict[str, click.Command]) -> list[Entry]:
    return [
        Entry(name=name, source=source, help=cmd.help, short_help=cmd.short_help,
              panel=getattr(cmd, "rich_help_panel", None), hidden=bool(cmd.hidden),
              deprecated=bool(cmd.deprecated), group=isinstance(cmd, TyperGroup))
        for name, cmd in commands.items()
    ]


def in_typer_order(entries: Iterable[Entry]) -> list[Entry]:
    """Typer adds every plain command before every group, each in registration order."""
    listed = list(entries)
    return [e for e in listed if not e.group] + [e for e in listed if e.group]


# --- the index -----------------------------------------------------------------------------------


def plugin_sources(group: str) -> list[str]:
    from importlib.metadata import entry_points

    return [ep.value for ep in entry_points(group=group)]


def _package_dir(module: str) -> Path | None:
    """The directory of ``module``'s file, found without importing anything."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    base = Path(spec.origin).parent
    for i, part in enumerate(rest):
        if not (base / part).is_dir():
            return base if i == len(rest) - 1 else None
        base = base / part
    return base


def _stats(directory: Path | None) -> list[tuple[str, int, int]]:
    if directory is None:
        return []
    out = []
    with os.scandir(directory) as found:
        for entry in found:
            if entry.name.endswith(".py") and entry.is_file():
                st = entry.stat()
                out.append((entry.name, st.st_mtime_ns, st.st_size))
    return sorted(out)


def index_key(sources: list[str]) -> str:
    """What the index depends on: sparkctl's version, the command modules' files, the plugins."""
    parts: list[Any] = [FORMAT, __version__, sys.version, sources, _stats(_CLI_DIR)]
    for source in sources:
        module = source.partition(":")[0]
        if not module.startswith("sparkctl.cli."):
            parts.append([module, _stats(_package_dir(module))])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


Built = dict[str, dict[str, click.Command]]  # source -> its commands by name


def build(sources: list[str], settings: typer.Typer) -> tuple[list[Entry], Built]:
    """Import every source: the index, and the commands built on the way (by source)."""
    built = {source: load(source, settings) for source in sources}
    entries = in_typer_order(e for source, cmds in built.items() for e in entries_of(source, cmds))
    return entries, built


def _read(path: Path, key: str) -> list[Entry] | None:
    try:
        doc = json.loads(path.read_text())
        if doc.get("key") != key:
            return None
        return [Entry(**e) for e in doc["commands"]]
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _write(path: Path, key: str, entries: list[Entry]) -> None:
    """Atomically, and never an error: an index that cannot be kept is built again next time."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp.write_text(json.dumps({"key": key, "commands": [asdict(e) for e in entries]}, indent=1))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


class Index:
    """The top-level commands, and each command's real click command once asked for."""

    def __init__(self, modules: list[str], plugin_group: str, settings: typer.Typer, state: Path | None):
        self._modules = modules
        self._plugin_group = plugin_group
        self._settings = settings
        self._state = state
        self._entries: dict[str, Entry] | None = None
        self._built: Built = {}

    def entries(self) -> dict[str, Entry]:
        if self._entries is None:
            sources = [*self._modules, *plugin_sources(self._plugin_group)]
            key = index_key(sources)
            path = None if self._state is None else self._state / INDEX_FILE
            found = None if path is None else _read(path, key)
            if found is None:
                found, self._built = build(sources, self._settings)
                if path is not None:
                    _write(path, key, found)
            self._entries = {e.name: e for e in found}
        return self._entries

    def command(self, name: str) -> click.Command | None:
        """The real command ``name``, its module imported (None: no such command)."""
        entry = self.entries().get(name)
        if entry is None:
            return None
        if entry.source not in self._built:
            self._built[entry.source] = load(entry.source, self._settings)
        return self._built[entry.source].get(name)
