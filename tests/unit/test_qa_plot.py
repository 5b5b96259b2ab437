"""The ladder plot: a readable PNG that says where the figures came from."""

from __future__ import annotations

from pathlib import Path

from sparkctl.qa import bench, plot
from sparkctl.qa.bench import Batch, BenchReport, LevelResult, RequestTiming


def _report(simulator: bool, with_published: bool) -> BenchReport:
    workloads = {name: bench.load_workload(name) for name in bench.WORKLOADS}
    report = BenchReport(
        endpoint="http://127.0.0.1:1/v1",
        model="m",
        simulator=simulator,
        profile="lab",
        published_source=None,
        started="now",
        workloads=workloads,
        concurrency=[1, 4],
        repeats=2,
    )
    for name in bench.WORKLOADS:
        for c in (1, 4):
            lvl = LevelResult(name, c, published=(50.0 * c if with_published else None))
            for rate in (40.0, 44.0):
                lvl.batches.append(
                    Batch(c, [RequestTiming(0.0, 0.2, 0.2 + 199 / rate, 200, 10) for _ in range(c)])
                )
            report.levels.append(lvl)
    return report


def _texts(fig) -> str:  # type: ignore[no-untyped-def]
    return " ".join(t.get_text() for t in fig.findobj(lambda o: hasattr(o, "get_text")))


def test_plot_writes_a_png(tmp_path: Path) -> None:
    out = plot.plot_ladder(_report(simulator=True, with_published=True), tmp_path / "sub" / "ladder.png")
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width = int.from_bytes(data[16:20], "big")
    assert width >= 1200  # two panels, readable


def test_simulator_and_published_are_labelled() -> None:
    fig = plot.ladder_figure(_report(simulator=True, with_published=True))
    text = _texts(fig)
    assert "SIMULATOR" in fig.get_suptitle() and "simulator (median" in text and "published" in text
    fig = plot.ladder_figure(_report(simulator=False, with_published=False))
    assert "SIMULATOR" not in fig.get_suptitle()
    assert "no published figures" in fig.get_suptitle()
    assert "measured (median" in _texts(fig)


def test_a_failed_level_is_drawn_as_failed() -> None:
    report = _report(simulator=True, with_published=False)
    report.levels[0].batches = [Batch(1, [RequestTiming(0.0, None, 0.1, 0, 0, "503")])]
    assert "failed" in _texts(plot.ladder_figure(report))
