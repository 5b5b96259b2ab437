"""Monitoring: the node exporter's unit, the Prometheus scrape configuration, the Grafana dashboard.

Pure like the rest of ``render``: the same cluster gives the same text. The exporter itself
(``sparkctl.nodeside.exporter``) runs on each node as ``sparkctl-exporter.service``, installed by
roles/spark_exporter; its unit carries everything it watches as options. The scrape configuration
(``sparkctl monitoring config``) has one job for the exporters and one for rank 0's SGLang
``/metrics`` (``--enable-metrics`` in every profile), each target labelled ``cluster``, ``node`` and
``rank``. The API key never appears: Prometheus reads it from a file (``credentials_file``).
The dashboard is shipped package data (``sparkctl/monitoring/grafana-dashboard.json``), read as is.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sparkctl.render import common as c

if TYPE_CHECKING:  # annotations only: render never imports the model at run time
    from sparkctl.model.cluster import Cluster, Node


EXPORTER_UNIT_NAME = "sparkctl-exporter.service"
EXPORTER_UNIT_FILE = f"/etc/systemd/system/{EXPORTER_UNIT_NAME}"
# The exporter's code (nodeside/, copied from the package) and the venv that runs it (system site
# packages: python3-prometheus-client from apt; nvidia-ml-py where a GPU exists).
EXPORTER_DIR = "/opt/sparkctl/exporter"
EXPORTER_VENV = f"{EXPORTER_DIR}/venv"
EXPORTER_PYTHON = f"{EXPORTER_VENV}/bin/python"
EXPORTER_MODULE = "nodeside.exporter"
# The lab has no GPU: its exporter reads the simulator's stand-in for NVML (installed by
# spark_runtime's lab tasks under this prefix), so the GPU panels have series there too.
LAB_SIM_PATH = "/opt/sparkctl_sim/current"
LAB_NVML_MODULE = "sparkctl_sim.nvml"

JOB_NODES = "sparkctl-nodes"
JOB_SGLANG = "sglang"
DASHBOARD = ("monitoring", "grafana-dashboard.json")
# Series sparkctl's dashboard reads: SGLang's own (sglang:…) and the exporter's (sparkctl_…).
_SERIES = re.compile(r"\b(sglang:[a-z0-9_:]+|sparkctl_[a-z0-9_]+)")
_NOT_NAMES = re.compile(r"\{[^}]*\}|\[[^\]]*\]|\b(?:by|without)\s*\([^)]*\)")


def exporter_argv(cluster: Cluster, node: Node) -> list[str]:
    """What the exporter unit runs on ``node``: everything it watches, as options."""
    argv = [
        EXPORTER_PYTHON, "-m", EXPORTER_MODULE,
        "--listen", str(node.mgmt_ip),
        "--port", str(cluster.ports.exporter),
        "--unit", c.RANK_UNIT_NAME,
        "--health-port", str(cluster.ports.api),
        "--rank", str(node.rank),
        "--tp", str(cluster.profile.tp_size),
        "--nvme-mount", str(cluster.paths.nvme_mount),
    ]
    # Only profiles whose ranks read packed shards have them staged (as serve.probe decides).
    if "DSV41_PACKED_DIR" in (cluster.profile.env or {}):
        argv += ["--engram-dir", str(cluster.paths.engram_dir)]
    for port in node.fabric_ports:
        argv += ["--fabric", f"{port.netdev}:{port.hca}"]
    if cluster.profile.simulator is not None:
        argv += ["--nvml-module", LAB_NVML_MODULE]
    return argv


def exporter_unit(cluster: Cluster, node: Node) -> str:
    """sparkctl-exporter.service: always on, read-only and without capabilities, restarted when it dies."""
    path = EXPORTER_DIR + (f":{LAB_SIM_PATH}" if cluster.profile.simulator is not None else "")
    return f"""{c.header(f"Prometheus metrics of {node.name} (node exporter)").rstrip()}
