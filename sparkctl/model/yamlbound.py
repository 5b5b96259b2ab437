"""A bound on YAML alias expansion, checked before Ansible reads an inventory file.

YAML anchors and aliases (``&a`` … ``*a``) let a few lines stand for billions of values (the
"billion laughs": nine lists of nine aliases to the list before). The parser shares the aliased
node, so reading such a file is quick; walking its data is not, and everything after the read walks
it (Ansible's variable merging, sparkctl's origin index and validation). :func:`alias_problem`
composes the text with PyYAML (node graph only, no values built, every alias still one shared
node) and counts, once per node, how many values the aliases make the document stand for. Past
:data:`MAX_ALIAS_VALUES` (or an alias inside the node it names) the file is refused before anything
walks it.
"""

from __future__ import annotations

from collections.abc import Iterator

import yaml

from sparkctl import yamltext

# Values the aliases of one file may add beyond the nodes written in it. An inventory uses a few
# anchors for repeated blocks (hundreds of values); a billion-laughs file asks for 9^9.
MAX_ALIAS_VALUES = 100_000

# libyaml's parser when PyYAML was built with it (the composer is the same either way)
_Loader = yamltext.SafeLoader


_SELF = "line {}: an alias (*name) inside the node its anchor names"


class _Bound(Exception):
    """Stops the count: the reason the file is refused."""


class _TooMany(_Bound):
    """Stops the count: past the limit."""


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        yield from node.value
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value


def _expanded(root: yaml.Node, limit: int) -> int:
    """How many values ``root`` stands for with every alias written out (at most ``limit`` + 1:
    counting stops there). Each node is counted once (memoised), so this costs the composed size."""
    sizes: dict[int, int] = {}
    active: set[int] = set()
    # Iterative post-order walk: (node, children visited?)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            total = 1
            for child in _children(node):
                total += sizes[id(child)]
                if total > limit:
                    raise _TooMany
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in active:
            raise _Bound(_SELF.format(node.start_mark.line + 1))
        active.add(key)
        stack.append((node, True))
        for child in _children(node):
            cid = id(child)
            if cid in active:
                raise _Bound(_SELF.format(child.start_mark.line + 1))
            if cid not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def alias_problem(text: str | bytes, limit: int = MAX_ALIAS_VALUES) -> str | None:
    """Why this YAML text must not be read further (an alias bomb, a self-referring alias), or None.

    Text that does not compose is None here: Ansible's own reader reports it, with its message."""
    try:
        documents = list(yaml.compose_all(text, Loader=_Loader))
    except (yaml.YAMLError, RecursionError):
        return None
    written: set[int] = set()
    for doc in documents:
        stack = [doc]
        while stack:
            node = stack.pop()
            if id(node) not in written:
                written.add(id(node))
                stack.extend(_children(node))
    budget = limit + len(written)
    total = 0
    try:
        for doc in documents:
            if doc is not None:
                total += _expanded(doc, budget - total)
    except _TooMany:
        return f"its aliases (*name) stand for more than {limit:,} values beyond those written (alias bomb)"
    except _Bound as exc:
        return str(exc)
    return None


__all__ = ["MAX_ALIAS_VALUES", "alias_problem"]
