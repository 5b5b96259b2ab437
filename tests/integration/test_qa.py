"""qualify and bench on the lab: four simulated ranks behind real systemd units, over the lab network.

The cluster is brought to serving the way `make demo` does it (provision → stage → up) unless an
earlier test already left rank 0 ready.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

if TYPE_CHECKING:
    from conftest import Lab  # tests/integration/conftest.py: the session fixture's handle

pytestmark = pytest.mark.integration


def _ready(lab: Lab) -> bool:
    from sparkctl.model import load_inventory

    cluster = load_inventory(lab.inventory)
    try:
        resp = httpx.get(f"http://{cluster.head.mgmt_ip}:{cluster.ports.api}/ready", timeout=3)
    except httpx.HTTPError:
        return False
    return resp.status_code == 200


@pytest.fixture(scope="module")
def serving(lab: Lab) -> Iterator[Lab]:
    """The group serving: the one test_monitoring_lab left up when it ran just before, else started
    here the way `make demo` does it. Stopped at the end."""
    if not _ready(lab):
        for verb in (["provision"], ["stage"], ["up", "--yes"]):  # --yes: ranks may run, not ready
            proc = lab.run_sparkctl(*verb, timeout=900)
            what = " ".join(verb)
            assert proc.returncode == 0, (
                f"sparkctl {what} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
    assert _ready(lab)
    yield lab
    lab.run_sparkctl("down", timeout=600)


def test_qualify_full_passes_on_the_lab(serving: Lab, tmp_path: Path) -> None:
    from sparkctl.qa.qualify import CHECKS

    proc = serving.run_sparkctl("qualify", "--suite", "full", "--results", str(tmp_path), json_out=True)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, [(c["name"], c["detail"]) for c in doc["checks"] if not c["passed"]]
    assert doc["passed"] and doc["simulator"] is True and doc["skipped"] == []
    acceptance = ["text", "arithmetic", "image-one", "image-four", "json", "tool"]
    names = [c["name"] for c in doc["checks"]]
    after = [f"{n}-after" for n in acceptance]
    assert names == list(CHECKS) == [*acceptance, "needle", *after, "determinism"]
    phases = {c["name"]: c["phase"] for c in doc["checks"]}
    assert phases["image-four"] == "before" and phases["image-four-after"] == "after"
    evidence = Path(doc["results_dir"])
    assert {p.name for p in evidence.iterdir()} >= {
        "report.json", "needle.json", "text.json", "text-after.json", "image-four-after.json",
        "memory-guard.json",
    }  # fmt: skip
    # R4's probes, answered by the simulator in the lab's engine image from the probe file it carries
    one = json.loads((evidence / "image-one.json").read_text())["data"]
    assert json.loads(one["answer"]) == one["expected"] == {
        "code": "NORTH 7314", "left_shape": "red square", "right_shape": "blue circle",
    }
    four = json.loads((evidence / "image-four.json").read_text())["data"]
    assert json.loads(four["answer"]) == ["NORTH 7314", "SOUTH 8265", "EAST 1948", "WEST 5620"]
    needle = json.loads((evidence / "needle.json").read_text())["data"]
    assert needle["published_sizes"] is False  # the lab's 32K context is too small for R4's sizes
    assert all(r["passed"] and r["found"] and r["sized"] for r in needle["rungs"])
    # What produced it, and no GPU read during the suite (before and after it only).
    from sparkctl.qa.identity import SourceIdentity

    assert len(SourceIdentity.model_validate(doc["source_identity"]).nodes) == 4
    assert doc["telemetry"]["gpu_checkpoints"] == 2 and doc["telemetry"]["gpu_queries_inside_windows"] == 0
    assert {"source-identity.json", "measurement-summary.json", "measured-profile.json"} <= {
        p.name for p in evidence.iterdir()}
    memory = doc["memory_guard"]
    assert memory["r4_published_lowest_gib"] == 19.52 and set(memory["vs_r4_receipt_gib"]) == set(
        memory["lowest_mem_available_gib"]
    )


def test_bench_writes_json_table_and_plot(serving: Lab, tmp_path: Path) -> None:
    from sparkctl.model import load_inventory

    rate = load_inventory(serving.inventory).profile.simulator.token_rate
    plot = tmp_path / "ladder.png"
    # The short warm-up of --quick: R4's (three standard requests, then one full-length batch per
    # level) is counted token by token against the simulator in tests/unit/test_qa_sim.py.
    args = (
        "--quick", "--concurrency", "1,4,16", "--repeats", "2", "--c1-samples", "3",
        "--prefill", "4K,16K,32K,64K,128K", "--plot", str(plot),
    )  # fmt: skip
    proc = serving.run_sparkctl("bench", *args, "--results", str(tmp_path), json_out=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["simulator"] is True and not doc["errors"]
    # R4's suites, M1's prefill, and the reference sets of the same coding bytes at C1.
    assert set(doc["published_sources"]) == {"r4-s1", "r4-s2", "m1", "r4-sweep", "tony-rep1", "tony-rep2",
                                             "tony-exl3", "tony-boot10", "sg17-tp8"}
    levels = {(lvl["workload"], lvl["concurrency"]): lvl for lvl in doc["levels"]}
    assert set(levels) == {(w, c) for w in ("coding", "prose") for c in (1, 4, 16)}
    for (workload, c), lvl in levels.items():
        assert lvl["workload_sha256"] == doc["workloads"][workload]["sha256"]
        assert set(lvl["headline_tps"]) >= {"mean", "min", "median", "max", "samples"}
        assert lvl["ttft_s"]["mean"] > 0
        want = "post-first-token" if workload == "prose" else ("decode-per-stream" if c == 1 else "batch")
        assert lvl["definition"] == want
    assert levels[("coding", 1)]["headline_tps"]["n"] == 3 and levels[("coding", 4)]["headline_tps"]["n"] == 2
    assert levels[("coding", 1)]["headline_tps"]["mean"] == pytest.approx(rate, rel=0.05)
    # M1 pins no sparkDash version or prompt: its C16 figure is listed as not compared, never drawn.
    assert levels[("prose", 16)]["published"] == []
    assert [p["label"] for p in levels[("prose", 16)]["published_not_compared"]] == ["M1"]
    assert [p["label"] for p in levels[("coding", 1)]["published"]] == [
        "R4 suite 1", "R4 suite 2", "R4 sweep", "Tony EXL3 rep 1", "Tony EXL3 rep 2", "Tony EXL3",
        "Tony boot 10", "SG17 TP8"]
    assert levels[("prose", 16)]["queued"]  # the lab serves 8 slots
    prose_c1 = levels[("prose", 1)]
    assert prose_c1["headline_tps"]["n"] == 2 and prose_c1["excluded_warmup_batches"] == 0
    # The publishers' workloads, byte for byte: the digests the published figures were measured with.
    from sparkctl.qa import published
    from sparkctl.qa.identity import SourceIdentity

    for name in ("coding", "prose"):
        assert doc["workloads"][name]["sha256"] == published.WORKLOAD_SHA256[name]
    identity = SourceIdentity.model_validate(doc["source_identity"])
    pinned = [published.WORKLOAD_SHA256[n] for n in ("coding", "prose")]
    assert [w.sha256 for w in identity.workloads] == pinned
    assert len(identity.nodes) == 4 and all(n.error is None and n.kernel for n in identity.nodes)
    assert all(n.checkpoint["config_sha256"] for n in identity.nodes)
    results = Path(doc["results_json"]).parent
    for name in ("source-identity.json", "measurement-summary.json", "measured-profile.json"):
        assert (results / name).is_file()
    # Idle before and after each suite; the prose regime's 4,096-token prefill once per trial.
    assert [c["when"] for c in doc["idle_checks"]] == [
        f"{when} the {suite} suite" for suite in ("coding", "prose") for when in ("before", "after")]
    assert all(c["running"] == 0 and c["waiting"] == 0 for c in doc["idle_checks"])
    assert [p["trial"] for p in doc["trial_prefills"]] == [1, 2]
    telemetry = doc["telemetry"]
    assert telemetry["gpu_queries_inside_windows"] == 0 and telemetry["gpu_checkpoints"] >= 4
    sweep = doc["prefill"]["points"]
    assert [p["size"] for p in sweep] == ["4K", "16K", "32K", "64K", "128K"]
    assert sweep[2]["clamped"] and sweep[3]["skipped"] and sweep[4]["skipped"]  # the lab's context is 32K
    assert all(p["prefill_tps"]["mean"] > 0 for p in sweep[:3])
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert json.loads(Path(doc["results_json"]).read_text())["memory_guard"]["samples"] > 0

    quick = ("--quick", "--concurrency", "1,4", "--workload", "coding", "--plot", str(plot))
    table = serving.run_sparkctl("bench", *quick, "--results", str(tmp_path), env={"COLUMNS": "250"})
    assert table.returncode == 0
    assert "simulator" in table.stdout and "R4 suite 2" in table.stdout and "prefill sweep" in table.stdout


CALL_LOG = "/run/sparkctl-sim/nvml-calls.log"  # sparkctl_sim.nvml.CALL_LOG


def test_no_node_reads_its_gpu_for_bench_inside_a_timed_window(serving: Lab, tmp_path: Path) -> None:
    # Each node's simulated NVML notes every reading while its call log exists; the readings of
    # bench's thermal probe (a `python3 -` process over SSH) must all fall between bench's windows.
    for node in serving.nodes:
        serving.exec(node, "sh", "-c", f"mkdir -p /run/sparkctl-sim && : > {CALL_LOG}")
    try:
        args = ("--quick", "--concurrency", "1,4", "--prefill", "4K")
        proc = serving.run_sparkctl("bench", *args, "--results", str(tmp_path), json_out=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        doc = json.loads(proc.stdout)
        spans = doc["telemetry"]["window_spans"]
        reads: list[float] = []
        for node in serving.nodes:
            log = serving.exec(node, "cat", CALL_LOG).stdout
            reads += [float(line.split()[0]) for line in log.splitlines() if line.split()[2:] == ["-"]]
    finally:
        for node in serving.nodes:
            serving.exec(node, "rm", "-f", CALL_LOG, check=False)
    assert len(spans) == doc["telemetry"]["timed_windows"] > 0
    assert reads, "the thermal probe never read a GPU: no checkpoint ran"
    inside = [t for t in reads if any(start <= t <= end for start, end in spans)]
    assert inside == [], f"{len(inside)} GPU reading(s) inside a timed window"


@contextlib.contextmanager
def _someone_else(serving: Lab) -> Iterator[None]:
    """Someone else's long streamed request running on rank 0 while the block runs: its first chunk
    read (it holds a slot: the server counts it running), then closed, which ends it on the server (a
    streamed request whose client went away is dropped at its next chunk), and rank 0 idle again
    before the block's caller goes on (the tests after it measure)."""
    from sparkctl.model import load_inventory
    from sparkctl.render.rank import served_model_name

    cluster = load_inventory(serving.inventory)
    key = serving.api_key_file.read_text().strip()
    body = {"model": served_model_name(cluster), "max_tokens": 4000, "ignore_eos": True, "stream": True,
            "messages": [{"role": "user", "content": "Write at length."}]}
    url = f"http://{cluster.head.mgmt_ip}:{cluster.ports.api}"
    with httpx.Client(timeout=120, headers={"Authorization": f"Bearer {key}"}) as http:
        with http.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
            assert reply.status_code == 200, reply.read()[:500]
            # The first chunk: the request is running. The iterator is kept until the block ends
            # (dropped, it would close the response, and the server would end the request at once).
            chunks = reply.iter_raw()
            first = next(chunks)
            loads = http.get(f"{url}/v1/loads").json()
            assert loads["num_running_reqs"] == 1, (first[:300], loads)
            yield
            del chunks
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            loads = http.get(f"{url}/v1/loads").json()["loads"]
            if sum(e["num_running_reqs"] + e["num_waiting_reqs"] for e in loads) == 0:
                return
            time.sleep(0.1)
        raise AssertionError(f"rank 0 still busy 60 s after the request was closed: {loads}")


