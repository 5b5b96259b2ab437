"""Qualify as a readiness gate of `up` (``gates.qualify_on_up`` in the profile): the quick suite, with
qualify's idle checks (``run_qualify``): right after readiness nothing else is running, and a server
that is busy fails the gate with the counts. The boot watch has just compared ``/server_info`` with
the rendered flags, so the gate does not compare it again."""

from __future__ import annotations

import contextlib
import importlib
import threading
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
    # The suite's client library takes ~0.5-1 s to import and the gate runs only once the engine
    # is ready: import it now, while the ranks boot, not after readiness.
    threading.Thread(target=_import_client, name="sparkctl-qualify-import", daemon=True).start()

    def call() -> tuple[bool, str]:
        try:
            report = run_qualify(cluster, "quick", run_dir)
        except SparkctlError as exc:
            return False, exc.message
        if report.passed:
            return True, "passed"
        busy = f" ({report.busy_after})" if report.busy_after else ""
        return False, "failed: " + ", ".join(report.failed) + busy

    return call


def _import_client() -> None:
    with contextlib.suppress(ImportError):  # the suite says so itself when it needs the client
        importlib.import_module("openai")
