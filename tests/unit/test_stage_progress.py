"""The controller's live staging bars: progress documents of this run only, bytes per node."""

from __future__ import annotations

import io
import json
import time

from rich.console import Console

from sparkctl.ansible import runner
from sparkctl.stage import progress


def doc(node: str, done: int, total: int, updated: float) -> str:
    return json.dumps(
        {"node": node, "bytes_done": done, "bytes_total": total, "state": "receiving", "updated": updated}
    )


def test_parse_ignores_stale_and_garbage_documents() -> None:
    now = time.time()
    assert progress.parse(doc("a", 1, 2, now), now - 10)["bytes_done"] == 1
    assert progress.parse(doc("a", 1, 2, now - 3600), now - 10) is None  # a previous run's file
    assert progress.parse("not json", 0) is None
    assert progress.parse(None, 0) is None


def test_bars_follow_bytes_and_tasks_per_node() -> None:
    con = Console(file=io.StringIO(), force_terminal=True, width=140)
    calls = []

    def reader() -> dict[str, str | None]:
        calls.append(1)
        return {"spark-1": doc("spark-1", 3 << 20, 8 << 20, time.time()), "spark-2": None}

    bars = progress.StageBars(["spark-1", "spark-2"], reader, con, enabled=True, interval=0.05)
    with bars:
        bars(runner.RunnerEvent(runner.TASK, host="spark-1", task="Receive from the previous rank"))
        bars(runner.RunnerEvent(runner.TASK, host="elsewhere", task="ignored"))
        deadline = time.time() + 5
        while "spark-1" not in bars.latest and time.time() < deadline:
            time.sleep(0.05)
    task = bars.progress.tasks[bars.tasks["spark-1"]]
    assert (task.completed, task.total) == (3 << 20, 8 << 20)
    assert task.fields["phase"].startswith("Receive from")
    assert bars.progress.tasks[bars.tasks["spark-2"]].total is None
    assert calls