def test_bench_refuses_a_busy_server_on_the_lab(serving: Lab, tmp_path: Path) -> None:
    with _someone_else(serving):
        proc = serving.run_sparkctl("bench", "--quick", "--concurrency", "1", "--workload", "coding",
                                    "--prefill", "none", "--results", str(tmp_path), json_out=True)
    assert proc.returncode == 1, proc.stdout[-2000:]
    error = json.loads(proc.stdout)["error"]
    assert "rank 0 is busy before the coding suite: 1 running" in error["message"]


def test_qualify_checks_idle_and_refuses_a_busy_server_on_the_lab(serving: Lab, tmp_path: Path) -> None:
    proc = serving.run_sparkctl("qualify", "--suite", "quick", "--results", str(tmp_path), json_out=True)
    assert proc.returncode == 0, proc.stdout[-2000:]
    doc = json.loads(proc.stdout)
    assert [(r["when"], r["running"], r["waiting"]) for r in doc["idle"]] == [
        ("before the qualify suite", 0, 0), ("after the qualify suite", 0, 0)]
    assert doc["busy_after"] is None

    refused = tmp_path / "refused"
    with _someone_else(serving):
        proc = serving.run_sparkctl("qualify", "--suite", "quick", "--results", str(refused), json_out=True)
    assert proc.returncode == 1, proc.stdout[-2000:]
    error = json.loads(proc.stdout)["error"]
    assert "rank 0 is busy before the qualify suite: 1 running" in error["message"]
    assert not list(refused.glob("qualify-*"))  # nothing measured, nothing kept


