"""bench's comparisons and protocols against the rank simulator on loopback: C6 and the eight-category
mix, the long request between two suites, a frozen arrival schedule, and the interleaved A/B."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from sparkctl.cli import qa_view
from sparkctl.errors import InputError
from sparkctl.qa import bench, haystack, plot, protocols
from sparkctl.qa import published as pub
from sparkctl.qa.endpoint import discover
from sparkctl.qa.quiet import Windows
from sparkctl.qa.schema import validate

pytest.importorskip("sparkctl_sim.rank", reason="the rank simulator's server has not landed")

from support import qa_fakes
from support.sim_rank import API_KEY, CONTEXT, SimRank


def _shown(*tables: Any) -> str:
    console = Console(width=300, record=True, file=io.StringIO())
    for table in tables:
        console.print(table)
    return console.export_text()


class Labelled(Windows):
    """Windows that remember, in order, what each timed window held (and the events put beside)."""

    def __init__(self, events: list[str]) -> None:
        super().__init__(interval=0.0)
        self.events = events

    @contextlib.contextmanager
    def timed(self, what: str = "") -> Iterator[None]:
        self.events.append(what)
        with super().timed(what):
            yield


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimRank]:
    rank = SimRank(tmp_path)
    yield rank.start()
    rank.stop()


def test_c6_is_in_the_default_ladder_with_r4s_and_tonys_c6() -> None:
    assert bench.DEFAULT_LEVELS == (1, 4, 6, 8, 16)
    from sparkctl.qa.records import bench_options

    assert bench_options(None, None, None, "none", False, True)["concurrency"] == [1, 4, 6, 8, 16]
    coding = bench.load_builtin("coding")
    level = bench.LevelResult(coding, 6)
    assert level.definition == "batch"
    assert {f.label for f in level.published} >= {"R4 sweep", "Tony EXL3 rep 1", "Tony EXL3 rep 2"}


def test_the_mix_runs_each_category_as_its_own_batch_and_averages_them(sim: SimRank) -> None:
    before = sim.generated_tokens()
    report = bench.run_bench(discover(sim.root, api_key=API_KEY), workloads=["mixed"], concurrency=[1, 2],
                             waves=1, warmup="none")
    assert not report.errors, report.errors
    mixed = bench.load_builtin("mixed")
    budgets = [c.max_tokens for c in mixed.categories]
    # Every category at every level, each with its own budget (the summary's 150), counted by the server.
    assert sim.generated_tokens() - before == (1 + 2) * sum(budgets)
    for level in report.levels:
        assert [b.category for b in level.batches] == [c.category for c in mixed.categories]
        assert [b.max_tokens for b in level.batches] == budgets
        assert level.definition == "category-mean"
        assert level.samples == [pytest.approx(statistics.fmean(b.aggregate_tps for b in level.batches))]
    c1 = report.levels[0].to_dict()
    assert c1["workload_sha256"] == pub.WORKLOAD_SHA256["mixed"] == mixed.sha256
    assert [p["label"] for p in c1["published"]] == ["R4 sweep", "Tony EXL3 rep 1", "Tony EXL3 rep 2",
                                                     "Tony EXL3", "Tony boot 10"]
    assert c1["short_requests"] == 0
    # Every published figure of the same bytes is a row; each source is named once with its date.
    shown = _shown(qa_view.bench_table(report, report.levels))
    assert "Tony EXL3 rep 2" in shown and "bench-exl3tp4b-rep2.json" in shown and "2026-09-12" in shown


def test_after_long_runs_the_long_request_between_two_suites(sim: SimRank) -> None:
    events: list[str] = []
    report = bench.run_bench(discover(sim.root, api_key=API_KEY), workloads=["coding"], concurrency=[1],
                             waves=1, c1_samples=1, warmup="none", windows=Labelled(events),
                             after_long=True)
    assert not report.errors, report.errors
    assert events == ["C1 trial 1", "long request", "C1 trial 1"]
    long = report.after_long
    assert long is not None and long["error"] is None and long["in_window"]
    units, published = haystack.rungs(CONTEXT)
    assert long["filler_units"] == max(units) and long["published_size"] is published
    (first,), (second,) = report.levels, report.after_levels
    assert (first.suite, second.suite) == (1, 2) and second.mean
    # R4's first suite beside the first, its suite after 299K beside the second, never crossed.
    assert "R4 suite 1" in {f.label for f in first.published} - {f.label for f in second.published}
    assert "R4 suite 2" in {f.label for f in second.published} - {f.label for f in first.published}
    doc = json.loads(json.dumps(report.to_dict()))
    assert validate(doc["protocols"], protocols.SCHEMA) == []
    assert doc["protocols"]["after_long"]["levels"][0]["suite"] == 2 and doc["levels"][0]["suite"] == 1
    text = plot.labels(plot.ladder_figure(report))
    assert "before the long request" in text and "after the long request" in text
    shown = _shown(qa_view.bench_table(report, report.after_levels, " · suite 2"))
    assert "R4 suite 2" in shown and "R4 suite 1" not in shown


def _schedule(tmp_path: Path, lines: list[dict[str, Any]]) -> tuple[Path, str]:
    path = tmp_path / "arrivals.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_arrival_schedule_is_pinned_and_parsed_naming_the_line(tmp_path: Path) -> None:
    path, digest = _schedule(tmp_path, [
        {"at": 0.3, "workload": "mixed", "category": "summary"},
        {"at": 0.0, "workload": "coding"},
        {"at": 0.1, "prompt": "Say hello.", "max_tokens": 16, "extra": {"ignore_eos": True}},
    ])
    schedule = protocols.load_schedule(f"{path}@{digest}")
    assert [a.at for a in schedule.arrivals] == [0.0, 0.1, 0.3]  # in the order of their offsets
    # R4's own case keys (generalization-client.py CASES: id, at, budget, prompt, expected) read as well.
    line = b'{"id": "arithmetic", "at": 0.0, "budget": 64, "prompt": "Return JSON.", "expected": {"gcd": 42}}'
    (case,) = protocols.parse_schedule(line, "s")
    assert (case.label, case.max_tokens, case.extra) == ("arithmetic", 64, {})
    assert [a.max_tokens for a in schedule.arrivals] == [200, 16, 150]
    assert schedule.arrivals[2].prompt.startswith("[bench v1 run summary c1 s0] Summarize")
    assert schedule.arrivals[0].extra == bench.load_builtin("coding").extra
    assert schedule.describe()["published"] == []  # R4's cohort figures belong to R4's schedule only
    with pytest.raises(InputError, match="does not match the pinned"):
        protocols.load_schedule(f"{path}@{'0' * 64}")
    with pytest.raises(InputError, match="FILE@SHA256"):
        protocols.load_schedule(str(path))
    bad, bad_digest = _schedule(tmp_path, [{"at": 0.0, "workload": "coding"}, {"at": -1, "prompt": "x",
                                                                                  "max_tokens": 4}])
    with pytest.raises(InputError, match=r"arrivals.jsonl:2: at must be a number"):
        protocols.load_schedule(f"{bad}@{bad_digest}")
    with pytest.raises(InputError, match="has no category 'poetry'"):
        protocols.parse_schedule(b'{"at": 0, "workload": "mixed", "category": "poetry"}', "s")


# Holds the sender to the schedule (each request sent within 0.2 s of its arrival time): beside the
# lab tests a starved machine sent one 0.31 s late. `make test` runs it first, alone.
@pytest.mark.timing
def test_arrivals_report_throughput_and_latency_mean_median_p95(sim: SimRank, tmp_path: Path) -> None:
    sim.start(SPARKCTL_SIM_TOKEN_RATE="400", SPARKCTL_SIM_TTFT_S="0")
    path, digest = _schedule(tmp_path, [
        {"at": 0.0, "prompt": "One.", "max_tokens": 40, "extra": {"ignore_eos": True}},
        {"at": 0.2, "prompt": "Two.", "max_tokens": 80, "extra": {"ignore_eos": True}},
        {"at": 0.4, "prompt": "Three.", "max_tokens": 40, "extra": {"ignore_eos": True}},
        {"at": 0.6, "prompt": "Four.", "max_tokens": 120, "extra": {"ignore_eos": True}},
    ])
    events: list[str] = []
    report = bench.run_bench(discover(sim.root, api_key=API_KEY), windows=Labelled(events), waves=2,
                             arrivals=protocols.load_schedule(f"{path}@{digest}"))
    assert not report.errors, report.errors
    # R4's protocol: an excluded warm-up cohort, then the measured cohorts; no ladder.
    assert events == ["arrivals warm-up", "arrivals cohort 1", "arrivals cohort 2"] and report.levels == []
    result = report.arrivals
    assert result is not None
    assert (result["requests"], result["cohorts"], result["completed"]) == (4, 2, 8)
    assert result["completion_tokens"] == 2 * 280 and result["excluded_warmup_cohort"]["completed"] == 4
    assert result["sha256"] == digest and all(t["wall_s"] >= 0.6 for t in result["trials"])
    for trial in result["trials"]:
        assert trial["throughput_tps"] == pytest.approx(280 / trial["wall_s"], rel=1e-3)
    assert result["throughput_tps"] == pytest.approx(
        statistics.fmean(t["throughput_tps"] for t in result["trials"]), rel=1e-3)
    assert result["median_latency_mean_of_cohorts_s"] == pytest.approx(
        statistics.fmean(t["median_latency_s"] for t in result["trials"]), rel=1e-3)
    latency = result["latency_s"]
    assert latency["min"] <= latency["median"] <= latency["p95"] <= latency["max"]
    # the longest answer takes at least its tokens at the simulated rate (how much longer depends on
    # the machine's load: a starved run measured 1.06 s)
    assert latency["max"] >= 0.95 * 120 / 400
    assert result["send_late_s_max"] < 0.2
    doc = json.loads(json.dumps(report.to_dict()))
    assert validate(doc["protocols"], protocols.SCHEMA) == []
    assert doc["protocols"]["after_long"] is None and doc["protocols"]["ab"] is None
    assert "request latency, s" in plot.labels(plot.ladder_figure(report))
    shown = _shown(qa_view.arrivals_table(report))
    assert f"{latency['p95']:.3f}" in shown and digest[:12] in shown


# Held to the simulated token rates (the lever twice the baseline's): a machine starved beside the
# lab tests measured its own load instead (1.39 % for +100 %). `make test` runs it first, alone.
@pytest.mark.timing
def test_ab_interleaves_baseline_lever_baseline_and_reports_the_difference(sim: SimRank) -> None:
    # The lever is a faster token rate (as seven draft tokens against five would be): the group is
    # restarted with it before the lever arm and without it before the last baseline arm.
    events: list[str] = []

    def switch(arm: str) -> dict[str, Any]:
        events.append(f"switch to {arm}")
        sim.start(SPARKCTL_SIM_TOKEN_RATE="800" if arm == "lever" else "400", SPARKCTL_SIM_TTFT_S="0")
        return {"arm": arm, "restarts": sim.starts}

    sim.start(SPARKCTL_SIM_TOKEN_RATE="400", SPARKCTL_SIM_TTFT_S="0")
    plan = protocols.ABPlan({"name": "k7", "overrides": {"args": {"--speculative-dspark-block-size": 7}}},
                            switch)
    report = bench.run_bench(discover(sim.root, api_key=API_KEY), workloads=["coding"], concurrency=[1],
                             waves=1, c1_samples=2, warmup="none", windows=Labelled(events), ab=plan)
    assert not report.errors, report.errors
    assert events == ["C1 trial 1", "C1 trial 2", "switch to lever", "C1 trial 1", "C1 trial 2",
                      "switch to baseline", "C1 trial 1", "C1 trial 2"]
    ab = report.ab
    assert ab is not None and ab["order"] == ["baseline", "lever", "baseline"]
    assert [a["arm"] for a in ab["arms"]] == ["baseline", "lever", "baseline"]
    assert ab["arms"][0]["switch"] is None and ab["arms"][1]["switch"]["arm"] == "lever"
    (diff,) = ab["differences"]
    assert diff["value"] == "coding C1"
    assert diff["difference_pct"] > 50.0  # twice the rate (the loaded test machine blurs the exact +100 %)
    low, high = diff["difference_range_pct"]
    assert low <= diff["difference_pct"] <= high
    assert diff["clears_drift"] is (abs(diff["difference_pct"]) > abs(diff["baseline_drift_pct"]))
    # The report's own ladder is the first baseline arm's.
    assert report.levels[0].mean == pytest.approx(diff["baseline"][0], rel=1e-3)
    doc = json.loads(json.dumps(report.to_dict()))
    assert validate(doc["protocols"], protocols.SCHEMA) == []
    assert "A/B: k7 (baseline / lever / baseline)" in plot.labels(plot.ladder_figure(report))
    assert f"{diff['difference_pct']:+.1f} %" in _shown(qa_view.ab_table(report))


def test_ab_differences_with_a_missing_arm_say_so() -> None:
    rows = protocols.ab_differences([{"x C1": 10.0}, {"x C1": None}, {"x C1": 11.0}])
    assert rows == [{"value": "x C1", "baseline": [10.0, 11.0], "lever": None, "difference_pct": None,
                     "note": "an arm has no measurement"}]
    (row,) = protocols.ab_differences([{"x": 100.0}, {"x": 106.2}, {"x": 100.0}])
    assert row["difference_pct"] == 6.2 and row["difference_range_pct"] == [6.2, 6.2]


# ----------------------------------------------------------------------------------------------- CLI
def _cli_on_the_simulator(monkeypatch: pytest.MonkeyPatch, sim: SimRank) -> None:
    """The bench command's seams for a cluster that is one simulated rank on this machine."""
    import types

    from sparkctl.cli import qa as cli_qa
    from sparkctl.profiles import load_profile

    cluster = types.SimpleNamespace(
        head=types.SimpleNamespace(mgmt_ip="127.0.0.1", name="spark-0"),
        ports=types.SimpleNamespace(api=sim.port),
        secrets={"api_key": types.SimpleNamespace(resolve=lambda: API_KEY)},
        profile=load_profile("r4-nvme"), groups=[], name="sim",
    )
    monkeypatch.setattr(cli_qa, "_load", lambda ctx: cluster)
    qa_fakes.use(monkeypatch, qa_fakes.qa_tools(
        identity=lambda c, **kw: ({"sparkctl_version": "0"}, {"profile": "r4"})))
    monkeypatch.setattr("sparkctl.qa.records.write_identity", lambda *a, **kw: None)


