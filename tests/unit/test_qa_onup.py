"""Qualify on `up`: the gate's client library is imported while the ranks boot, not after readiness."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkctl.qa import onup


def _cluster(on: bool) -> Any:
    return SimpleNamespace(profile=SimpleNamespace(gates=SimpleNamespace(qualify_on_up=on)))


def _importers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sparkctl-qualify-import"]


def test_the_client_is_imported_in_the_background_when_up_qualifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    imported: list[str] = []
    release = threading.Event()

    def slow_import(name: str) -> None:
        release.wait(5)
        imported.append(name)

    monkeypatch.setattr(onup.importlib, "import_module", slow_import)
    gate = onup.qualify_on_up(_cluster(True), tmp_path)
    assert callable(gate)
    assert imported == [] and _importers(), "the gate must not wait for the import"
    release.set()
    for t in _importers():
        t.join(5)
    assert imported == ["openai"]


def test_nothing_is_imported_when_the_profile_does_not_qualify_on_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onup.importlib, "import_module", lambda name: pytest.fail(f"imported {name}"))
    assert onup.qualify_on_up(_cluster(False), tmp_path) is None
    assert not _importers()
