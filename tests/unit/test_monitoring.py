"""Monitoring renderers: the exporter unit and firewall opening, the Prometheus scrape configuration
(checked by promtool where Debian's prometheus is installed), and the shipped Grafana dashboard
(schema essentials; every series it reads is one the exporter or SGLang publishes)."""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import generate_latest
from support.node_tree import fake_net, fake_shards

from sparkctl.model import Runtime, SecretRef, load_inventory
from sparkctl.nodeside import exporter, probe
from sparkctl.profiles import load_profile
from sparkctl.render import host, monitoring, node_files
from sparkctl_lab import rootfs
from sparkctl_sim.config import parse_argv
from sparkctl_sim.knobs import load_knobs
from sparkctl_sim.rank import RankProcess

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example"
ROLE = Path(__file__).resolve().parents[2] / "roles" / "spark_exporter"
KEY = "sk-monitoring-test-value-never-printed"

# What Grafana needs of a dashboard to import it and draw these panels (the essentials of its
# dashboard schema): panels with unique ids, a type and a grid position; Prometheus targets with a
# refId and an expression; the datasource chosen through a template variable.
DATASOURCE = {"type": "object", "required": ["type", "uid"],
              "properties": {"type": {"const": "prometheus"}, "uid": {"const": "${datasource}"}}}
GRID = {"type": "object", "required": ["h", "w", "x", "y"],
        "properties": {"w": {"type": "integer", "minimum": 1, "maximum": 24},
                       "x": {"type": "integer", "minimum": 0, "maximum": 23},
                       "h": {"type": "integer", "minimum": 1}, "y": {"type": "integer", "minimum": 0}}}
TARGET = {"type": "object", "required": ["refId", "expr", "datasource"],
          "properties": {"refId": {"type": "string", "minLength": 1},
                         "expr": {"type": "string", "minLength": 1}, "datasource": DATASOURCE}}
PANEL = {
    "type": "object",
    "required": ["id", "type", "title", "gridPos"],
    "properties": {"id": {"type": "integer", "minimum": 1}, "title": {"type": "string", "minLength": 1},
                   "type": {"enum": ["row", "timeseries", "stat", "gauge", "table", "state-timeline"]},
                   "gridPos": GRID},
    "if": {"properties": {"type": {"const": "row"}}},
    "then": {"required": ["panels", "collapsed"]},
    "else": {"required": ["datasource", "targets"],
             "properties": {"datasource": DATASOURCE,
                            "targets": {"type": "array", "minItems": 1, "items": TARGET}}},
}
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["title", "uid", "schemaVersion", "panels", "templating", "time"],
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "schemaVersion": {"type": "integer", "minimum": 36},
        "panels": {"type": "array", "minItems": 1, "items": PANEL},
        "templating": {"type": "object", "required": ["list"], "properties": {"list": {
            "type": "array",
            "contains": {"type": "object", "required": ["name", "type", "query"],
                         "properties": {"name": {"const": "datasource"}, "type": {"const": "datasource"},
                                        "query": {"const": "prometheus"}}},
        }}},
    },
}


@pytest.fixture(scope="module")
def example() -> Any:
    return load_inventory(EXAMPLE)


def test_dashboard_loads_and_meets_the_schema() -> None:
    doc = monitoring.dashboard()
    jsonschema.validate(doc, SCHEMA)
    ids = [p["id"] for p in doc["panels"]] + [q["id"] for p in doc["panels"] for q in p.get("panels", [])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in doc["panels"]:
        assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), p["title"]
    titles = " ".join(p["title"] for p in doc["panels"]).lower()
    for panel in ("tokens per second", "time to first token", "queued", "kv cache", "gpu temperature",
                  "sm clock", "memory available", "link errors"):
        assert panel in titles


