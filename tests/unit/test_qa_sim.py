"""qualify and bench end to end against the rank simulator on loopback (single node, ``--nnodes 1``).

Each test starts its own ``sparkctl-sim-rank serve`` process with the SGLang argv a real rank gets and
the simulator's environment knobs, waits for ``/ready``, and talks to it only over 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import qa_fakes
from support.ports import free_port as _free_port

from sparkctl.qa import bench, haystack, idle, published, qualify
from sparkctl.qa.endpoint import discover
from sparkctl.qa.identity import SourceIdentity
from sparkctl.qa.quiet import Windows
from sparkctl.qa.request import stream_client

pytest.importorskip("sparkctl_sim.rank", reason="the rank simulator's server has not landed")

API_KEY = "qa-test-key"
MODEL = "deepseek-v41-flash"
CONTEXT = 32768


class Sim:
    """Ranks started for one test; rank 0 (the last started) serves the API."""

    def __init__(self, procs: list[subprocess.Popen[bytes]], port: int, log: Path) -> None:
        self.procs, self.port, self.log = procs, port, log

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.procs[-1]

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """Stop at once, without the graceful drain (a request still running would hold it)."""
        for proc in self.procs:
            proc.kill()

    def stop(self) -> None:
        for proc in reversed(self.procs):  # rank 0 first, as `down` does
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _start(tmp_path: Path, nnodes: int = 1, **knobs: str) -> Sim:
    """``nnodes`` simulated ranks on loopback (workers first), each with the argv a real rank gets."""
    dist = _free_port()
    ports = [_free_port() for _ in range(nnodes)]
    # fast unless a test sets its own pace: qualify judges answers, not speed
    fast = {
        "SPARKCTL_SIM_TOKEN_RATE": "2000",
        "SPARKCTL_SIM_PREFILL_RATE": "2000000",
        "SPARKCTL_SIM_TTFT_S": "0",
    }
    env = {**os.environ, "SPARKCTL_SIM_BOOT_DELAY_S": "0", **fast, **knobs}
    log = tmp_path / f"sim-{ports[0]}.log"
    procs = []
    with log.open("wb") as out:
        for rank in [*range(1, nnodes), 0]:
            argv = [
                sys.executable, "-m", "sparkctl_sim.rank", "serve",
                "--model-path", str(tmp_path / "model"),
                "--served-model-name", MODEL,
                "--tp-size", str(nnodes),
                "--nnodes", str(nnodes),
                "--node-rank", str(rank),
                "--dist-init-addr", f"127.0.0.1:{dist}",
                "--host", "127.0.0.1",
                "--port", str(ports[rank]),
                "--context-length", str(CONTEXT),
                "--max-running-requests", "8",
                "--api-key", API_KEY,
                "--enable-metrics",
            ]  # fmt: skip
            procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT))
    sim = Sim(procs, ports[0], log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            sim.stop()
            raise AssertionError(f"a simulated rank exited:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{sim.root}/ready", timeout=1).status_code == 200:
                return sim
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    sim.stop()
    raise AssertionError(f"simulator not ready within 30 s:\n{log.read_text()[-2000:]}")


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    started: list[Sim] = []

    def start(nnodes: int = 1, **knobs: str) -> Sim:
        sim = _start(tmp_path, nnodes, **knobs)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


def test_full_suite_passes_and_keeps_evidence(start_sim: Callable[..., Sim], tmp_path: Path) -> None:
    sim = start_sim()
    endpoint = discover(sim.root, api_key=API_KEY)
    assert endpoint.simulator and endpoint.model == MODEL and endpoint.context_length == CONTEXT
    out = tmp_path / "qualify"
    units, published = haystack.rungs(CONTEXT)
    report = qualify.qualify_endpoint(endpoint, "full", out, units, needle_published=published)
    assert [c.name for c in report.checks] == list(qualify.CHECKS)
    assert report.passed, [(c.name, c.detail) for c in report.checks if not c.passed]
    for check in report.checks:
        evidence = json.loads((out / f"{check.name}.json").read_text())
        assert evidence["passed"] and evidence["simulator"] is True
        assert evidence["exchanges"], check.name
        assert all("request" in e and "response" in e for e in evidence["exchanges"])
    needle = json.loads((out / "needle.json").read_text())["data"]
    assert [r["filler_units"] for r in needle["rungs"]] == units and needle["published_sizes"] is False
    assert all(haystack.within(r["filler_units"], r["prompt_tokens"]) for r in needle["rungs"])
    assert needle["tag"] == f"sparkctl-{out.name}"
    one = json.loads((out / "image-one.json").read_text())
    assert json.loads(one["data"]["answer"]) == one["data"]["expected"]
    assert one["data"]["expected"]["code"] == "NORTH 7314"
    summary = json.loads((out / "report.json").read_text())
    assert summary["passed"] and summary["simulator"] is True
    assert summary["server_info"]["simulator"] is True  # what was qualified, recorded beside the verdict


@pytest.mark.parametrize(
    ("fault", "failed"),
    [
        ("misread-code", ["image-one", "image-four"]),  # one digit of each printed code read wrong
        ("blind", ["image-one", "image-four"]),
        ("lose-needle", ["needle"]),
    ],
)
def test_a_wrong_probe_answer_fails_the_published_probe(
    start_sim: Callable[..., Sim], tmp_path: Path, fault: str, failed: list[str]
) -> None:
    sim = start_sim(SPARKCTL_SIM_FAULT=fault)
    endpoint = discover(sim.root, api_key=API_KEY)
    units, published = haystack.rungs(CONTEXT)
    checks = ["image-one", "image-four", "needle"]
    report = qualify.qualify_endpoint(
        endpoint, "full", tmp_path / fault, units, needle_published=published, checks=checks
    )
    assert not report.passed
    assert report.failed == failed
    details = {c.name: c.detail for c in report.checks}
    if fault == "misread-code":
        assert "NORTH 7315" in details["image-one"] and "expected" in details["image-one"]
    if fault == "lose-needle":
        assert "wrong answer" in details["needle"]


@pytest.mark.parametrize(
    ("fault", "check"),
    [
        ("wrong-arithmetic", ["text", "arithmetic"]),  # R4's text check is 17 × 19 → "323"
        ("unstable-output", ["determinism"]),
        ("bad-json", ["json"]),
    ],
)
def test_a_broken_behaviour_fails_the_named_check(
    start_sim: Callable[..., Sim], tmp_path: Path, fault: str, check: list[str]
) -> None:
    sim = start_sim(SPARKCTL_SIM_FAULT=fault)
    report = qualify.qualify_endpoint(discover(sim.root, api_key=API_KEY), "quick", tmp_path / fault)
    assert not report.passed
    assert report.failed == check


def test_garbage_under_batching_fails_arithmetic(start_sim: Callable[..., Sim], tmp_path: Path) -> None:
    sim = start_sim(SPARKCTL_SIM_FAULT="garbage-at-batch")
    report = qualify.qualify_endpoint(
        discover(sim.root, api_key=API_KEY), "quick", tmp_path / "g", checks=["text", "arithmetic"]
    )
    assert report.failed == ["arithmetic"]  # one request at a time is fine; eight at once are not


def test_four_ranks_on_loopback_then_a_dead_worker(start_sim: Callable[..., Sim], tmp_path: Path) -> None:
    sim = start_sim(nnodes=4)
    endpoint = discover(sim.root, api_key=API_KEY)
    assert qualify.qualify_endpoint(endpoint, "quick", tmp_path / "four").passed
    sim.procs[1].kill()  # rank 2 (workers were started 1, 2, 3, then rank 0)
    sim.procs[1].wait()
    time.sleep(6)  # the simulator notices a lost peer within 5 s
    report = qualify.qualify_endpoint(endpoint, "quick", tmp_path / "dead", checks=["text", "arithmetic"])
    assert report.failed == ["text", "arithmetic"]
    assert all("error" in c.detail for c in report.checks)


def test_wrong_key_is_an_input_error(start_sim: Callable[..., Sim]) -> None:
    from sparkctl.errors import InputError

    sim = start_sim()
    with pytest.raises(InputError, match="refused the API key"):
        discover(sim.root, api_key="not-the-key")


@pytest.mark.timing
def test_bench_recovers_the_configured_token_rate(start_sim: Callable[..., Sim]) -> None:
    rate = 120.0
    sim = start_sim(SPARKCTL_SIM_TOKEN_RATE=str(rate), SPARKCTL_SIM_TTFT_S="0.05")
    report = bench.run_bench(
        discover(sim.root, api_key=API_KEY), workloads=["coding"], concurrency=[1], waves=1, c1_samples=2,
        warmup="short",
    )  # fmt: skip
    assert report.simulator and not report.errors
    (level,) = report.levels
    assert len(level.batches) == 2 and level.excluded == 1  # C1 samples beyond the waves, warm-up excluded
    assert all(r.completion_tokens == 200 for b in level.batches for r in b.requests)
    assert level.mean == pytest.approx(rate, rel=0.05), level.samples


def _generated_tokens(sim: Sim) -> int:
    text = httpx.get(f"{sim.root}/metrics", timeout=5).text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("sglang:generation_tokens_total")]
    return int(float(line.split()[-1]))


@pytest.mark.parametrize("warmup", ["published", "short"])
def test_warm_ups_decode_what_their_definition_says(start_sim: Callable[..., Sim], warmup: str) -> None:
    # R4's warm-up: the first three prompts at C1 with 64 tokens, then one full-length batch per
    # level, all excluded; --quick's: one 64-token batch per level. Counted by the server itself.
    sim = start_sim()
    before = _generated_tokens(sim)
    report = bench.run_bench(
        discover(sim.root, api_key=API_KEY), workloads=["coding"], concurrency=[1, 4], waves=1, c1_samples=1,
        warmup=warmup,
    )  # fmt: skip
    assert not report.errors, report.errors
    measured = (1 + 4) * 200
    warm = bench.STANDARD_WARMUPS * 64 + (1 + 4) * 200 if warmup == "published" else (1 + 4) * 64
    assert _generated_tokens(sim) - before == measured + warm
    assert [lvl.excluded for lvl in report.levels] == [1, 1]
    assert all(len(lvl.batches) == 1 for lvl in report.levels)
    assert report.to_dict()["sampling"]["warmup"] == warmup


def test_no_gpu_read_lands_inside_a_timed_window(start_sim: Callable[..., Sim]) -> None:
    # A fake GPU sampler records, for each read, whether a batch was being timed: both regimes,
    # the prefill sweep included, read only between windows.
    sim = start_sim()
    reads: list[bool] = []
    windows = Windows(interval=0.0)
    windows.sample = lambda: reads.append(windows.inside)
    report = bench.run_bench(
        discover(sim.root, api_key=API_KEY), workloads=["coding", "prose"], concurrency=[1, 4], waves=1,
        c1_samples=1, warmup="published", prefill_sizes=[4096], windows=windows,
    )  # fmt: skip
    assert not report.errors, report.errors
    assert reads and not any(reads)
    measured = sum(len(lvl.batches) for lvl in report.levels)
    assert report.telemetry["timed_windows"] > measured
    assert report.telemetry["gpu_queries_inside_windows"] == 0
    assert report.telemetry["gpu_checkpoints"] == len(reads)


def test_prose_runs_the_sparkdash_regime_as_published(start_sim: Callable[..., Sim]) -> None:
    # Per trial: a warm-up prefill (8 tokens), the 4,096-token prefill (8), sparkDash's decode
    # warm-up (32), then C1 and C4 ascending at 256 tokens each; counted by the server itself.
    sim = start_sim()
    before = _generated_tokens(sim)
    report = bench.run_bench(
        discover(sim.root, api_key=API_KEY), workloads=["prose"], concurrency=[4, 1], waves=2,
        warmup="published",
    )  # fmt: skip
    assert not report.errors, report.errors
    assert _generated_tokens(sim) - before == 2 * (8 + 8 + 32 + (1 + 4) * 256)
    c1, c4 = report.levels
    assert [b.trial for b in c1.batches] == [1, 2] and c1.excluded == c4.excluded == 0
    assert [p["trial"] for p in report.trial_prefills] == [1, 2]
    assert all(p["target_tokens"] == 4096 and p["prompt_tokens"] > 2000 for p in report.trial_prefills)
    assert report.to_dict()["sampling"]["regimes"]["prose"].startswith("sparkDash as R4 ran it")


def test_a_busy_server_is_refused_before_anything_is_measured(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(SPARKCTL_SIM_TOKEN_RATE="20")
    endpoint = discover(sim.root, api_key=API_KEY)
    body = {"model": MODEL, "max_tokens": 400, "messages": [{"role": "user", "content": "Write."}]}

    def someone_else() -> None:  # another client's long request; the simulator stops under it
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(f"{sim.root}/v1/chat/completions", json=body, timeout=60,
                       headers={"Authorization": f"Bearer {API_KEY}"})

    other = threading.Thread(target=someone_else, daemon=True)
    other.start()
    deadline = time.monotonic() + 5
    while idle.read_load(endpoint).idle and time.monotonic() < deadline:
        time.sleep(0.05)
    before = _generated_tokens(sim)
    with pytest.raises(idle.BusyError, match=r"rank 0 is busy before the coding suite: 1 running, 0 waiting "
                       r"\(GET /v1/loads\)"):
        bench.run_bench(endpoint, workloads=["coding"], concurrency=[1], waves=1, c1_samples=1, warmup="none")
    assert _generated_tokens(sim) - before < 100  # only the other client's request decoded meanwhile
    sim.kill()  # not the graceful stop: it would wait out the other client's 20 s request


def test_a_server_that_is_not_the_profiles_is_refused_naming_the_field(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim()
    endpoint = discover(sim.root, api_key=API_KEY)

    def check(info: Any) -> list[str]:
        return [] if info.get("max_running_requests") == 16 else [
            f"max_running_requests={info.get('max_running_requests')!r}, rendered 16"]

    with pytest.raises(idle.BusyError, match="max_running_requests=8, rendered 16"):
        bench.run_bench(endpoint, workloads=["coding"], concurrency=[1], waves=1, c1_samples=1, warmup="none",
                        server_check=check)
    report = bench.run_bench(endpoint, workloads=["coding"], concurrency=[1], waves=1, c1_samples=1,
                             warmup="none", server_check=lambda info: [])
    assert report.identity_checked is not None and report.identity_checked["max_running_requests"] == 8


def test_a_server_that_changes_between_suites_keeps_what_was_measured(start_sim: Callable[..., Sim]) -> None:
    # The coding suite ran on the profile's server; before prose /server_info no longer matches:
    # the coding levels are kept and the run fails naming why the rest did not run.
    sim = start_sim()
    calls: list[int] = []

    def check(info: Any) -> list[str]:
        calls.append(1)
        return [] if len(calls) == 1 else ["max_running_requests=8, rendered 16"]

    report = bench.run_bench(discover(sim.root, api_key=API_KEY), workloads=["coding", "prose"],
                             concurrency=[1], waves=1, c1_samples=1, warmup="none", server_check=check)
    assert [lvl.workload.name for lvl in report.levels] == ["coding"] and report.levels[0].measured
    (error,) = report.suite_errors
    assert "max_running_requests=8, rendered 16" in error and "from prose on were not run" in error
    assert error in report.errors


@pytest.mark.timing
def test_bench_ladder_definitions_c16_and_prefill(start_sim: Callable[..., Sim], tmp_path: Path) -> None:
    # 8 slots, as the profiles serve; a slow prefill so TTFT is large enough to separate the definitions.
    sim = start_sim(
        SPARKCTL_SIM_TOKEN_RATE="200", SPARKCTL_SIM_PREFILL_RATE="20000", SPARKCTL_SIM_TTFT_S="0.3"
    )
    report = bench.run_bench(
        discover(sim.root, api_key=API_KEY),
        workloads=["prose"],
        concurrency=[1, 16],
        waves=1,
        warmup="none",
        prefill_sizes=[4096, 65_536],
    )
    assert not report.errors, report.errors
    c1, c16 = report.levels
    assert c1.definition == "post-first-token" and len(c1.batches) == 1
    assert len(c16.batches[0].requests) == 16
    assert c16.definition == "post-first-token"
    # Half of C16 waits for a slot: its TTFT includes a whole decode (256 tokens at 200/s: 1.28 s), and
    # the batch aggregate reads low.
    ttft = c16.to_dict()["ttft_s"]
    assert ttft["max"] > 1.2 > 0.5 > ttft["min"]
    batch = c16.batches[0]
    assert batch.post_first_token_tps > batch.aggregate_tps
    data = json.loads(bench.write_report(report, tmp_path).read_text())
    assert data["simulator"] is True and data["server_info"]["simulator"] is True
    assert data["workloads"]["prose"]["sha256"] == bench.load_builtin("prose").sha256
    level = data["levels"][1]
    assert level["workload_sha256"] == data["workloads"]["prose"]["sha256"]
    assert level["definition"] == "post-first-token" and level["queued"].startswith("8 of 16")
    # M1 pins no sparkDash version or prompt: listed, not compared.
    assert level["published"] == [] and [p["label"] for p in level["published_not_compared"]] == ["M1"]
    assert set(level["headline_tps"]) == {"mean", "min", "median", "max", "n", "samples"}
    sweep = data["prefill"]
    assert sweep["served_context_length"] == CONTEXT
    small, big = sweep["points"]
    assert small["size"] == "4K" and small["clamped"] is None and small["published"][0]["size"] == "4K"
    assert abs(small["prompt_tokens"] - 4096) < 200
    assert big["clamped"] == f"clamped from 65,536 to {CONTEXT - 1024:,} tokens (served context {CONTEXT:,})"
    assert big["prefill_tps"]["mean"] > 0 and big["ttft_s"] > (CONTEXT - 1024) / 20_000


# ----------------------------------------------------------------------------------------------- CLI
@pytest.fixture
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables and progress lines unwrapped, so assertions read whole phrases."""
    from sparkctl import ui

    monkeypatch.setattr(ui.console, "width", 250)