# --------------------------------------------------------------------------------- R4's protocols
# One short run each (the lab's time budget): one level, one sample, no prefill sweep.
SHORT = ("--quick", "--concurrency", "1", "--workload", "coding", "--repeats", "1", "--c1-samples", "1",
         "--prefill", "none")


def test_bench_after_long_runs_the_long_request_between_two_suites_on_the_lab(
    serving: Lab, tmp_path: Path
) -> None:
    from sparkctl.qa import haystack

    proc = serving.run_sparkctl("bench", *SHORT, "--after-long", "--results", str(tmp_path), json_out=True,
                                timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    after = doc["protocols"]["after_long"]
    long = after["long_request"]
    # The lab serves a 32K context: R4's sizes do not fit, the needle is scaled to it (and says so).
    assert long["error"] is None and long["in_window"] and long["published_size"] is False
    assert long["filler_units"] == max(haystack.rungs(32768)[0])
    assert doc["levels"][0]["suite"] == 1 and after["levels"][0]["suite"] == 2
    assert [p["label"] for p in after["levels"][0]["published"]][:1] == ["R4 suite 2"]
    assert "R4 suite 2" not in [p["label"] for p in doc["levels"][0]["published"]]
    suite = ["before the coding suite", "after the coding suite"]
    assert [c["when"] for c in doc["idle_checks"]] == suite * 2
    assert doc["telemetry"]["gpu_queries_inside_windows"] == 0
    assert Path(doc["plot"]).read_bytes().startswith(b"\x89PNG")


def test_bench_arrivals_runs_a_frozen_schedule_on_the_lab(serving: Lab, tmp_path: Path) -> None:
    import hashlib

    schedule = tmp_path / "arrivals.jsonl"
    schedule.write_text(
        '{"at": 0.0, "workload": "coding"}\n'
        '{"at": 0.5, "workload": "mixed", "category": "summary"}\n'
        '{"id": "note", "at": 1.0, "budget": 64, "prompt": "Rewrite this note calmly: the export failed."}\n'
    )
    digest = hashlib.sha256(schedule.read_bytes()).hexdigest()
    proc = serving.run_sparkctl("bench", "--repeats", "1", "--arrivals", f"{schedule}@{digest}",
                                "--results", str(tmp_path), json_out=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    result = doc["protocols"]["arrivals"]
    assert doc["levels"] == [] and result["sha256"] == digest
    assert (result["cohorts"], result["completed"], result["failed"]) == (1, 3, 0)
    assert result["excluded_warmup_cohort"]["completed"] == 3
    assert result["throughput_tps"] > 0 and result["latency_s"]["p95"] >= result["latency_s"]["median"] > 0
    assert doc["telemetry"]["gpu_queries_inside_windows"] == 0
    wrong = serving.run_sparkctl("bench", "--arrivals", f"{schedule}@{'0' * 64}", "--results", str(tmp_path),
                                 json_out=True)
    assert wrong.returncode == 2
    assert "does not match the pinned" in json.loads(wrong.stdout)["error"]["message"]


def test_bench_ab_switches_the_group_between_baseline_and_lever_on_the_lab(
    serving: Lab, tmp_path: Path
) -> None:
    # The lever: the simulated ranks decode twice as fast (the lab's stand-in for a speculation
    # setting); the group is brought down and up with it, then back, between the three arms.
    from sparkctl.model import load_inventory

    simulator = load_inventory(serving.inventory).profile.simulator
    assert simulator is not None
    rate = simulator.token_rate
    variant = tmp_path / "fast.yml"
    variant.write_text(f"simulator:\n  token_rate: {2 * rate}\n")
    proc = serving.run_sparkctl("bench", *SHORT, "--ab", str(variant), "--results", str(tmp_path),
                                json_out=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ab = json.loads(proc.stdout)["protocols"]["ab"]
    assert ab["order"] == ["baseline", "lever", "baseline"] and ab["variant"]["name"] == "fast"
    assert [a["switch"] and a["switch"]["arm"] for a in ab["arms"]] == [None, "lever", "baseline"]
    (diff,) = ab["differences"]
    assert diff["value"] == "coding C1" and diff["difference_pct"] > 50
    # The group serves the baseline again afterwards.
    assert _ready(serving)
    assert load_inventory(serving.inventory).profile.simulator == simulator
