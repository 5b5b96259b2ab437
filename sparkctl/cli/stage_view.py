"""`stage` on a terminal: one row per node (kit, image, checkpoint, Engram shards, what moved)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from sparkctl import ui

if TYPE_CHECKING:
    from sparkctl.model import Cluster


def _kit_cell(kit: dict[str, Any] | None) -> str:
    if not kit:
        return ui.SKIP
    version = str(kit.get("version") or "?")
    short = version[:12] if not version.startswith("tree-") else version
    if kit.get("verified") and (kit.get("build") or {}).get("pending"):
        # stage kit before stage image: the products are built in the image once it is staged
        return f"{ui.SKIP} {short} verified, build pending (stage image)"
    if kit.get("verified") and kit.get("current") == kit.get("version"):
        return f"{ui.OK} {short} verified"
    if kit.get("verified"):
        return f"{ui.OK} {short} verified (current: {kit.get('current') or 'none'})"
    return f"{ui.FAIL} {short} not verified"


def _image_cell(image: dict[str, Any] | None) -> str:
    """The image ID (short) and what this node received; a dash when the image was not staged."""
    if not image:
        return ui.SKIP
    ident = str(image.get("id") or "")
    if not ident:
        return f"{ui.FAIL} none"
    text = f"{ui.OK} {ident.split(':')[-1][:12]}"
    moved = int(image.get("bytes_moved") or 0)
    if moved:
        text += f" ({moved / (1 << 30):.2f} GiB @ {float(image.get('rate_mib_s') or 0):.0f} MiB/s)"
    elif "bytes_moved" in image:
        text += " (moved 0 B)"
    return text


def _flag(section: dict[str, Any] | None) -> str:
    if not section:
        return ui.SKIP
    if section.get("verified"):
        return ui.OK + " verified"
    if section.get("present"):
        return ui.FAIL + " present, not verified"
    return ui.FAIL + " missing"


def summary_table(
    cluster: Cluster, summaries: dict[str, dict[str, Any]], verify_only: bool, what: str = "all"
) -> Table:
    """One row per node; a node's error goes under the kit when the kit was staged and did not
    report (its play failed there), else under the checkpoint."""
    kit_staged = what == "kit" or (what == "all" and getattr(cluster, "kit", None) is not None)
    title = "stage --verify-only" if verify_only else "stage"
    table = Table(title=f"{title}: {cluster.name}", title_justify="left")
    for col in ("node", "rank", "kit", "image", "checkpoint", "engram shards", "moved", "packed"):
        table.add_column(col, overflow="fold")  # long text wraps at word boundaries, never cut
    for node in cluster.nodes:
        s = summaries.get(node.name, {})
        moved = ""
        if s.get("transfer"):
            t = s["transfer"]
            moved = (
                f"{(t.get('bytes_moved') or 0) / (1 << 30):.2f} GiB @ {t.get('rate_mib_s') or 0:.0f} MiB/s"
            )
        packed = ""
        if s.get("pack"):
            p = s["pack"]
            packed = (
                f"{(p.get('bytes_written') or 0) / (1 << 30):.2f} GiB @ {p.get('rate_mib_s') or 0:.0f} MiB/s"
                if p.get("bytes_written")
                else "kept"
            )
        eng = s.get("engram")
        eng_text = _flag(eng)
        if eng and eng.get("files"):
            eng_text += f" ({len(eng['files'])} × r{s.get('rank')}of{s.get('tp')})"
        kit = s.get("kit")
        if kit and kit.get("transfer") and kit["transfer"].get("bytes_moved"):
            kit_moved = f"kit {kit['transfer']['bytes_moved'] / (1 << 20):.1f} MiB"
            moved = f"{kit_moved} + {moved}" if moved else kit_moved
        row = [
            node.name, str(node.rank), _kit_cell(kit), _image_cell(s.get("image")),
            _flag(s.get("weights")), eng_text, moved, packed,
        ]
        if s.get("error"):
            # The cause in a few words (the whole line is the error's, printed once below the table).
            image_staged = what == "image" or (what == "all" and cluster.runtime.kind == "container")
            cell = f"{ui.FAIL} {escape(str(s.get('cause') or s['error']))}"
            if kit_staged and not kit:
                row[2] = cell
            elif image_staged and not s.get("image"):
                row[3] = cell
            else:
                row[4] = cell
        table.add_row(*row)
    return table
