"""Reading a profile's published figures (``Profile.published``): the bench ladder and the needle rungs.

The figures live in the profile YAML, never here; a profile without ``published`` compares to nothing.
"""

from __future__ import annotations

from typing import Any

# The bench workloads (sparkctl/qa/workloads/<name>.json), named as a profile's figures name them.
WORKLOADS = ("coding", "prose")


def bench_figures(profile: Any) -> dict[str, dict[int, float]]:
    """{workload: {concurrency: tok/s}}: C1 decode per stream, C>1 aggregate; empty when none."""
    published = getattr(profile, "published", None)
    if published is None:
        return {}
    figures = {
        name: {int(c): float(v) for c, v in (getattr(published, name, None) or {}).items()}
        for name in WORKLOADS
    }
    return {name: points for name, points in figures.items() if points}


def source(profile: Any) -> str | None:
    published = getattr(profile, "published", None)
    if published is None:
        return None
    return (
        f"{published.source} ({published.date})"
        if getattr(published, "date", None)
        else str(published.source)
    )


def needle_points(profile: Any) -> list[int]:
    """Published needle rungs (input tokens), smallest first; empty when the profile has none."""
    published = getattr(profile, "published", None)
    if published is None:
        return []
    return sorted({int(n.tokens) for n in published.needle})
