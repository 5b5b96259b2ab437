"""What the roles' lookup plugins ask of sparkctl on the controller, answered once.

spark_rank's ``sparkctl_rank_secrets`` (the rank's secrets config with its values) and spark_router's
``sparkctl_router_key`` (the site's API key) both load the inventory with the model, resolve the
secrets they need through ``SecretRef.resolve`` (the one way a secret's value is read) and, called
with ``check=true``, answer with the problems instead (each secret's name and why, never a value).
Both are one plugin (``plugins/lookup/sparkctl_inventory_lookup.py``, linked into each role's
``lookup_plugins/`` under the name its tasks call): it only finds this module and hands it the name
it was called by and its terms; ``RESOLVERS`` picks the answer, ``answer`` does the rest, and every
refusal is a ``Refused`` (the plugin raises it as Ansible's error, its message unchanged).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.model import load_inventory
from sparkctl.render import rank

if TYPE_CHECKING:
    from sparkctl.model import Cluster

# A lookup's answer from the inventory directory: (the value, the problems that keep it from being had).
Resolver = Callable[[str], tuple[str | None, list[str]]]


class Refused(Exception):
    """The lookup cannot answer: the inventory does not load, or a secret cannot be resolved."""


def problem(exc: BaseException) -> str:
    """A sparkctl error as one line: its message, and its hint in parentheses."""
    hint = getattr(exc, "hint", None)
    return str(getattr(exc, "message", exc)) + (f" ({hint})" if hint else "")


def inventory(path: str) -> Cluster:
    try:
        return load_inventory(Path(path))
    except SparkctlError as exc:
        raise Refused(f"sparkctl inventory {path}: {problem(exc)}") from None


def resolve(cluster: Cluster, names: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """The values of the secrets ``names`` that resolve, and one problem for each that does not."""
    values: dict[str, str] = {}
    problems: list[str] = []
    for name in names:
        ref = cluster.secrets[name]
        try:
            values[name] = ref.resolve()
        except SparkctlError as exc:
            problems.append(f"secret {name} ({ref.describe()}): {problem(exc)}")
    return values, problems


def rank_secrets(path: str) -> tuple[str | None, list[str]]:
    """The rank's secrets config (``render.rank.rank_secrets_text``) with every value resolved."""
    cluster = inventory(path)
    values, problems = resolve(cluster, rank.rank_secret_names(cluster))
    return (None if problems else rank.rank_secrets_text(cluster, values)), problems


def router_key(path: str) -> tuple[str | None, list[str]]:
    """The site's API key (``sparkctl_secrets.api_key``), which the router requires of its clients."""
    cluster = inventory(path)
    if "api_key" not in cluster.secrets:
        return None, ["sparkctl_secrets.api_key is not set (the router has no key to require)"]
    values, problems = resolve(cluster, ["api_key"])
    return values.get("api_key"), problems


# The lookups the roles call (plugins/lookup/sparkctl_inventory_lookup.py, linked into each role's
# lookup_plugins/ under these names) and what each answers.
RESOLVERS: dict[str, Resolver] = {"sparkctl_rank_secrets": rank_secrets, "sparkctl_router_key": router_key}


def answer(name: str, terms: Sequence[object], check: bool, resolver: Resolver) -> list[str]:
    """What lookup ``name`` returns for ``terms`` (the inventory directory alone): with ``check`` the
    problems (none: all resolves), else the one value; Refused when it cannot be had."""
    if len(terms) != 1:
        raise Refused(f"{name}: give the inventory directory, and nothing else")
    value, problems = resolver(str(terms[0]))
    if check:
        return problems
    if problems or value is None:
        raise Refused("; ".join(problems))
    return [value]


__all__ = ["RESOLVERS", "Refused", "answer", "inventory", "problem", "rank_secrets", "resolve", "router_key"]
