"""Monitoring on the lab: a real Prometheus (Debian's package) scrapes every node's exporter and the
simulated rank 0's SGLang /metrics with the configuration `sparkctl monitoring config` generates, and
has series for every metric the shipped Grafana dashboard queries.

Needs the lab (tests/integration/conftest.py) and `prometheus` on the controller (`make apt`).
The exporter's scrape time per node (curl, median of 10) is printed and written to
``$SPARKCTL_RESULTS/monitoring-scrape.json`` when that is set.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from support.ports import free_port as _free_port

from sparkctl.render import monitoring

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]
EXPORTER_UNIT = monitoring.EXPORTER_UNIT_NAME
EXPORTER_PORT = 9477  # the model's default; the lab inventory does not set sparkctl_ports.exporter


def _ok(proc: Any, what: str) -> None:
    tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{what} exited {proc.returncode}\n{tail}"


def _get(url: str, headers: dict[str, str] | None = None, body: Any = None, timeout: float = 30) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(url, data=data, headers=hdrs)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def serving(lab: Lab) -> Lab:
    """Provisioned (exporters included), staged and up; a few requests so SGLang's series move."""
    _ok(lab.run_sparkctl("provision", timeout=900), "provision")
    lab.ensure_staged()
    _ok(lab.run_sparkctl("up", "--yes", timeout=600), "up")
    key = lab.api_key_file.read_text().strip()
    url = f"http://{lab.mgmt_ip('spark-0')}:8004/v1/chat/completions"
    for words in ("Say hello.", "Count to five.", "Name a colour."):
        body = {"model": "deepseek-v41-flash", "max_tokens": 24,
                "messages": [{"role": "user", "content": words}]}
        _get(url, {"Authorization": f"Bearer {key}"}, body)
    # Left serving: test_qa, next in the session's order (conftest.MODULE_ORDER), qualifies and
    # benches this group instead of starting another, and stops it.
    return lab


@pytest.fixture(scope="module")
def prometheus(serving: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's Prometheus on a loopback port, with the generated configuration and its own storage."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed on the controller (make apt installs Debian's package)")
    tmp = tmp_path_factory.mktemp("prometheus")
    conf = tmp / "prometheus.yml"
    _ok(serving.run_sparkctl("monitoring", "config", "--interval", "2", "-o", str(conf)), "monitoring config")
    text = conf.read_text()
    assert serving.api_key_file.read_text().strip() not in text
    port = _free_port()
    log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [binary, f"--config.file={conf}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    log.close()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _targets(prom: str) -> list[dict[str, Any]]:
    doc = _get(f"{prom}/api/v1/targets?state=active")
    return list(doc["data"]["activeTargets"])


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    doc = _get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def test_exporters_run_on_every_node(serving: Lab) -> None:
    for node in NODES:
        state = serving.ssh(node, f"systemctl is-active {EXPORTER_UNIT}", check=False).stdout.strip()
        assert state == "active", f"{node}: {EXPORTER_UNIT} is {state}"


def test_exporter_role_again_and_in_check_mode_changes_nothing(serving: Lab) -> None:
    for extra in ([], ["--check"]):
        proc = serving.run_sparkctl("provision", "--tags", "exporter", *extra, json_out=True, timeout=600)
        _ok(proc, f"provision --tags exporter {' '.join(extra)}")
        changed = {h: s["changed"] for h, s in json.loads(proc.stdout)["hosts"].items()}
        assert all(n == 0 for n in changed.values()), (extra, changed)


def test_prometheus_scrapes_every_node_and_finds_every_dashboard_series(prometheus: str) -> None:
    deadline = time.monotonic() + 90
    targets: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        try:
            targets = _targets(prometheus)
        except OSError:
            targets = []
        if len(targets) == len(NODES) + 1 and all(t["health"] == "up" for t in targets):
            break
        time.sleep(1)
    by_job = sorted((t["labels"]["job"], t["labels"]["node"], t["health"], t.get("lastError", ""))
                    for t in targets)
    want = [("sparkctl-nodes", n, "up", "") for n in NODES] + [("sglang", "spark-0", "up", "")]
    assert by_job == sorted(want)
    time.sleep(5)  # a few more scrapes, so rate() windows have two points
    missing, per_node = [], {}
    for series in monitoring.dashboard_series(monitoring.dashboard()):
        result = _query(prometheus, series)
        if not result:
            missing.append(series)
        elif series.startswith("sparkctl_"):
            per_node[series] = sorted({r["metric"]["node"] for r in result})
    assert missing == [], f"no series in Prometheus for: {missing}"
    assert {s: nodes for s, nodes in per_node.items() if nodes != NODES} == {}
    # The queries themselves evaluate (histogram_quantile, rate over the dashboard's variables).
    tokens = _query(prometheus, 'sum(sglang:generation_tokens_total{cluster=~".*"})')
    assert float(tokens[0]["value"][1]) > 0
    assert _query(prometheus, 'sparkctl_rank_unit_active{job="sparkctl-nodes"} == 1')
    assert len(_query(prometheus, "sparkctl_rank_ready == 1")) == len(NODES)


def test_exporter_scrape_time_per_node(serving: Lab) -> None:
    times: dict[str, float] = {}
    for node in NODES:
        url = f"http://{serving.mgmt_ip(node)}:{EXPORTER_PORT}/metrics"
        samples = []
        for _ in range(10):
            out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", url],
                                 capture_output=True, text=True, timeout=30, check=True).stdout.split()
            assert out[0] == "200", f"{node}: {out}"
            samples.append(float(out[1]))
        times[node] = round(statistics.median(samples) * 1000, 1)
    report = {"exporter_scrape_ms_median_of_10": times}
    print(f"\nexporter scrape time per node (curl, median of 10): {json.dumps(times)} ms")
    results = os.environ.get("SPARKCTL_RESULTS")
    if results:
        Path(results).mkdir(parents=True, exist_ok=True)
        (Path(results) / "monitoring-scrape.json").write_text(json.dumps(report, indent=2) + "\n")
    assert all(ms < 1000 for ms in times.values()), times


def test_generated_config_names_every_node(serving: Lab, tmp_path: Path) -> None:
    conf = tmp_path / "p.yml"
    _ok(serving.run_sparkctl("monitoring", "config", "-o", str(conf)), "monitoring config")
    doc = yaml.safe_load(conf.read_text())
    nodes = doc["scrape_configs"][0]["static_configs"]
    assert [sc["targets"] for sc in nodes] == [[f"{serving.mgmt_ip(n)}:{EXPORTER_PORT}"] for n in NODES]
    assert doc["scrape_configs"][1]["authorization"]["credentials_file"] == str(serving.api_key_file)