HEAT = {"max_temp_c": 71.0, "min_sm_clock_ratio_under_load": 0.98, "max_power_w": 95.0,
        "nodes": {"spark-0": {"max_temp_c": 71.0}}, "warnings": ["spark-0 (rank 0) GPU 0: 86 °C"]}

HEATS: list[qa_fakes.Heat] = []  # each run's GPU sampler (it counts the times it was asked to read)


def _identity(cluster: Any, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A source identity block as gather() makes it, for a cluster that is one simulator."""
    from sparkctl.qa.identity import NodeIdentity, ProfileIdentity, SourceIdentity, workload_identity

    block = SourceIdentity(
        sparkctl_version="0.1.0",
        profile=ProfileIdentity(name=cluster.profile.name, file_sha256=None, resolved_sha256="0" * 64),
        kit=None, image=None, checkpoint={"source": "dir"},
        workloads=workload_identity(kwargs.get("workloads") or []),
        nodes=[NodeIdentity(name="spark-0", rank=0, kernel="6.8", checkpoint={"config_sha256": "1" * 64})],
        gathered="before the run",
    )
    return block.model_dump(mode="json"), {"profile": cluster.profile.name, "argv": ["--host", "<address>"]}


def _fake_cluster(sim: Sim, profile_name: str = "lab") -> types.SimpleNamespace:
    """What qa reads of a Cluster: the head's address, the API port, the key, the profile, its
    serving groups (none: a site of one group, measured on its rank 0)."""
    from sparkctl.profiles import load_profile

    key = types.SimpleNamespace(resolve=lambda: API_KEY)
    return types.SimpleNamespace(
        head=types.SimpleNamespace(mgmt_ip="127.0.0.1"),
        ports=types.SimpleNamespace(api=sim.port),
        secrets={"api_key": key},
        profile=load_profile(profile_name),
        groups=[],
    )


@pytest.mark.usefixtures("wide_console")
def test_cli_qualify_and_bench(
    start_sim: Callable[..., Sim],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    run_cli: Callable[..., Any],
) -> None:
    from sparkctl.cli import qa as cli_qa

    sim = start_sim(SPARKCTL_SIM_TOKEN_RATE="400")
    monkeypatch.setattr(cli_qa, "_load", lambda ctx: _fake_cluster(sim, "r4-nvme"))
    qa_fakes.use(monkeypatch, qa_fakes.qa_tools(heat=HEAT, heats=HEATS, identity=_identity))
    results = tmp_path / "results"
    res = run_cli("qualify", "--suite", "quick", "--json", "--results", str(results))
    assert res.code == 0, res.out + res.err
    doc = json.loads(res.out)
    assert doc["passed"] and doc["simulator"] is True and doc["suite"] == "quick"
    assert doc["skipped"] == []
    assert Path(doc["results_dir"]).parent == results
    assert doc["memory_guard"]["lowest_gib"] == 20.5  # recorded next to R4's receipt
    assert json.loads((Path(doc["results_dir"]) / "memory-guard.json").read_text())["r4_published_lowest_gib"]
    assert doc["thermals"] == HEAT  # the GPU maxima of the run, in the report too
    on_disk = json.loads((Path(doc["results_dir"]) / "report.json").read_text())
    assert on_disk["thermals"] == HEAT
    # The GPUs were read before and after the suite only; the result says how, and what produced it.
    assert doc["telemetry"]["gpu_checkpoints"] == HEATS[-1].reads == 2
    assert doc["telemetry"]["gpu_queries_inside_windows"] == 0
    assert on_disk["source_identity"] == doc["source_identity"]
    SourceIdentity.model_validate(doc["source_identity"])
    for name in ("source-identity.json", "measurement-summary.json", "measured-profile.json"):
        assert (Path(doc["results_dir"]) / name).is_file()
    summary = json.loads((Path(doc["results_dir"]) / "measurement-summary.json").read_text())
    assert summary["kind"] == "qualify"
    # A breach during the run fails it, whatever the checks said.
    breach = "spark-2: MemAvailable 1.90 GiB below the floor 2.50 GiB"
    qa_fakes.use(monkeypatch, qa_fakes.qa_tools(breach=breach, heat=HEAT, heats=HEATS, identity=_identity))
    res = run_cli("qualify", "--suite", "quick", "--results", str(results))
    assert res.code == 1 and "memory guard: spark-2: MemAvailable 1.90 GiB" in " ".join(res.out.split())
    qa_fakes.use(monkeypatch, qa_fakes.qa_tools(heat=HEAT, heats=HEATS, identity=_identity))

    plot = tmp_path / "ladder.png"
    res = run_cli(
        "bench", "--concurrency", "1,4", "--workload", "coding", "--repeats", "1", "--c1-samples", "1",
        "--no-warmup", "--prefill", "none", "--plot", str(plot), "--results", str(results),
    )  # fmt: skip
    assert res.code == 0, res.out + res.err
    assert "simulator" in res.out and "211.81" in res.out and "R4 suite 1" in res.out
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert len(list(results.glob("bench-*/bench.json"))) == 1
    bench_doc = json.loads(next(results.glob("bench-*/bench.json")).read_text())
    assert bench_doc["thermals"] == HEAT
    SourceIdentity.model_validate(bench_doc["source_identity"])
    digests = [w["sha256"] for w in bench_doc["source_identity"]["workloads"]]
    assert digests == [published.WORKLOAD_SHA256["coding"]]
    assert bench_doc["telemetry"]["gpu_queries_inside_windows"] == 0
    assert bench_doc["telemetry"]["gpu_checkpoints"] == HEATS[-1].reads >= 2
    checks = [c["when"] for c in bench_doc["idle_checks"]]
    assert checks == ["before the coding suite", "after the coding suite"]
    summary = json.loads(next(results.glob("bench-*/measurement-summary.json")).read_text())
    assert summary["kind"] == "bench" and summary["levels"][0]["published"]["R4 suite 1"] == 82.71
    out = " ".join(res.out.split())
    assert "GPU during the run: max 71 °C (spark-0), lowest SM clock under load 0.98× max, max 95 W" in out
    assert "warning: spark-0 (rank 0) GPU 0: 86 °C" in out


@pytest.mark.usefixtures("wide_console")
def test_cli_qualify_exits_1_naming_the_failed_check(
    start_sim: Callable[..., Sim],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    run_cli: Callable[..., Any],
) -> None:
    from sparkctl.cli import qa as cli_qa
    from sparkctl.profiles import load_profile

    sim = start_sim(SPARKCTL_SIM_FAULT="wrong-arithmetic")
    monkeypatch.setattr(cli_qa, "_load", lambda ctx: _fake_cluster(sim))
    qa_fakes.use(monkeypatch, qa_fakes.qa_tools(heat=HEAT, heats=HEATS, identity=_identity))
    res = run_cli("qualify", "--suite", "full", "--results", str(tmp_path))
    assert res.code == 1, res.out + res.err
    assert "failed: text, arithmetic, text-after, arithmetic-after\n" in res.out, res.out
    if not load_profile("lab").args.get("--enable-multimodal"):
        assert "skipped: profile lab does not set --enable-multimodal" in res.out
    assert "simulator" in res.out


# Another client's request must be seen running within seconds (as in test_qa_qualify_idle.py):
# `make test` runs it first, alone.
@pytest.mark.timing
def test_cli_bench_refuses_a_busy_server_with_one_json_error(
    start_sim: Callable[..., Sim],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    run_cli: Callable[..., Any],
) -> None:
    from sparkctl.cli import qa as cli_qa

    sim = start_sim(SPARKCTL_SIM_TOKEN_RATE="20")
    monkeypatch.setattr(cli_qa, "_load", lambda ctx: _fake_cluster(sim, "r4-nvme"))
    qa_fakes.use(monkeypatch, qa_fakes.qa_tools(heat=HEAT, heats=HEATS, identity=_identity))
    body = {"model": MODEL, "max_tokens": 400, "messages": [{"role": "user", "content": "Write."}]}

    def someone_else() -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(f"{sim.root}/v1/chat/completions", json=body, timeout=60,
                       headers={"Authorization": f"Bearer {API_KEY}"})

    threading.Thread(target=someone_else, daemon=True).start()
    endpoint = discover(sim.root, api_key=API_KEY)
    deadline = time.monotonic() + 5
    while idle.read_load(endpoint).idle and time.monotonic() < deadline:
        time.sleep(0.05)
    res = run_cli("bench", "--json", "--quick", "--concurrency", "1", "--prefill", "none",
                  "--results", str(tmp_path / "results"))
    assert res.code == 1, res.out + res.err
    error = json.loads(res.out)["error"]
    assert error["message"].startswith("rank 0 is busy before the coding suite: 1 running, 0 waiting")
    assert "wait for the other clients" in error["hint"]
    assert not list((tmp_path / "results").glob("bench-*/bench.json"))  # nothing measured, nothing kept
    sim.kill()  # not the graceful stop: it would wait out the other client's 20 s request


@pytest.mark.timing
def test_the_simulator_prefills_one_request_at_a_time(start_sim: Callable[..., Sim]) -> None:
    # One engine: prompts arriving together queue for the prefill, so TTFT grows with concurrency.
    sim = start_sim(SPARKCTL_SIM_PREFILL_RATE="4000", SPARKCTL_SIM_TTFT_S="0")
    endpoint = discover(sim.root, api_key=API_KEY)
    prompt = " ".join(["word"] * 1200)  # ~0.3 s of prefill each

    async def four() -> bench.Batch:
        client = stream_client(endpoint)
        try:
            return await bench.run_batch(client, endpoint.model, [f"[{i}] {prompt}" for i in range(4)], 4)
        finally:
            await client.close()

    batch = asyncio.run(four())
    assert batch.ok, batch.errors
    ttfts = sorted(r.ttft for r in batch.requests)
    one = batch.requests[0].prompt_tokens / 4000
    assert ttfts[0] == pytest.approx(one, rel=0.5)
    assert ttfts[-1] == pytest.approx(4 * one, rel=0.25), ttfts


def test_cli_qualify_refuses_a_server_serving_another_configuration(
    start_sim: Callable[..., Sim],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    run_cli: Callable[..., Any],
) -> None:
    """As bench, the qualify command compares `/server_info` with the profile before it sends a probe."""
    from sparkctl.cli import qa as cli_qa

    sim = start_sim()
    monkeypatch.setattr(cli_qa, "_load", lambda ctx: _fake_cluster(sim))
    seen: list[Any] = []

    def differs(info: Any) -> list[str]:
        seen.append(info)
        return ["--context-length: the profile renders 32768, the server runs 4096"]

    tools = qa_fakes.qa_tools(heat=HEAT, heats=HEATS, identity=_identity, server_problems=differs)
    qa_fakes.use(monkeypatch, tools)
    res = run_cli("qualify", "--json", "--suite", "quick", "--results", str(tmp_path / "results"))
    assert res.code == 1, res.out + res.err
    error = json.loads(res.out)["error"]
    assert "--context-length: the profile renders 32768, the server runs 4096" in error["message"], error
    assert seen and seen[0]["simulator"] is True  # compared against what the server itself reports
    assert not list((tmp_path / "results").rglob("report.json"))  # nothing measured
