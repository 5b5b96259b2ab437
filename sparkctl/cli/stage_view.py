"""`stage` on a terminal: one line per node (kit, image, checkpoint, Engram shards, what moved and what
was packed) within 80 columns for four `spark-N` nodes, then what the table has no room for: each
kind of copy's rate across the nodes, and the notes a node needs (a build waiting for its image, a
kit staged beside another one that is current)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.markup import escape
from rich.text import Text

from sparkctl import ui
from sparkctl.nodeside.progress import human_bytes

if TYPE_CHECKING:
    from sparkctl.model import Cluster

# Short IDs: the kit's commit and the image's ID, as many characters as `git log --oneline` gives
# (the whole ones are in --json).
SHORT = 8


def _kit_cell(kit: dict[str, Any] | None) -> str:
    if not kit:
        return ui.SKIP
    version = str(kit.get("version") or "?")
    short = version[:SHORT] if not version.startswith("tree-") else version
    if kit.get("verified") and (kit.get("build") or {}).get("pending"):
        return f"{ui.SKIP} {short}"  # verified, built once the image is there (a note says so)
    if kit.get("verified"):
        return f"{ui.OK} {short}"
    return f"{ui.FAIL} {short}"


def _image_cell(image: dict[str, Any] | None) -> str:
    """The image ID (short); a dash when the image was not staged."""
    if not image:
        return ui.SKIP
    ident = str(image.get("id") or "")
    if not ident:
        return f"{ui.FAIL} none"
    return f"{ui.OK} {ident.split(':')[-1][:SHORT]}"


def _flag(section: dict[str, Any] | None) -> str:
    if not section:
        return ui.SKIP
    if section.get("verified"):
        return ui.OK
    if section.get("present"):
        return ui.FAIL + " unverified"
    return ui.FAIL + " missing"


def _moved(s: dict[str, Any]) -> int | None:
    """Bytes this node received (kit, image, checkpoint); None when none of them was copied."""
    parts = [((s.get("kit") or {}).get("transfer") or {}).get("bytes_moved"),
             (s.get("image") or {}).get("bytes_moved"), (s.get("transfer") or {}).get("bytes_moved")]
    found = [int(p or 0) for p in parts if p is not None]
    return sum(found) if found else None


def _rates(summaries: dict[str, dict[str, Any]]) -> list[Text]:
    """Each kind of copy's rate across the nodes that copied something (lowest–highest), dimmed: one
    line, or none when nothing was copied."""
    kinds: dict[str, list[float]] = {"checkpoint": [], "image": [], "packing": []}
    for s in summaries.values():
        for kind, section, amount in (("checkpoint", s.get("transfer"), "bytes_moved"),
                                      ("image", s.get("image"), "bytes_moved"),
                                      ("packing", s.get("pack"), "bytes_written")):
            if section and section.get(amount) and section.get("rate_mib_s"):
                kinds[kind].append(float(section["rate_mib_s"]))
    parts = []
    for kind, rates in kinds.items():
        if rates:
            low, high = min(rates), max(rates)
            span = f"{low:.0f}" if round(low) == round(high) else f"{low:.0f}–{high:.0f}"
            parts.append(f"{kind} {span}")
    return [Text(f"MiB/s per node: {', '.join(parts)}", style="dim")] if parts else []


def _notes(cluster: Cluster, summaries: dict[str, dict[str, Any]]) -> list[Text]:
    pending, elsewhere = [], []
    for node in cluster.nodes:
        kit = summaries.get(node.name, {}).get("kit") or {}
        if kit.get("verified") and (kit.get("build") or {}).get("pending"):
            pending.append(node.name)
        elif kit.get("verified") and kit.get("current") != kit.get("version"):
            elsewhere.append(f"{node.name}: current {str(kit.get('current') or 'none')[:SHORT]}")
    notes = []
    if pending:
        who = "every node" if len(pending) == len(cluster.nodes) > 1 else ", ".join(pending)
        notes.append(f"kit verified; its build waits on {who} for the image (sparkctl stage image)")
    if elsewhere:
        notes.append(f"kit staged but not current ({'; '.join(elsewhere)})")
    return [Text(note) for note in notes]


def summary_table(
    cluster: Cluster, summaries: dict[str, dict[str, Any]], verify_only: bool, what: str = "all"
) -> Group:
    """One row per node, then the rates and notes; a node's error goes under the kit when the kit
    was staged and did not report (its play failed there), else under the image or checkpoint."""
    kit_staged = what == "kit" or (what == "all" and getattr(cluster, "kit", None) is not None)
    title = "stage --verify-only" if verify_only else "stage"
    columns = ("node", "rank", "kit", "image", "weights", "engram", "moved", "packed")
    table = ui.compact_table(f"{title}: {cluster.name}", columns, wrap=columns)  # an error's words wrap
    for node in cluster.nodes:
        s = summaries.get(node.name, {})
        moved = _moved(s)
        packed = ""
        if s.get("pack"):
            written = s["pack"].get("bytes_written")
            packed = human_bytes(written, short=True) if written else "kept"
        eng = s.get("engram")
        eng_text = _flag(eng)
        if eng and eng.get("files") and eng.get("verified"):
            eng_text += f" {len(eng['files'])}×r{s.get('rank')}of{s.get('tp')}"
        row = [
            node.name, str(node.rank), _kit_cell(s.get("kit")), _image_cell(s.get("image")),
            _flag(s.get("weights")), eng_text, "" if moved is None else human_bytes(moved, short=True),
            packed,
        ]
        if s.get("error"):
            # The cause in a few words (the whole line is the error's, printed once below the table).
            image_staged = what == "image" or (what == "all" and cluster.runtime.kind == "container")
            cell = f"{ui.FAIL} {escape(str(s.get('cause') or s['error']))}"
            if kit_staged and not s.get("kit"):
                row[2] = cell
            elif image_staged and not s.get("image"):
                row[3] = cell
            else:
                row[4] = cell
        table.add_row(*row)
    return Group(table, *_rates(summaries), *_notes(cluster, summaries))
