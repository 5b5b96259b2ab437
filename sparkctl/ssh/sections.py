"""Probe output as the node-side scripts print it: ``key=value`` facts, then ``--- name`` blocks."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Sections:
    """Probe output split into ``key=value`` facts and ``--- name`` text sections."""

    facts: dict[str, str] = field(default_factory=dict)
    blocks: dict[str, str] = field(default_factory=dict)


def parse_sections(text: str) -> Sections:
    """Parse probe output: ``key=value`` lines, and blocks opened by ``--- name`` lines."""
    out = Sections()
    block: str | None = None
    lines: list[str] = []
    for raw in text.splitlines():
        if raw.startswith("--- "):
            if block is not None:
                out.blocks[block] = "\n".join(lines)
            block, lines = raw[4:].strip(), []
            continue
        if block is not None:
            lines.append(raw)
        elif "=" in raw:
            key, value = raw.split("=", 1)
            out.facts[key.strip()] = value.strip()
    if block is not None:
        out.blocks[block] = "\n".join(lines)
    return out