[Unit]
Description=sparkctl node exporter of {node.name} (http://{node.mgmt_ip}:{cluster.ports.exporter}/metrics)
Wants=network-online.target
After=network-online.target

[Service]
Type=exec
WorkingDirectory={EXPORTER_DIR}
Environment=PYTHONPATH={path} PYTHONDONTWRITEBYTECODE=1
ExecStart={c.systemd_command(exporter_argv(cluster, node))}
# Reading only: root without any capability (systemctl reaches systemd over its private socket,
# which needs uid 0; a dynamic user would need D-Bus and a name service that knows it), nothing
# writable. It binds the management address, so it restarts until that address is up.
CapabilityBoundingSet=
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ProtectKernelTunables=yes
ProtectControlGroups=yes
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
"""


def api_key_file(cluster: Cluster) -> str | None:
    """The controller-side file of the API key, when the inventory references it by file."""
    ref = cluster.secrets.get("api_key")
    if ref is None or ref.file is None:
        return None
    path = Path(ref.file).expanduser()
    return str(path if path.is_absolute() else Path(cluster.inventory_dir).absolute() / path)


def scrape_config(cluster: Cluster, *, api_key_file: str | None, interval_s: int = 15) -> str:
    """A prometheus.yml scraping every node's exporter and rank 0's SGLang /metrics.

    ``api_key_file`` is where Prometheus reads the API key (bearer token) from; None when the API
    has no key. The key itself is never part of the text.
    """
    def labels(node: Node) -> dict[str, str]:
        return {"cluster": str(cluster.name), "node": str(node.name), "rank": str(node.rank)}

    nodes = sorted(cluster.nodes, key=lambda n: n.rank)
    exporters = [{"targets": [f"{n.mgmt_ip}:{cluster.ports.exporter}"], "labels": labels(n)} for n in nodes]
    head = cluster.head
    sglang: dict[str, Any] = {
        "job_name": JOB_SGLANG,
        "metrics_path": "/metrics",
        "static_configs": [{"targets": [f"{head.mgmt_ip}:{cluster.ports.api}"], "labels": labels(head)}],
    }
    if cluster.secrets.get("api_key") is not None and api_key_file:
        sglang["authorization"] = {"type": "Bearer", "credentials_file": api_key_file}
    doc = {
        "global": {"scrape_interval": f"{interval_s}s", "scrape_timeout": f"{min(interval_s, 10)}s"},
        "scrape_configs": [{"job_name": JOB_NODES, "static_configs": exporters}, sglang],
    }
    head_note = (
        f"# rank 0's /metrics carries the API key as a bearer token read from {api_key_file}\n"
        if "authorization" in sglang else ""
    )
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    return c.header(f"Prometheus scrape configuration of {cluster.name}") + head_note + body


def dashboard_text() -> str:
    """The shipped Grafana dashboard (JSON text, as packaged)."""
    return resources.files("sparkctl").joinpath(*DASHBOARD).read_text(encoding="utf-8")


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(dashboard_text())
    return doc


def dashboard_queries(doc: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and template variable queries."""
    exprs = []
    for panel in doc.get("panels", []):
        for inner in [panel, *panel.get("panels", [])]:
            exprs += [t["expr"] for t in inner.get("targets", []) if t.get("expr")]
    for var in doc.get("templating", {}).get("list", []):
        query = var.get("query")
        if var.get("type") == "query":
            exprs.append(query.get("query", "") if isinstance(query, dict) else str(query or ""))
    return exprs


def dashboard_series(doc: dict[str, Any]) -> list[str]:
    """The metric names the dashboard's queries read (label matchers, ranges and groupings left out)."""
    names: set[str] = set()
    for expr in dashboard_queries(doc):
        names.update(_SERIES.findall(_NOT_NAMES.sub(" ", expr)))
    return sorted(names)
