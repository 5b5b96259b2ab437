"""Unit tests keep sparkctl's state directory (run records, the supervisor's files, `up`'s readiness
record) in the test's own temporary directory: never the user's, and never the one a lab run on the
same machine is writing (the lab's cluster is also called "lab")."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "sparkctl-state"
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(state))
    return state
