"""The one median/min/max summary every benchmark here prints (the host is shared: quote all three,
and with ``runs`` every sample). Benchmarks run as scripts (``python bench/<name>.py``), which puts
this directory on ``sys.path``: ``from _stats import spread``."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def spread(
    values: Sequence[float], *, digits: int | None = 2, unit: str = "", runs: bool = False, iqr: bool = False
) -> dict[str, Any]:
    """``median``, ``min`` and ``max`` of repeated measurements; ``iqr`` adds the interquartile range
    (``statistics.quantiles``, n=4; 0 for one value), ``runs`` every value in the order measured.
    Each is rounded to ``digits`` (None: as measured); ``unit`` suffixes every key (``"_s"``:
    ``median_s``, ``min_s``, ...)."""
    xs = list(values)

    def r(x: float) -> float:
        return x if digits is None else round(x, digits)

    out: dict[str, Any] = {f"median{unit}": r(statistics.median(xs)), f"min{unit}": r(min(xs)),
                           f"max{unit}": r(max(xs))}
    if iqr:
        q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [xs[0]] * 3
        out[f"iqr{unit}"] = r(q[2] - q[0])
    if runs:
        out[f"runs{unit}"] = [r(x) for x in xs]
    return out
