"""qualify and bench on the lab: four simulated ranks behind real systemd units, over the lab network.

The cluster is brought to serving the way `make demo` does it (provision → stage → up) unless an
earlier test already left rank 0 ready.
"""

from __future__ import annotations

import json
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
def serving(lab: Lab) -> Lab:
    if not _ready(lab):
        for verb in (["provision"], ["stage"], ["up", "--yes"]):  # --yes: ranks may run, not ready
            proc = lab.run_sparkctl(*verb, timeout=900)
            what = " ".join(verb)
            assert proc.returncode == 0, (
                f"sparkctl {what} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
    assert _ready(lab)
    return lab


def test_qualify_full_passes_on_the_lab(serving: Lab, tmp_path: Path) -> None:
    proc = serving.run_sparkctl("qualify", "--suite", "full", "--results", str(tmp_path), json_out=True)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, [(c["name"], c["detail"]) for c in doc["checks"] if not c["passed"]]
    assert doc["passed"] and doc["simulator"] is True
    assert [c["name"] for c in doc["checks"]] == [
        "plain", "arithmetic", "image-one", "image-four", "json", "tool", "needle", "determinism",
    ]  # fmt: skip
    evidence = Path(doc["results_dir"])
    assert {p.name for p in evidence.iterdir()} >= {"report.json", "needle.json", "arithmetic.json"}


def test_bench_writes_json_table_and_plot(serving: Lab, tmp_path: Path) -> None:
    from sparkctl.model import load_inventory

    rate = load_inventory(serving.inventory).profile.simulator.token_rate
    plot = tmp_path / "ladder.png"
    args = ("--concurrency", "1,4", "--workload", "coding", "--repeats", "2", "--plot", str(plot))
    proc = serving.run_sparkctl("bench", *args, "--results", str(tmp_path), json_out=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["simulator"] is True and not doc["errors"]
    assert "compared to nothing" in doc["published"]  # the lab profile publishes no figures
    c1 = next(lvl for lvl in doc["levels"] if lvl["concurrency"] == 1)
    assert c1["headline_tps"]["median"] == pytest.approx(rate, rel=0.05)
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert Path(doc["results_json"]).is_file()

    table = serving.run_sparkctl("bench", *args, "--results", str(tmp_path), env={"COLUMNS": "200"})
    assert table.returncode == 0
    assert "simulator" in table.stdout and "compared to nothing" in table.stdout
