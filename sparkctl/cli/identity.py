"""The node identity table `preflight` and `upgrade` print: one row per field, one column per node."""

from __future__ import annotations

from collections import Counter

from rich.table import Table
from rich.text import Text

from sparkctl import ui
from sparkctl.ansible.outcome import mismatched
from sparkctl.model import Cluster


def identity_table(cluster: Cluster, ids: dict[str, dict[str, str]], unreachable: dict[str, str]) -> Table:
    """One row per identity field, one column per node (rank order); a value that differs from the
    most common one is red, and so is the mark of its row."""
    fields = list(dict.fromkeys(f for ident in ids.values() for f in ident))
    differ = set(mismatched(ids))
    table = Table(title=f"node identity · {cluster.name}", title_justify="left")
    table.add_column("")
    table.add_column("", style="bold", no_wrap=True)
    for node in cluster.nodes:
        table.add_column(node.name, overflow="fold")
    table.add_row("", "rank", *(str(node.rank) for node in cluster.nodes))
    answered = [Text("yes") if node.name in ids else
                Text(f"no: {unreachable.get(node.name, 'no answer')}", style="red") for node in cluster.nodes]
    table.add_row(ui.OK if len(ids) == len(cluster.nodes) else ui.FAIL, "answered", *answered)
    for f in fields:
        usual = Counter(ident.get(f) for ident in ids.values()).most_common(1)[0][0]
        cells = []
        for node in cluster.nodes:
            value = ids.get(node.name, {}).get(f)
            odd = f in differ and value is not None and value != usual
            cells.append(Text("–" if value is None else value, style="bold red" if odd else ""))
        table.add_row(ui.FAIL if f in differ else ui.OK, f.replace("_", " "), *cells)
    return table
