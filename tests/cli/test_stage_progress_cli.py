"""`sparkctl stage`'s progress through the CLI without a terminal: lines, never bars; under --json
the lines go to stderr and stdout carries the final document alone."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.runner import NODES, FakeRunner, Outcome

from sparkctl.ansible import results, runner
from sparkctl.errors import EXIT_OK
from sparkctl.stage import progress


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every node packs 100 rows a reading; the playbook lasts long enough for a few readings."""
    readings = {"n": 0, "closed": False}

    def reader() -> dict[str, str | None]:
        readings["n"] += 1
        rows = min(1000, 100 * readings["n"])
        return {
            n: json.dumps(
                {
                    "node": n,
                    "step": "pack",
                    "state": "done" if rows == 1000 else "packing",
                    "bytes_done": rows << 20,
                    "bytes_total": 1000 << 20,
                    "count_unit": "rows",
                    "count_done": rows,
                    "count_total": 1000,
                    "updated": time.time(),
                }
            )
            for n in NODES
        }

    def close() -> None:
        readings["closed"] = True

    monkeypatch.setattr(progress, "fleet_reader", lambda cluster, fleet=None, local=None: (reader, close))
    monkeypatch.setattr(progress, "POLL_S", 0.02)
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)

    def slow(out: Outcome) -> None:
        deadline = time.time() + 5
        while readings["n"] < 4 and time.time() < deadline:
            time.sleep(0.02)

    fake = FakeRunner(
        NODES,
        ok=3,
        on_run=slow,
        per_node={results.STAGE: lambda h: {"stage": {"node": h, "ok": True}, "pack": {}}},
    )
    monkeypatch.setattr(runner, "execute", fake)
    return readings


def test_json_keeps_stdout_to_the_final_document(
    run_cli: Any, example_copy: Path, live: dict[str, Any]
) -> None:
    res = run_cli("-i", str(example_copy), "--json", "stage", "engram", "--full")
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)  # nothing but the document
    assert doc["what"] == "engram"
    assert "spark-1: Engram packing" in res.err and "rows" in res.err
    assert live["closed"]


def test_without_a_terminal_progress_is_lines_on_stdout(
    run_cli: Any, example_copy: Path, live: dict[str, Any]
) -> None:
    res = run_cli("-i", str(example_copy), "stage", "engram", "--full")
    assert res.code == EXIT_OK, res.err
    said = [line for line in res.out.splitlines() if line.startswith("spark-2: Engram packing")]
    assert len(said) >= 2 and any("B/s · ETA" in line for line in said)
    assert "\x1b[" not in res.out and "\r" not in res.out  # no live display redrawing bars