def test_cli_bench_arrivals_refuses_a_digest_mismatch_then_measures(
    sim: SimRank, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Any
) -> None:
    _cli_on_the_simulator(monkeypatch, sim)
    path, digest = _schedule(tmp_path, [{"at": 0.0, "workload": "coding"}, {"at": 0.1, "workload": "prose"}])
    res = run_cli("bench", "--json", "--arrivals", f"{path}@{'f' * 64}", "--results", str(tmp_path / "r"))
    assert res.code == 2 and "does not match the pinned" in res.out + res.err
    assert not (tmp_path / "r").exists()  # refused before anything was measured
    res = run_cli("bench", "--json", "--arrivals", f"{path}@{digest}", "--prefill", "none",
                  "--results", str(tmp_path / "r"))
    assert res.code == 0, res.out + res.err
    doc = json.loads(res.out)
    assert doc["levels"] == [] and doc["protocols"]["arrivals"]["completed"] == 3 * 2  # 3 cohorts
    assert validate(doc["protocols"], protocols.SCHEMA) == []
    on_disk = json.loads(Path(doc["results_json"]).read_text())
    assert on_disk["protocols"]["arrivals"]["sha256"] == digest
    assert Path(doc["plot"]).read_bytes().startswith(b"\x89PNG")


def test_cli_bench_ab_names_a_missing_variant(
    sim: SimRank, example_copy: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Any
) -> None:
    _cli_on_the_simulator(monkeypatch, sim)
    res = run_cli("-i", str(example_copy), "bench", "--json", "--ab", "k7")
    assert res.code == 2, res.out + res.err
    message = json.loads(res.out)["error"]["message"]
    assert message.startswith(f"--ab k7: cannot read {example_copy}/bench-variants/k7.yml")


