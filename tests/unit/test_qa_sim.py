"""qualify and bench end to end against the rank simulator on loopback (single node, ``--nnodes 1``).

Each test starts its own ``sparkctl-sim-rank serve`` process with the SGLang argv a real rank gets and
the simulator's environment knobs, waits for ``/ready``, and talks to it only over 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkctl.qa import bench, haystack, qualify
from sparkctl.qa.endpoint import discover

pytest.importorskip("sparkctl_sim.rank", reason="the rank simulator's server has not landed")

API_KEY = "qa-test-key"
MODEL = "deepseek-v41-flash"
CONTEXT = 32768


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    report = qualify.qualify_endpoint(endpoint, "full", out, haystack.ladder(CONTEXT))
    assert [c.name for c in report.checks] == list(qualify.CHECKS)
    assert report.passed, [(c.name, c.detail) for c in report.checks if not c.passed]
    for check in report.checks:
        evidence = json.loads((out / f"{check.name}.json").read_text())
        assert evidence["passed"] and evidence["simulator"] is True
        assert evidence["exchanges"], check.name
        assert all("request" in e and "response" in e for e in evidence["exchanges"])
    needle = json.loads((out / "needle.json").read_text())["data"]["rungs"]
    assert [r["target_tokens"] for r in needle] == haystack.ladder(CONTEXT)
    assert all(haystack.within(r["target_tokens"], r["prompt_tokens"]) for r in needle)
    summary = json.loads((out / "report.json").read_text())
    assert summary["passed"] and summary["simulator"] is True
    assert summary["server_info"]["simulator"] is True  # what was qualified, recorded beside the verdict


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


@pytest.mark.timing
def test_bench_ladder_definitions_c16_and_prefill(start_sim: Callable[..., Sim], tmp_path: Path) -> None:
    # 8 slots, as the profiles serve; a slow prefill so TTFT is large enough to separate the definitions.
    sim = start_sim(
        SPARKCTL_SIM_TOKEN_RATE="100", SPARKCTL_SIM_PREFILL_RATE="20000", SPARKCTL_SIM_TTFT_S="0.3"
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
    # Half of C16 waits for a slot: its TTFT includes a whole decode, and the batch aggregate reads low.
    ttft = c16.to_dict()["ttft_s"]
    assert ttft["max"] > 2.0 > 0.5 > ttft["min"]
    batch = c16.batches[0]
    assert batch.post_first_token_tps > batch.aggregate_tps
    data = json.loads(bench.write_report(report, tmp_path).read_text())
    assert data["simulator"] is True and data["server_info"]["simulator"] is True
    assert data["workloads"]["prose"]["sha256"] == bench.load_builtin("prose").sha256
    level = data["levels"][1]
    assert level["workload_sha256"] == data["workloads"]["prose"]["sha256"]
    assert level["definition"] == "post-first-token" and level["queued"].startswith("8 of 16")
    assert [p["label"] for p in level["published"]] == ["M1"]
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


class _QuietGuard:
    """The memory guard's seam for a simulator on this machine (no nodes to sample over SSH)."""

    def __init__(self, breach: str | None = None) -> None:
        self.record_dir = None
        self._breach = breach

    def summary(self) -> dict[str, Any]:
        return {"samples": 3, "lowest_gib": 20.5, "r4_published_lowest_gib": 19.52, "breach": self._breach}


def _no_guard(breach: str | None = None) -> Any:
    @contextlib.contextmanager
    def guard(cluster: Any) -> Any:
        yield _QuietGuard(breach)

    return guard


HEAT = {"max_temp_c": 71.0, "min_sm_clock_ratio_under_load": 0.98, "max_power_w": 95.0,
        "nodes": {"spark-0": {"max_temp_c": 71.0}}, "warnings": ["spark-0 (rank 0) GPU 0: 86 °C"]}


@contextlib.contextmanager
def _quiet_thermals(cluster: Any) -> Any:
    """The GPU sampler of qualify and bench, with canned maxima (no nodes to read here)."""
    yield types.SimpleNamespace(summary=lambda: HEAT)


def _fake_cluster(sim: Sim, profile_name: str = "lab") -> types.SimpleNamespace:
    """What qa reads of a Cluster: the head's address, the API port, the key, the profile."""
    from sparkctl.profiles import load_profile

    key = types.SimpleNamespace(resolve=lambda: API_KEY)
    return types.SimpleNamespace(
        head=types.SimpleNamespace(mgmt_ip="127.0.0.1"),
        ports=types.SimpleNamespace(api=sim.port),
        secrets={"api_key": key},
        profile=load_profile(profile_name),
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
    monkeypatch.setattr(cli_qa, "_guard", _no_guard())
    monkeypatch.setattr(cli_qa, "_thermals", _quiet_thermals)
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
    assert json.loads((Path(doc["results_dir"]) / "report.json").read_text())["thermals"] == HEAT
    # A breach during the run fails it, whatever the checks said.
    breach = "spark-2: MemAvailable 1.90 GiB below the floor 2.50 GiB"
    monkeypatch.setattr(cli_qa, "_guard", _no_guard(breach))
    res = run_cli("qualify", "--suite", "quick", "--results", str(results))
    assert res.code == 1 and "memory guard: spark-2: MemAvailable 1.90 GiB" in " ".join(res.out.split())
    monkeypatch.setattr(cli_qa, "_guard", _no_guard())

    plot = tmp_path / "ladder.png"
    res = run_cli(
        "bench", "--concurrency", "1,4", "--workload", "coding", "--repeats", "1", "--c1-samples", "1",
        "--no-warmup", "--prefill", "none", "--plot", str(plot), "--results", str(results),
    )  # fmt: skip
    assert res.code == 0, res.out + res.err
    assert "simulator" in res.out and "211.81" in res.out and "R4 suite 1" in res.out
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert len(list(results.glob("bench-*/bench.json"))) == 1
    assert json.loads(next(results.glob("bench-*/bench.json")).read_text())["thermals"] == HEAT
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
    monkeypatch.setattr(cli_qa, "_guard", _no_guard())
    monkeypatch.setattr(cli_qa, "_thermals", _quiet_thermals)
    res = run_cli("qualify", "--suite", "full", "--results", str(tmp_path))
    assert res.code == 1, res.out + res.err
    assert "failed: text, arithmetic, text-after, arithmetic-after\n" in res.out, res.out
    if not load_profile("lab").args.get("--enable-multimodal"):
        assert "skipped: profile lab does not set --enable-multimodal" in res.out
    assert "simulator" in res.out


@pytest.mark.timing
def test_the_simulator_prefills_one_request_at_a_time(start_sim: Callable[..., Sim]) -> None:
    # One engine: prompts arriving together queue for the prefill, so TTFT grows with concurrency.
    sim = start_sim(SPARKCTL_SIM_PREFILL_RATE="4000", SPARKCTL_SIM_TTFT_S="0")
    endpoint = discover(sim.root, api_key=API_KEY)
    prompt = " ".join(["word"] * 1200)  # ~0.3 s of prefill each

    async def four() -> bench.Batch:
        client = endpoint.async_client()
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
