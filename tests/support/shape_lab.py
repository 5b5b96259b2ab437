"""What the shape lab modules (`tests/integration/test_shape_*.py`) share: the node sizes for
``sparkctl_lab.control.up`` in another published shape, a command's JSON document, and the
controller's available memory (the eight-node modules report its lowest)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.groups_lab import ok

__all__ = ["available_gib", "json_doc", "ok", "sizes"]


def sizes(lab: Any, shape: str) -> dict[str, int] | None:
    """Every node of ``shape`` with the lab's NVMe size (None: plain directories, no loop device)."""
    from sparkctl_lab import topology

    nodes = topology.node_names(topology.get_shape(shape))
    return dict.fromkeys(nodes, lab.nvme_gib) if lab.nvme_gib else None


def json_doc(proc: Any) -> dict[str, Any]:
    """The JSON document a `sparkctl --json` run printed on stdout; an assertion naming what it
    printed instead."""
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError as exc:
        raise AssertionError(f"no JSON on stdout (exit {proc.returncode}): {proc.stdout[-2000:]}\n"
                             f"{proc.stderr[-2000:]}") from exc
    return doc


def available_gib() -> float:
    """The controller's MemAvailable, GiB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    raise AssertionError("no MemAvailable in /proc/meminfo")
