"""The controller's live staging bars: progress documents of this run only, bytes per node."""

from __future__ import annotations

import io
import json
import time

import pytest
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


# --- the renderer: documents in, bars or lines out, rate and ETA on a fake clock -------------------


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def packing(node: str, rows: int, t: float, total_rows: int = 1000, state: str = "packing") -> str:
    return json.dumps(
        {
            "node": node,
            "step": "pack",
            "state": state,
            "bytes_done": rows * 1 << 20,
            "bytes_total": total_rows << 20,
            "count_unit": "rows",
            "count_done": rows,
            "count_total": total_rows,
            "current": "rank 1 of 4",
            "updated": t,
        }
    )


def lines_of(con: Console) -> list[str]:
    out = con.file.getvalue()  # type: ignore[attr-defined]
    return [line for line in out.splitlines() if line.strip()]


def test_rate_and_eta_come_from_the_documents_bytes_over_time() -> None:
    clock = Clock()
    con = Console(file=io.StringIO(), force_terminal=False, width=200)
    bars = progress.StageBars(["spark-1"], None, con, mode="lines", clock=clock, line_every=0)
    t0 = clock.t
    for i, rows in enumerate((0, 200, 400)):  # 100 MiB/s: 200 rows of 1 MiB every 2 s
        clock.t = t0 + 2 * i
        bars.apply({"spark-1": packing("spark-1", rows, clock.t)})
    view = bars.views["spark-1"]
    assert view.rate == pytest.approx(100 << 20) and view.eta == pytest.approx(6.0)
    last = lines_of(con)[-1]
    assert last.startswith("spark-1: Engram packing 400.00 MiB of 1000.00 MiB (40%)")
    assert "100.00 MiB/s" in last and "ETA 6s" in last and "400 of 1,000 rows" in last


def test_the_rate_follows_the_last_stretch_not_the_whole_run() -> None:
    clock = Clock()
    con = Console(file=io.StringIO(), force_terminal=False, width=200)
    bars = progress.StageBars(["spark-1"], None, con, mode="lines", clock=clock)
    t0 = clock.t
    for s in range(0, 31):  # 10 rows/s for 20 s, then 50 rows/s
        rows = 10 * s if s <= 20 else 200 + 50 * (s - 20)
        bars.apply({"spark-1": packing("spark-1", rows, t0 + s, total_rows=100_000)})
    assert bars.views["spark-1"].rate == pytest.approx(50 << 20)


def test_bars_show_the_same_rate_eta_and_amount() -> None:
    clock = Clock()
    con = Console(file=io.StringIO(), force_terminal=True, width=200)
    bars = progress.StageBars(["spark-1", "spark-2"], None, con, mode="bars", clock=clock)
    t0 = clock.t
    for i, rows in enumerate((100, 300)):
        clock.t = t0 + 2 * i
        bars.apply({"spark-1": packing("spark-1", rows, clock.t)})
    task = bars.progress.tasks[bars.tasks["spark-1"]]
    assert (task.completed, task.total) == (300 << 20, 1000 << 20)
    assert task.fields["speed"] == "100.00 MiB/s" and task.fields["eta"] == "ETA 7s"
    assert task.fields["amount"] == "300.00 MiB of 1000.00 MiB (30%)"
    assert "300 of 1,000 rows" in task.fields["detail"]
    assert bars.progress.tasks[bars.tasks["spark-2"]].fields["speed"] == ""


def test_without_a_terminal_a_node_says_a_line_at_most_every_ten_seconds() -> None:
    clock = Clock()
    con = Console(file=io.StringIO(), force_terminal=False, width=200)
    bars = progress.StageBars(["spark-1"], None, con, mode="lines", clock=clock)
    t0 = clock.t
    for s in range(25):  # one reading a second
        clock.t = t0 + s
        bars.apply({"spark-1": packing("spark-1", 10 * s, clock.t)})
    assert len(lines_of(con)) == 3  # at 0, 10 and 20 s
    clock.t = t0 + 26
    bars.apply({"spark-1": packing("spark-1", 1000, clock.t, state="done")})
    clock.t = t0 + 27
    bars.apply({"spark-1": packing("spark-1", 1000, clock.t, state="done")})
    said = lines_of(con)
    assert len(said) == 4 and said[-1].startswith("spark-1: Engram packing done")
    assert "\x1b" not in con.file.getvalue() and "━" not in con.file.getvalue()  # type: ignore[attr-defined]


