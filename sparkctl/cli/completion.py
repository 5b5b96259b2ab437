"""Completion of values (``sparkctl --install-completion``): node names, ranks, profile names and
provision tags.

Node names and ranks come from the chosen inventory (its own -i, the global one,
``$SPARKCTL_INVENTORY``, else the only site under ./inventory) when it loads within
``LOAD_BUDGET_S`` (``$SPARKCTL_COMPLETION_BUDGET_S`` on a slow or busy machine); otherwise completion
offers nothing rather than an error. A <TAB> on an unchanged inventory that loaded cleanly before
reads its node names from the inventory cache (``sparkctl.model.cache``), without importing the
model or ansible-core.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from typer import _click as click

from sparkctl.cli.shell import INVENTORY_ENV, site_inventory
from sparkctl.errors import SparkctlError

if TYPE_CHECKING:
    from sparkctl.model import Cluster

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


def load_inventory(inventory: Path) -> Cluster:
    """The model's loader, imported when completion first needs it (never for a command name)."""
    from sparkctl.model import load_inventory as load

    return load(inventory)


def _names(ctx: typer.Context) -> tuple[list[tuple[str, int]], tuple[str, str] | None] | None:
    """The nodes (name, rank) and the switch (name, type) of the inventory: from the inventory
    cache when its files are unchanged since it last loaded cleanly, else from loading it within
    the budget; None when it does not load (never raises)."""
    inventory = _inventory_of(ctx)
    if inventory is None or not inventory.is_dir():
        return None
    from sparkctl.model import cache

    kept = cache.summary(inventory)
    if kept is not None:
        try:
            nodes = [(str(name), int(rank)) for name, rank in kept["nodes"]]
            switch = kept.get("switch")
            return nodes, (None if switch is None else (str(switch[0]), str(switch[1])))
        except (KeyError, TypeError, ValueError):
            pass
    loaded: list[Cluster] = []

    def load() -> None:
        try:
            loaded.append(load_inventory(inventory))
        except Exception:  # completion says nothing rather than print an error into the shell
            return

    worker = threading.Thread(target=load, name="sparkctl-complete", daemon=True)
    worker.start()
    worker.join(load_budget_s())
    if not loaded:
        return None
    cluster = loaded[0]
    switch_of = None if cluster.switch is None else (cluster.switch.name, str(cluster.switch.type))
    return [(n.name, n.rank) for n in cluster.nodes], switch_of


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
    names = _names(ctx)
    if names is None:
        return []
    return [(name, f"rank {rank}") for name, rank in names[0]]


def _hosts(ctx: typer.Context) -> list[tuple[str, str]]:
    names = _names(ctx)
    if names is None:
        return []
    hosts = [(name, f"rank {rank}") for name, rank in names[0]]
    if names[1] is not None:
        hosts.append((names[1][0], f"switch ({names[1][1]})"))
    return hosts


def complete_node(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """A node name of the inventory."""
    return _matching(_nodes(ctx), incomplete)


def complete_hosts(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """Comma-separated host names of the inventory (nodes and the switch), as ``--limit`` takes them."""
    return _listed(_hosts(ctx), incomplete)


def complete_rank(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """A rank of the inventory, with its node's name."""
    names = _names(ctx)
    ranks = [] if names is None else [(str(rank), name) for name, rank in names[0]]
    return _matching(ranks, incomplete)


def complete_profile(incomplete: str) -> list[str]:
    """A shipped serving profile."""
    from sparkctl.profiles import list_profiles

    return [name for name in list_profiles() if name.startswith(incomplete)]


def complete_tags(incomplete: str) -> list[tuple[str, str]]:
    """Comma-separated tags of playbooks/provision.yml, in the order the roles run."""
    from sparkctl.ansible.plan import PROVISION_TAGS

    return _listed(((t, "provision part") for t in PROVISION_TAGS), incomplete)
