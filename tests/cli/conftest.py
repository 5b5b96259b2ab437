"""CLI tests keep sparkctl's state directory (run records, the supervisor's pause, breaker and
events) in the test's own temporary directory, never in the user's."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "sparkctl-state"
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(state))
    return state
