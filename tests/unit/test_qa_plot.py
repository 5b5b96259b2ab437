"""The plot: sparkctl's bars beside every published figure of the same workload, each labelled."""

from __future__ import annotations

from pathlib import Path

from sparkctl.qa import plot
from sparkctl.qa.bench import Batch, BenchReport, LevelResult, RequestTiming
from sparkctl.qa.prefill import PrefillResult, plan
from sparkctl.qa.workload import Workload, load_builtin


def _report(simulator: bool, workloads: list[Workload] | None = None, prefill: bool = False) -> BenchReport:
    workloads = workloads or [load_builtin("coding"), load_builtin("prose")]
    report = BenchReport(
        endpoint="http://127.0.0.1:1/v1",
        model="m",
        simulator=simulator,
        profile="lab",
        started="now",
        workloads=workloads,
        concurrency=[1, 8, 16],
        waves=2,
        c1_samples=2,
        warmup="short",
    )
    for w in workloads:
        for c in (1, 8, 16):
            lvl = LevelResult(w, c)
            for rate in (40.0, 44.0):
                reqs = [
                    RequestTiming(0.0, 0.2, 0.2 + (w.max_tokens - 1) / rate, w.max_tokens, 10)
                    for _ in range(c)
                ]
                lvl.batches.append(Batch(c, reqs))
            report.levels.append(lvl)
    if prefill:
        result = PrefillResult(32_768, plan([4_096, 32_768, 65_536], 32_768))
        for point, tokens in zip(result.points, (4_100, 31_700, 0), strict=True):
            if not point.skipped:
                point.timing = RequestTiming(0.0, tokens / 3_000, tokens / 3_000 + 0.1, 8, tokens)
        report.prefill = result
    return report


def test_plot_writes_a_png(tmp_path: Path) -> None:
    out = plot.plot_ladder(_report(simulator=True, prefill=True), tmp_path / "sub" / "ladder.png")
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert int.from_bytes(data[16:20], "big") >= 1800  # three panels, readable


def test_every_published_bar_is_labelled_with_its_source() -> None:
    fig = plot.ladder_figure(_report(simulator=True, prefill=True))
    text = plot.labels(fig)
    for label in ("R4 suite 1 (published)", "R4 suite 2 (published)", "M1 (published)"):
        assert label in text
    assert "sparkctl · simulator (mean" in text and "SIMULATOR" in fig.get_suptitle()
    assert "82.7" in text and "3768.0" in text  # R4 C1, M1 32K prefill
    assert "134.2" not in text  # M1's C16 prose: its workload is not pinned, so never drawn beside ours
    assert "(clamped)" in text  # the 32K point was asked at the served context's limit
    assert "rhys101" in text and "MiaAI-Lab" in text  # the sources, cited on the figure


def test_real_hardware_and_unmatched_workloads_say_so() -> None:
    odd = Workload("community", "coding", 150, ("x",), "0" * 64)
    fig = plot.ladder_figure(_report(simulator=False, workloads=[odd]))
    text = plot.labels(fig)
    assert "SIMULATOR" not in fig.get_suptitle() and "sparkctl · measured (mean" in text
    assert "no published figure matches" in fig.get_suptitle() and "(published)" not in text


def test_a_workload_of_the_same_shape_but_other_bytes_is_not_drawn_beside_a_published_figure() -> None:
    # Same name, kind, length and levels as the community workload, different prompt bytes.
    mine = Workload("coding", "coding", 200, ("Write a Python function.",), "0" * 64)
    fig = plot.ladder_figure(_report(simulator=False, workloads=[mine]))
    text = plot.labels(fig)
    assert "(published)" not in text and "82.7" not in text
    assert "no published figure matches" in fig.get_suptitle()


def test_a_failed_level_is_drawn_as_failed() -> None:
    report = _report(simulator=True)
    report.levels[0].batches = [Batch(1, [RequestTiming(0.0, None, 0.1, 0, 0, "503")])]
    assert "failed" in plot.labels(plot.ladder_figure(report))
