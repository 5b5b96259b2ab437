"""Qualify as a readiness gate of `up` (``gates.qualify_on_up`` in the profile): the quick suite."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.errors import SparkctlError
from sparkctl.qa.qualify import run_qualify

if TYPE_CHECKING:
    from sparkctl.model import Cluster


def qualify_on_up(cluster: Cluster, run_dir: Path) -> Callable[[], tuple[bool, str]] | None:
    """The gate's call (passed, detail), its evidence under ``run_dir``; None when the profile
    does not qualify on `up`."""
    if not cluster.profile.gates.qualify_on_up:
        return None

    def call() -> tuple[bool, str]:
        try:
            report = run_qualify(cluster, "quick", run_dir)
        except SparkctlError as exc:
            return False, exc.message
        return report.passed, ("passed" if report.passed else "failed: " + ", ".join(report.failed))

    return call