def test_r4s_own_schedule_runs_beside_r4s_cohort_figures(sim: SimRank) -> None:
    report = bench.run_bench(discover(sim.root, api_key=API_KEY), waves=1, warmup="none",
                             arrivals=protocols.load_schedule("r4"))
    assert not report.errors, report.errors
    result = report.arrivals
    assert result is not None and result["file"] == "built-in r4" and result["excluded_warmup_cohort"] is None
    assert (result["requests"], result["completed"]) == (12, 12)
    assert result["trials"][0]["wall_s"] >= 6.4  # the last arrival is sent 6.4 s into the cohort
    assert [f["label"] for f in result["published"]] == ["R4 static five", "R4 adaptive five"]
    shown = _shown(qa_view.arrivals_table(report))
    assert "R4 static five (2026-09-12)" in shown and "100.44" in shown
    drawn = plot.labels(plot.ladder_figure(report))
    assert "R4 static five mean latency (published): 10.22 s" in drawn and "no published figure" not in drawn


def test_ab_that_stops_on_the_lever_brings_the_baseline_back(sim: SimRank) -> None:
    # The lever's server does not match the lever's profile: the arm is refused, and the group is
    # switched back to the baseline before the error ends the run.
    switched: list[str] = []

    def switch(arm: str) -> dict[str, Any]:
        switched.append(arm)
        return {"arm": arm}

    def check(arm: str) -> Any:
        if arm != "lever":
            return None
        return lambda info: ["speculative_dspark_block_size is 5, the lever serves 7"]

    plan = protocols.ABPlan({"name": "k7"}, switch, server_check=check)
    with pytest.raises(bench.idle.BusyError, match="the lever serves 7"):
        bench.run_bench(discover(sim.root, api_key=API_KEY), workloads=["coding"], concurrency=[1], waves=1,
                        c1_samples=1, warmup="none", ab=plan)
    assert switched == ["lever", "baseline"]