def test_dashboard_queries_what_the_exporter_and_sglang_publish(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline, against the simulator's /metrics and one exporter scrape of a fake node."""
    series = monitoring.dashboard_series(monitoring.dashboard())
    assert "sglang:time_to_first_token_seconds_bucket" in series and "sparkctl_gpu_sm_clock_hertz" in series
    cfg = parse_argv(["serve", "--model-path", "/m", "--served-model-name", "m", "--enable-metrics",
                      "--speculative-algorithm", "DSPARK", "--speculative-dspark-block-size", "5"])
    sim = RankProcess(cfg, load_knobs()).metrics_text()
    fake_net(tmp_path / "net", "eth9")
    fake_shards(tmp_path / "engram", rank=0)
    monkeypatch.setattr(probe, "unit_state", lambda unit: {"active": "active", "up_s": 1.0})
    monkeypatch.setattr(probe, "local_http", lambda port, path: 200)
    node = exporter.Config(port=0, health_port=1, rank=0, tp=4, engram_dir=str(tmp_path / "engram"),
                           nvme_mount=str(tmp_path), fabric=[exporter.FabricPort("eth9", "")],
                           net_root=str(tmp_path / "net"), ib_root=str(tmp_path / "ib"))
    # The lab's NVML stand-in, as the lab's exporter uses it.
    node_text = generate_latest(exporter.registry_for(node, exporter.Nvml("sparkctl_sim.nvml"))).decode()
    published = {line.split("{")[0].split(" ")[0] for line in (sim + node_text).splitlines()
                 if line and not line.startswith("#")}
    assert [s for s in series if s not in published] == []


def test_scrape_config_every_node_and_rank0_with_a_key_file(example: Any, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", KEY)
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY)
    text = monitoring.scrape_config(example, api_key_file=str(key_file), interval_s=20)
    assert KEY not in text
    doc = yaml.safe_load(text)
    assert doc["global"]["scrape_interval"] == "20s"
    nodes, sglang = doc["scrape_configs"]
    assert nodes["job_name"] == "sparkctl-nodes"
    assert [sc["targets"] for sc in nodes["static_configs"]] == [[f"192.168.7.1{i}:9477"] for i in range(4)]
    assert nodes["static_configs"][2]["labels"] == {"cluster": "example", "node": "spark-2", "rank": "2"}
    assert sglang["static_configs"] == [{"targets": ["192.168.7.10:8004"],
                                         "labels": {"cluster": "example", "node": "spark-0", "rank": "0"}}]
    assert sglang["authorization"] == {"type": "Bearer", "credentials_file": str(key_file)}
    promtool = shutil.which("promtool")
    if promtool:  # Debian's prometheus package (make apt) brings it
        conf = tmp_path / "prometheus.yml"
        conf.write_text(text)
        proc = subprocess.run([promtool, "check", "config", "--syntax-only", str(conf)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_scrape_config_key_file_reference_and_no_key(example: Any) -> None:
    ref = SecretRef(file="secrets/api-key")
    with_file = example.model_copy(update={"secrets": {"api_key": ref}})
    path = monitoring.api_key_file(with_file)
    assert path == str(EXAMPLE.absolute() / "secrets" / "api-key")
    assert monitoring.api_key_file(example) is None  # {env: ...}: no file to point at
    open_api = example.model_copy(update={"secrets": {}})
    assert "authorization" not in monitoring.scrape_config(open_api, api_key_file="/ignored")


def test_exporter_unit_and_firewall(example: Any) -> None:
    node = example.node("spark-1")
    files, modes = node_files(example, node)
    unit = files[monitoring.EXPORTER_UNIT_FILE]
    assert modes[monitoring.EXPORTER_UNIT_FILE] == "0644"
    argv = monitoring.exporter_argv(example, node)
    assert argv[:3] == [monitoring.EXPORTER_PYTHON, "-m", "nodeside.exporter"]
    opts = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert (opts["--listen"], opts["--port"]) == ("192.168.7.11", "9477")
    assert (opts["--rank"], opts["--tp"]) == ("1", "4")
    assert opts["--health-port"] == "8004" and opts["--engram-dir"] == "/mnt/nvme/engram-tp4"
    fabric = [b for a, b in itertools.pairwise(argv) if a == "--fabric"]
    assert fabric == [f"{p.netdev}:{p.hca}" for p in node.fabric_ports] and len(fabric) == 2
    assert "--nvml-module" not in argv
    assert "CapabilityBoundingSet=\n" in unit and "ProtectSystem=strict" in unit
    assert f"WorkingDirectory={monitoring.EXPORTER_DIR}" in unit
    assert "[Install]" in unit and "Restart=always" in unit
    nft = host.firewall(example, node)
    assert "ip saddr @admin_sources tcp dport 9477 accept" in nft
    lab = example.model_copy(update={"runtime": Runtime(kind="lab"), "profile": load_profile("lab")})
    lab_unit = monitoring.exporter_unit(lab, node)
    assert "--nvml-module sparkctl_sim.nvml" in lab_unit
    assert f"PYTHONPATH={monitoring.EXPORTER_DIR}:{monitoring.LAB_SIM_PATH}" in lab_unit


def _role_defaults() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    return doc


def test_role_ships_every_module_the_exporter_imports() -> None:
    shipped = _role_defaults()["spark_exporter_modules"]
    files = ROLE / "files" / "nodeside"
    assert all((files / name).is_file() for name in shipped)
    wanted, seen = ["exporter"], set()
    while wanted:  # the relative imports, transitively
        name = wanted.pop()
        seen.add(name)
        for line in (files / f"{name}.py").read_text().splitlines():
            if line.startswith("from . import "):
                names = [m.strip() for m in line[len("from . import "):].split(",")]
                wanted += [m for m in names if m not in seen]
    assert {f"{m}.py" for m in seen} | {"__init__.py"} == set(shipped)


def test_lab_rootfs_bakes_in_the_exporters_packages() -> None:
    """The lab nodes have no network: what the role installs must already be in the lab's rootfs."""
    assert set(_role_defaults()["spark_exporter_packages"]) <= set(rootfs.ROOTFS_PACKAGES)