def test_a_new_step_is_said_at_once() -> None:
    clock = Clock()
    con = Console(file=io.StringIO(), force_terminal=False, width=200)
    bars = progress.StageBars(["spark-0"], None, con, mode="lines", clock=clock)
    bars.apply(
        {
            "spark-0": json.dumps(
                {
                    "step": "build",
                    "state": "building",
                    "count_unit": "steps",
                    "count_done": 1,
                    "count_total": 7,
                    "current": "step 2/7: RUN make",
                    "updated": clock.t,
                }
            )
        }
    )
    clock.t += 1
    bars.apply(
        {
            "spark-0": json.dumps(
                {
                    "step": "fanout",
                    "state": "serving",
                    "bytes_done": 5 << 30,
                    "bytes_total": 5 << 30,
                    "files_done": 1,
                    "files_total": 1,
                    "updated": clock.t,
                }
            )
        }
    )
    said = lines_of(con)
    assert said[0] == "spark-0: image build 1 of 7 steps · step 2/7: RUN make"
    assert said[1].startswith("spark-0: fan-out 5.00 GiB of 5.00 GiB (100%)")


def test_files_in_flight_get_rows_under_their_node_and_leave_when_done() -> None:
    clock = Clock()
    con = Console(file=io.StringIO(), force_terminal=True, width=200)
    bars = progress.StageBars(["spark-0"], None, con, mode="bars", clock=clock)

    def hub(items: list[dict[str, int | str]], done: int) -> str:
        return json.dumps(
            {
                "step": "download",
                "state": "downloading",
                "bytes_done": done,
                "bytes_total": 10 << 30,
                "files_done": 1,
                "files_total": 3,
                "items": items,
                "updated": clock.t,
            }
        )

    bars.apply(
        {
            "spark-0": hub(
                [
                    {"name": "model-00002.safetensors", "done": 1 << 30, "total": 4 << 30},
                    {"name": "model-00003.safetensors", "done": 2 << 30, "total": 4 << 30},
                ],
                5 << 30,
            )
        }
    )
    rows = {k[1]: bars.progress.tasks[v] for k, v in bars.subrows.items()}
    assert set(rows) == {"model-00002.safetensors", "model-00003.safetensors"}
    assert (rows["model-00003.safetensors"].completed, rows["model-00003.safetensors"].total) == (
        2 << 30,
        4 << 30,
    )
    clock.t += 1
    bars.apply(
        {"spark-0": hub([{"name": "model-00003.safetensors", "done": 3 << 30, "total": 4 << 30}], 7 << 30)}
    )
    assert [k[1] for k in bars.subrows] == ["model-00003.safetensors"]
    assert len(bars.progress.tasks) == 2


def test_the_controllers_document_gets_a_row_of_its_own() -> None:
    clock = Clock()
    con = Console(file=io.StringIO(), force_terminal=True, width=200)
    bars = progress.StageBars(["spark-0"], None, con, mode="bars", clock=clock)
    bars.apply(
        {
            progress.CONTROLLER: json.dumps(
                {
                    "step": "fetch",
                    "state": "fetching",
                    "count_unit": "objects",
                    "count_done": 450,
                    "count_total": 1000,
                    "bytes_done": 3 << 20,
                    "current": "Receiving objects",
                    "updated": clock.t,
                }
            )
        }
    )
    task = bars.progress.tasks[bars.tasks[progress.CONTROLLER]]
    assert task.fields["phase"] == "kit fetch" and task.fields["amount"] == "3.00 MiB"
    assert "450 of 1,000 objects" in task.fields["detail"] and "Receiving objects" in task.fields["detail"]


