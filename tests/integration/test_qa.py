"""qualify and bench on the lab: four simulated ranks behind real systemd units, over the lab network.

The cluster is brought to serving the way `make demo` does it (provision → stage → up) unless an
earlier test already left rank 0 ready.
"""

from __future__ import annotations

import json
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
    assert set(doc["published_sources"]) == {"r4-s1", "r4-s2", "m1"}
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
    assert [p["label"] for p in levels[("prose", 16)]["published"]] == ["M1"]
    assert levels[("prose", 16)]["queued"]  # the lab serves 8 slots
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
