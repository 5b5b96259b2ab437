"""The router in front of the serving groups (``sparkctl_router``): its argv, unit and firewall rules.

SGLang's gateway runs on the node the site names as ``sparkctl-router.service``, from a venv the
spark_router role builds out of the pinned wheel it copies from the controller. Its workers are the
groups' rank-0 APIs (``groups.endpoints``, the one list of them); clients reach the router's port
from ``sparkctl_api_allow``, as they reached rank 0's API before. The groups' API port then answers
only the router node, the rank peers (fabric) and the admin sources (sparkctl's own status, qualify
and per-group bench), so every client request goes through the router.

The API key (``sparkctl_secrets.api_key``) never appears here: the role writes it to a 0600 file
that the unit hands the launcher as a systemd credential (``sparkctl.nodeside.router_launch``).
Pure like the rest of ``render``: the same cluster gives the same text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkctl.render import common as c
from sparkctl.render import groups

if TYPE_CHECKING:  # annotations only: render never imports the model at run time
    from sparkctl.model.cluster import Cluster, Node
    from sparkctl.model.router import Router

UNIT_NAME = "sparkctl-router.service"
# The journal's SYSLOG_IDENTIFIER of the gateway's lines (its stdout and stderr).
IDENTIFIER = "sparkctl-router"
UNIT_FILE = f"/etc/systemd/system/{UNIT_NAME}"
DIR = "/opt/sparkctl/router"  # the launcher (nodeside/), the venv, the staged wheel
VENV = f"{DIR}/venv"
PYTHON = f"{VENV}/bin/python"
WHEELS = f"{DIR}/wheels"  # where the role copies the pinned wheel before installing it
LAUNCHER = "nodeside.router_launch"
KEY_FILE = f"{c.ETC_DIR}/router-api-key"  # 0600, root's; the unit's credential source
CREDENTIAL = "api_key"
# Seconds systemd waits before restarting a router that exited with an error.
RESTART_S = 5


def router_node(cluster: Cluster) -> Node | None:
    """The node the router runs on (None on a site without one)."""
    r = cluster.router
    return None if r is None else cluster.node(r.node)


def has_key(cluster: Cluster) -> bool:
    """The router requires the site's API key from clients (and sends it to the groups)."""
    return "api_key" in cluster.secrets


def worker_urls(cluster: Cluster) -> list[str]:
    """The groups' rank-0 APIs, in the site's group order: the gateway's ``--worker-urls``."""
    return [e.url for e in groups.endpoints(cluster)]


def url(cluster: Cluster) -> str:
    """Where clients reach the router: its node's management address and ``sparkctl_router.port``."""
    node, r = _required(cluster)
    return f"http://{node.mgmt_ip}:{r.port}"


def metrics_url(cluster: Cluster) -> str:
    node, r = _required(cluster)
    return f"http://{node.mgmt_ip}:{r.metrics_port}/metrics"


def _required(cluster: Cluster) -> tuple[Node, Router]:
    r = cluster.router
    if r is None:
        raise ValueError("the site has no sparkctl_router")
    return cluster.node(r.node), r


def gateway_argv(cluster: Cluster) -> list[str]:
    """The gateway's own arguments (its ``launch`` command's), without the API key."""
    node, r = _required(cluster)
    return [
        "--worker-urls", *worker_urls(cluster),
        "--policy", r.policy,
        "--host", "0.0.0.0",
        "--port", str(r.port),
        # Prometheus on the management address only (the firewall opens it to the admin sources).
        "--prometheus-host", str(node.mgmt_ip),
        "--prometheus-port", str(r.metrics_port),
        "--request-timeout-secs", str(r.request_timeout_s),
    ]


def launch_argv(cluster: Cluster) -> list[str]:
    """What the unit runs: the launcher, in the router's venv, then the gateway's arguments."""
    _, r = _required(cluster)
    argv = [PYTHON, "-m", LAUNCHER, "--module", r.module]
    if has_key(cluster):
        argv += ["--key-credential", CREDENTIAL]
    return [*argv, "--", *gateway_argv(cluster)]