def test_a_failed_step_says_why() -> None:
    clock = Clock()
    con = Console(file=io.StringIO(), force_terminal=False, width=200)
    bars = progress.StageBars(["spark-2"], None, con, mode="lines", clock=clock)
    bars.apply(
        {
            "spark-2": json.dumps(
                {
                    "step": "pack",
                    "state": "failed",
                    "error": "not enough space in /mnt/nvme",
                    "updated": clock.t,
                }
            )
        }
    )
    assert lines_of(con) == ["spark-2: Engram packing failed: not enough space in /mnt/nvme"]


def test_two_fan_outs_in_one_run_are_two_steps() -> None:
    clock = Clock()
    con = Console(file=io.StringIO(), force_terminal=False, width=200)
    bars = progress.StageBars(["spark-1"], None, con, mode="lines", clock=clock)

    def fanout(started: float, done: int, total: int, state: str) -> str:
        return json.dumps(
            {
                "step": "fanout",
                "state": state,
                "started": started,
                "bytes_done": done,
                "bytes_total": total,
                "files_total": 1,
                "updated": clock.t,
            }
        )

    bars.apply({"spark-1": fanout(clock.t, 10 << 20, 10 << 20, "done")})  # the kit's
    clock.t += 1
    bars.apply({"spark-1": fanout(clock.t, 9 << 30, 9 << 30, "done")})  # the image's, between two readings
    said = lines_of(con)
    assert len(said) == 2 and "9.00 GiB of 9.00 GiB" in said[1]
    clock.t += 1
    bars.apply({"spark-1": fanout(clock.t, 1 << 30, 9 << 30, "receiving")})  # a third: no rate from the last
    assert bars.views["spark-1"].rate is None


def test_a_files_row_is_drawn_under_its_own_node() -> None:
    clock = Clock()
    con = Console(file=io.StringIO(), force_terminal=True, width=200, color_system=None)
    bars = progress.StageBars(["spark-0", "spark-1"], None, con, mode="bars", clock=clock)
    item = {"name": "model-00012-of-00046.safetensors", "done": 1 << 29, "total": 5 << 30}
    head = {
        "step": "download",
        "state": "downloading",
        "bytes_done": 1 << 30,
        "bytes_total": 476 << 30,
        "files_total": 46,
        "items": [item],
        "updated": clock.t,
    }
    bars.apply({"spark-1": packing("spark-1", 10, clock.t), "spark-0": json.dumps(head)})
    con.print(bars.progress.get_renderable())
    drawn = [line.split()[0] for line in con.file.getvalue().splitlines() if line.strip()]  # type: ignore[attr-defined]
    assert drawn == ["spark-0", "model-00012-of-00046.safetensors", "spark-1"]
    assert "hub download" in con.file.getvalue()  # type: ignore[attr-defined]  # no task yet: the step's name


def test_follow_lines_reads_a_process_to_its_end_and_kills_one_past_its_time() -> None:
    import subprocess
    import sys

    from sparkctl.nodeside import progress as node_progress

    def run(script: str, timeout: float) -> tuple[bool, list[str], list[str], int]:
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
        seen: list[str] = []
        timed_out, kept = node_progress.follow_lines(proc, proc.stdout, seen.append, timeout)
        return timed_out, kept, seen, proc.returncode

    timed_out, kept, seen, rc = run("print('step 1/2', end='\\r'); print('step 2/2'); print('done')", 30)
    assert (timed_out, rc) == (False, 0)
    assert kept == ["step 1/2", "step 2/2", "done"] and seen[:3] == kept  # a carriage return ends a line
    started = time.monotonic()
    # 5 s for the child's interpreter to start and print (starved beside the lab tests, 0.5 s was not)
    timed_out, kept, _, rc = run("import time; print('began', flush=True); time.sleep(900)", 5)
    assert timed_out and kept == ["began"] and rc != 0
    assert time.monotonic() - started < 450  # killed, not waited for (however starved the machine)