def test_the_bench_tables_fit_80_columns_with_every_figure_whole(sim: SimRank) -> None:
    """The ladder beside R4's suites and M1 as columns of their own ran to ten columns: at 80 every
    cell was cut to "…" (the workload and C columns to nothing) and each source's citation stood one
    word per line. Now the measured ladder, then one row per published figure with the ratio, then
    each source once."""
    report = bench.run_bench(discover(sim.root, api_key=API_KEY), workloads=["coding"], concurrency=[1, 6],
                             waves=1, c1_samples=1, warmup="none")
    assert not report.errors, report.errors
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(qa_view.bench_table(report, report.levels))
    lines = console.export_text().splitlines()
    rows = [ln for ln in lines if ln.startswith(("workload ", "coding "))]  # citations hold "…" too
    assert all(len(ln) <= 80 for ln in lines) and not any("…" in ln for ln in rows), lines
    measured = [ln.split()[:3] for ln in rows if "decode-per-stream" in ln or " batch " in ln]
    assert measured == [["coding", "1", "decode-per-stream"], ["coding", "6", "batch"]], rows
    c1 = report.levels[0]
    r4 = next(f for f in c1.published if f.label == "R4 suite 1")
    row = next(ln for ln in rows if ln.startswith("coding    1  R4 suite 1 ")).split()
    assert row[5:8] == [f"{r4.value:.2f}", f"{c1.ratio(r4):.2f}×", f"{r4.low:.2f}–{r4.high:.2f}"], row
    assert any(ln.split()[1] == "6" and "Tony EXL3 rep 2" in ln for ln in rows), rows
    text = " ".join(" ".join(lines).split())
    assert "bench-exl3tp4b-rep2.json" in text and text.count("Tony EXL3 rep 2:") == 1  # each source once
