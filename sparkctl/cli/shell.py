"""How the command line meets the shell: lifecycle panels, their order, examples, value completion.

``sparkctl --help`` lists the commands in the order a site meets them — inventory, provision,
stage, serve, observe, qualify/bench, lab — one panel each (``PANELS``). A command joins a panel
with ``rich_help_panel=`` where it is registered and carries one example in its epilog
(``example(...)``). Within a panel, commands keep the order their modules register them (typer
adds command groups such as ``switch`` after the plain commands).

Completion (``sparkctl --install-completion``) offers node names, ranks, profile names and
provision tags. Node names and ranks come from the chosen inventory when it loads within
``LOAD_BUDGET_S`` (``$SPARKCTL_COMPLETION_BUDGET_S`` on a slow or busy machine); otherwise
completion offers nothing rather than an error.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

import typer
from rich.markup import escape
from typer import _click as click
from typer.core import TyperGroup

from sparkctl.ansible.plan import PROVISION_TAGS
from sparkctl.errors import EXIT_USAGE, SparkctlError
from sparkctl.model import Cluster, load_inventory
from sparkctl.profiles import list_profiles

INVENTORY = "Inventory"
PROVISION = "Provision"
STAGE = "Stage"
SERVE = "Serve"
OBSERVE = "Observe"
QUALIFY = "Qualify and bench"
LAB = "Lab"
PANELS = (INVENTORY, PROVISION, STAGE, SERVE, OBSERVE, QUALIFY, LAB)

INVENTORY_ENV = "SPARKCTL_INVENTORY"
# Completion runs on every <TAB>: an inventory that takes longer than this to load offers nothing.
LOAD_BUDGET_S = 1.5
BUDGET_ENV = "SPARKCTL_COMPLETION_BUDGET_S"


def load_budget_s() -> float:
    """Seconds completion waits for the inventory: $SPARKCTL_COMPLETION_BUDGET_S, else LOAD_BUDGET_S
    (a value that is not a number >= 0 is ignored: completion never prints an error)."""
    raw = os.environ.get(BUDGET_ENV, "")
    try:
        value = float(raw)
    except ValueError:
        return LOAD_BUDGET_S
    return value if value >= 0 else LOAD_BUDGET_S


def example(*commands: str) -> str:
    """The epilog of a command: its example invocation(s)."""
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


class LifecycleGroup(OrderedGroup):
    """The top-level group: commands by lifecycle panel (``PANELS``), then in registration order."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        quiet_flags(self, ctx)  # before parsing: --help prints while the options are parsed
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        names = super().list_commands(ctx)

        def rank(name: str) -> int:
            panel = getattr(self.commands[name], "rich_help_panel", None)
            return PANELS.index(panel) if panel in PANELS else len(PANELS)

        return sorted(names, key=rank)  # stable: the order within a panel stays


# --- which inventory ---------------------------------------------------------------------------


def site_inventory() -> Path:
    """The only site under ./inventory (``example`` aside); InputError naming the choices otherwise."""
    root = Path("inventory")
    found = root.iterdir() if root.is_dir() else iter(())
    sites = sorted(p for p in found if p.is_dir() and p.name != "example")
    if len(sites) == 1:
        return sites[0]
    names = ", ".join(p.name for p in sites) or "none"
    raise SparkctlError(
        f"no inventory chosen (sites under ./inventory: {names})",
        hint=f"pass --inventory DIR (or -i), or set {INVENTORY_ENV}",
        exit_code=EXIT_USAGE,
    )


def _inventory_of(ctx: typer.Context) -> Path | None:
    """The inventory the command line being completed names (its own -i, the global one, the env)."""
    node: click.Context | None = ctx
    while node is not None:
        value = node.params.get("inventory")
        if value:
            return Path(value)
        node = node.parent
    if os.environ.get(INVENTORY_ENV):
        return Path(os.environ[INVENTORY_ENV])
    try:
        return site_inventory()
    except SparkctlError:
        return None


def _cluster(ctx: typer.Context) -> Cluster | None:
    """The cluster, when it loads cleanly within the budget; None otherwise (never raises)."""
    inventory = _inventory_of(ctx)
    if inventory is None or not inventory.is_dir():
        return None
    loaded: list[Cluster] = []

    def load() -> None:
        try:
            loaded.append(load_inventory(inventory))
        except Exception:  # completion says nothing rather than print an error into the shell
            return

    worker = threading.Thread(target=load, name="sparkctl-complete", daemon=True)
    worker.start()
    worker.join(load_budget_s())
    return loaded[0] if loaded else None


# --- completion of values ----------------------------------------------------------------------


def _matching(candidates: Iterable[tuple[str, str]], incomplete: str) -> list[tuple[str, str]]:
    return [(value, why) for value, why in candidates if value.startswith(incomplete)]


def _listed(candidates: Iterable[tuple[str, str]], incomplete: str) -> list[tuple[str, str]]:
    """Completion of a comma-separated list: complete the last item, never repeat a chosen one."""
    head, sep, last = incomplete.rpartition(",")
    chosen = set(head.split(",")) if sep else set()
    prefix = head + sep
    return [(prefix + value, why) for value, why in candidates
            if value.startswith(last) and value not in chosen]


def _nodes(ctx: typer.Context) -> list[tuple[str, str]]:
    cluster = _cluster(ctx)
    if cluster is None:
        return []
    return [(n.name, f"rank {n.rank}") for n in cluster.nodes]


def _hosts(ctx: typer.Context) -> list[tuple[str, str]]:
    cluster = _cluster(ctx)
    if cluster is None:
        return []
    hosts = [(n.name, f"rank {n.rank}") for n in cluster.nodes]
    if cluster.switch is not None:
        hosts.append((cluster.switch.name, f"switch ({cluster.switch.type})"))
    return hosts


def complete_node(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """A node name of the inventory."""
    return _matching(_nodes(ctx), incomplete)


def complete_hosts(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """Comma-separated host names of the inventory (nodes and the switch), as ``--limit`` takes them."""
    return _listed(_hosts(ctx), incomplete)


def complete_rank(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """A rank of the inventory, with its node's name."""
    cluster = _cluster(ctx)
    ranks = [] if cluster is None else [(str(n.rank), n.name) for n in cluster.nodes]
    return _matching(ranks, incomplete)


def complete_profile(incomplete: str) -> list[str]:
    """A shipped serving profile."""
    return [name for name in list_profiles() if name.startswith(incomplete)]


def complete_tags(incomplete: str) -> list[tuple[str, str]]:
    """Comma-separated tags of playbooks/provision.yml, in the order the roles run."""
    return _listed(((t, "provision part") for t in PROVISION_TAGS), incomplete)
