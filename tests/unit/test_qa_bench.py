"""Bench arithmetic: the published timing definitions, percentiles, pinned workloads, published figures."""

from __future__ import annotations

import hashlib
import json
from importlib import resources

import pytest

from sparkctl.errors import InputError
from sparkctl.qa import bench, published
from sparkctl.qa.bench import Batch, RequestTiming


def test_percentile_matches_numpy_linear() -> None:
    np = pytest.importorskip("numpy")
    values = [0.31, 0.12, 0.5, 0.44, 0.27, 0.9, 0.05, 0.33, 0.61, 0.2, 0.71]
    for p in (0, 10, 50, 90, 99, 100):
        assert bench.percentile(values, p) == pytest.approx(float(np.percentile(values, p)))
    assert bench.percentile([3.0], 99) == 3.0
    with pytest.raises(ValueError):
        bench.percentile([], 50)


def test_decode_rate_excludes_the_first_token() -> None:
    r = RequestTiming(sent=10.0, first_token=10.25, done=12.25, completion_tokens=201, prompt_tokens=40)
    assert r.ttft == pytest.approx(0.25)
    assert r.e2e == pytest.approx(2.25)
    assert r.decode_tps == pytest.approx(100.0)  # (201 - 1) / (12.25 - 10.25)


def test_aggregate_covers_the_whole_batch() -> None:
    # Two streams: one starts late and finishes last; the aggregate window is first send → last done.
    batch = Batch(
        4,
        [
            RequestTiming(0.0, 0.5, 2.0, 200, 10),
            RequestTiming(0.0, 0.3, 2.5, 200, 10),
            RequestTiming(0.1, 0.6, 3.0, 200, 10),
            RequestTiming(0.2, 1.0, 4.0, 200, 10),
        ],
    )
    assert batch.wall == pytest.approx(4.0)
    assert batch.aggregate_tps == pytest.approx(800 / 4.0)
    assert batch.headline() == batch.aggregate_tps
    single = Batch(1, [RequestTiming(0.0, 0.5, 2.5, 201, 10)])
    assert single.headline() == pytest.approx(100.0)  # C1 headline is decode per stream
    assert single.aggregate_tps == pytest.approx(201 / 2.5)


def test_level_summary_spread_and_ratio() -> None:
    lvl = bench.LevelResult("coding", 1, published=80.0)
    for rate in (78.0, 82.0, 80.0):
        lvl.batches.append(Batch(1, [RequestTiming(0.0, 1.0, 1.0 + 199 / rate, 200, 20)]))
    data = lvl.to_dict()
    assert data["headline_tps"] == {"min": 78.0, "median": 80.0, "max": 82.0}
    assert data["ratio_to_published"] == 1.0
    assert data["metric"] == "decode tok/s per stream"
    assert data["ttft_s"] == {"p50": 1.0, "p90": 1.0, "p99": 1.0}


def test_workloads_are_pinned_and_hashed() -> None:
    for name in bench.WORKLOADS:
        w = bench.load_workload(name)
        raw = resources.files("sparkctl.qa").joinpath("workloads", f"{name}.json").read_bytes()
        assert w.sha256 == hashlib.sha256(raw).hexdigest()
        assert len(w.prompts) >= 8 and len(set(w.prompts)) == len(w.prompts)
        assert json.loads(raw)["name"] == name
    assert bench.load_workload("coding").max_tokens == 200
    assert bench.load_workload("prose").max_tokens == 256


def test_prompts_are_distinct_and_tagged_at_the_front() -> None:
    w = bench.load_workload("coding")
    prompts = bench._prompts(w, 8, "r1")
    assert len(set(prompts)) == 8
    assert prompts[3].startswith("[bench v1 r1 coding c8 s3] ")


def test_option_parsing() -> None:
    assert bench.parse_concurrency("8,1,4,4") == [1, 4, 8]
    for bad in ("", "0,4", "a,b"):
        with pytest.raises(InputError):
            bench.parse_concurrency(bad)
    assert bench.parse_workloads("both") == ["coding", "prose"]
    with pytest.raises(InputError):
        bench.parse_workloads("poetry")


def test_published_figures_come_from_the_profile() -> None:
    profiles = pytest.importorskip("sparkctl.profiles")
    r4 = profiles.load_profile("r4-nvme")
    assert published.bench_figures(r4) == {
        "coding": {1: 82.73, 4: 211.81, 8: 340.41},
        "prose": {1: 52.62, 4: 116.91, 8: 162.18},
    }
    assert published.needle_points(r4) == [32_870, 131_174, 299_102]
    assert "rhys101" in (published.source(r4) or "")
    lab = profiles.load_profile("lab")
    assert published.bench_figures(lab) == {} and published.needle_points(lab) == []


def test_a_batch_with_a_failed_request_measures_nothing() -> None:
    good = Batch(2, [RequestTiming(0.0, 0.1, 2.1, 200, 9), RequestTiming(0.0, 0.1, 2.1, 200, 9)])
    bad = Batch(
        2, [RequestTiming(0.0, 0.1, 1.0, 200, 9), RequestTiming(0.0, None, 0.2, 0, 0, "503 lost node_rank 2")]
    )
    lvl = bench.LevelResult("coding", 2, [good, bad], published=100.0, max_tokens=200)
    assert not bad.ok and bad.errors == ["503 lost node_rank 2"]
    assert lvl.measured == [good]
    data = lvl.to_dict()
    assert data["headline_tps"]["median"] == pytest.approx(400 / 2.1, rel=1e-3)
    assert (data["measured_batches"], data["failed_batches"]) == (1, 1)
    failed = bench.LevelResult("coding", 2, [bad], published=100.0)
    assert failed.headline() is None and failed.ratio() is None
    assert failed.to_dict()["headline_tps"] is None and failed.to_dict()["ttft_s"] is None