def unit(cluster: Cluster) -> str:
    """sparkctl-router.service: started by `sparkctl up` after the groups, stopped by `down` before
    them; restarted by systemd when it dies (the groups behind it are not touched)."""
    node, r = _required(cluster)
    names = ", ".join(g.name for g in cluster.groups)
    lines = [
        c.header(f"SGLang's gateway ({r.package}) in front of the groups of {cluster.name}").rstrip(),
        "[Unit]",
        f"Description=sparkctl router {r.package} on {node.name} ({r.policy}) over groups {names}",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=exec",
        f"WorkingDirectory={DIR}",
        f"Environment=PYTHONPATH={DIR} PYTHONDONTWRITEBYTECODE=1",
    ]
    if has_key(cluster):
        # The key reaches the launcher as a credential (a file only this service reads), never argv.
        lines.append(f"LoadCredential={CREDENTIAL}:{KEY_FILE}")
    lines += [
        f"ExecStart={c.systemd_command(launch_argv(cluster))}",
        "# A request router: no root, no capability, nothing writable.",
        "DynamicUser=yes",
        "CapabilityBoundingSet=",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "ProtectKernelTunables=yes",
        "ProtectControlGroups=yes",
        "# Supervised: a router that dies is started again; the groups behind it keep serving.",
        "Restart=on-failure",
        f"RestartSec={RESTART_S}",
        "TimeoutStopSec=30",
        f"SyslogIdentifier={IDENTIFIER}",
        "",
        "# No [Install] section: `sparkctl up` starts it once the groups are up, `down` stops it.",
    ]
    return "\n".join(lines) + "\n"


# --- firewall -------------------------------------------------------------------------------------


def api_rules(cluster: Cluster, node: Node, api_port: int) -> list[str]:
    """The nftables rules of ``node``'s input chain for the groups' API port and the router.

    Without a router: the API from ``sparkctl_api_allow`` (the ``api_clients`` set), as always.
    With one: the API from the router node, the admin sources and the rank peers only (the peers'
    rule accepts them further down); the router's port from ``api_clients`` and its metrics from
    the admin sources, on the router node."""
    r = cluster.router
    if r is None:
        return ["# The OpenAI API (rank 0) and every rank's /health.",
                f"ip saddr @api_clients tcp dport {api_port} accept"]
    front = cluster.node(r.node)
    sources = [str(front.mgmt_ip), *(str(p.ip) for p in front.fabric_ports)]
    rules = [
        f"# The groups' API (rank 0) and every rank's /health: clients use the router on {front.name};",
        "# the router node and the admin sources (sparkctl's own probes) reach it directly.",
        f"ip saddr {{ {', '.join(sources)} }} tcp dport {api_port} accept",
        f"ip saddr @admin_sources tcp dport {api_port} accept",
    ]
    if node.name == front.name:
        rules += [
            f"# The router ({r.package}, {r.policy}): the clients' OpenAI API, and its Prometheus metrics.",
            f"ip saddr @api_clients tcp dport {r.port} accept",
            f"ip saddr @admin_sources tcp dport {r.metrics_port} accept",
        ]
    return rules


# --- what the role reads --------------------------------------------------------------------------


def entry(cluster: Cluster) -> dict[str, Any]:
    """The router's values for the spark_router role and for `status` (the vars plugin hands them
    to every host as ``sparkctl_router``): where it runs, what it installs, what it serves."""
    node, r = _required(cluster)
    return {
        "node": node.name,
        "package": r.package,
        "distribution": r.distribution,
        "version": r.version,
        "module": r.module,
        "sha256": r.digests,  # per architecture (uname -m)
        "wheel_dir": str(r.wheel_path(cluster.inventory_dir)),  # on the controller
        "policy": r.policy,
        "port": r.port,
        "metrics_port": r.metrics_port,
        "url": url(cluster),
        "health_url": f"http://{node.mgmt_ip}:{r.port}/health",
        "metrics_url": metrics_url(cluster),
        "workers": [{"group": e.group, "node": e.node, "url": e.url} for e in groups.endpoints(cluster)],
        "unit": UNIT_NAME,
        "identifier": IDENTIFIER,
        "unit_file": UNIT_FILE,
        "dir": DIR,
        "venv": VENV,
        "python": PYTHON,
        "wheels": WHEELS,
        "key_file": KEY_FILE if has_key(cluster) else None,
    }
