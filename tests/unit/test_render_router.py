"""render.router: the gateway's argv, its unit and the firewall rules a router brings."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.model import Cluster, load_inventory
from sparkctl.render import host, plan_document, router

REPO = Path(__file__).resolve().parents[2]
TWO_GROUPS = REPO / "inventory" / "examples" / "switch-2xtp4"
KEY = "router-test-key-4f1b"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCTL_API_KEY", KEY)
    inv = tmp_path / "site"
    shutil.copytree(TWO_GROUPS, inv)
    return inv


def _load(inv: Path, router_section: dict[str, Any] | None, **more: Any) -> Cluster:
    path = inv / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(path.read_text())
    doc.pop("sparkctl_router", None)  # the example's own
    if router_section is not None:
        doc["sparkctl_router"] = router_section
    doc.update(more)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_inventory(inv)


def _heads(cluster: Cluster) -> list[str]:
    return [f"http://{cluster.node(g.head).mgmt_ip}:{cluster.ports.api}" for g in cluster.groups]


def test_the_gateway_routes_to_each_groups_rank_0(site: Path) -> None:
    cluster = _load(site, {"node": "spark-0", "policy": "round_robin", "port": 8889, "metrics_port": 29000})
    node = cluster.node("spark-0")
    assert router.gateway_argv(cluster) == [
        "--worker-urls", *_heads(cluster),
        "--policy", "round_robin",
        "--host", "0.0.0.0",
        "--port", "8889",
        "--prometheus-host", str(node.mgmt_ip),
        "--prometheus-port", "29000",
        "--request-timeout-secs", "1800",
    ]
    assert len(_heads(cluster)) == 2 and _heads(cluster)[0] != _heads(cluster)[1]


def test_the_launcher_runs_the_pinned_packages_module_with_the_key_as_a_credential(site: Path) -> None:
    cluster = _load(site, {"node": "spark-4", "package": "sglang-router==0.3.2"})
    argv = router.launch_argv(cluster)
    assert argv[:8] == [router.PYTHON, "-m", "nodeside.router_launch", "--module", "sglang_router",
                        "--key-credential", "api_key", "--"]
    assert argv[8:] == router.gateway_argv(cluster)
    unit = router.unit(cluster)
    assert f"LoadCredential=api_key:{router.KEY_FILE}\n" in unit
    assert KEY not in unit and KEY not in " ".join(argv) and "--api-key" not in unit


def test_without_an_api_key_the_router_is_open_like_rank_0(site: Path) -> None:
    cluster = _load(site, {"node": "spark-0"}, sparkctl_secrets={})
    assert "--key-credential" not in router.launch_argv(cluster)
    assert "LoadCredential" not in router.unit(cluster)
    assert router.entry(cluster)["key_file"] is None


def test_the_unit_is_supervised_and_unprivileged(site: Path) -> None:
    unit = router.unit(_load(site, {"node": "spark-0"}))
    for line in ("Restart=on-failure", f"RestartSec={router.RESTART_S}", "DynamicUser=yes",
                 "NoNewPrivileges=yes", "ProtectSystem=strict", "Type=exec",
                 f"WorkingDirectory={router.DIR}"):
        assert f"\n{line}\n" in unit, line
    assert "\n[Install]\n" not in unit  # `up` starts it after the groups, like the ranks
    assert "Description=sparkctl router smg==1.13.0 on spark-0 (cache_aware) over groups a, b" in unit


def test_the_plan_puts_the_unit_and_the_roles_values_on_the_router_node_only(site: Path) -> None:
    cluster = _load(site, {"node": "spark-4", "wheel_dir": "wheels"})
    doc = plan_document(cluster)
    on = {e["name"]: e for e in doc["nodes"]}
    assert router.UNIT_FILE in on["spark-4"]["files"]
    assert on["spark-4"]["file_modes"][router.UNIT_FILE] == "0644"
    others = [e for n, e in on.items() if n != "spark-4"]
    assert all(router.UNIT_FILE not in e["files"] and "router" not in e for e in others)
    entry = on["spark-4"]["router"]
    assert entry == doc["router"]
    assert entry["wheel_dir"] == str((site / "wheels").absolute())
    assert entry["sha256"]["aarch64"] == "5276328560354dca26ea9f454694c3d56994fb5a41c323c8edf97508181d2d7e"
    assert [w["group"] for w in entry["workers"]] == ["a", "b"]
    assert entry["url"] == f"http://{cluster.node('spark-4').mgmt_ip}:8889"
    assert "router" not in plan_document(_load(site, None))


def _rules(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


def test_the_router_node_opens_the_router_to_the_api_clients(site: Path) -> None:
    cluster = _load(site, {"node": "spark-0", "port": 8889, "metrics_port": 29000})
    rules = _rules(host.firewall(cluster, cluster.node("spark-0")))
    assert "ip saddr @api_clients tcp dport 8889 accept" in rules
    assert "ip saddr @admin_sources tcp dport 29000 accept" in rules
    other = _rules(host.firewall(cluster, cluster.node("spark-5")))
    assert not any("dport 8889" in r or "dport 29000" in r for r in other)


def test_behind_a_router_the_groups_api_answers_the_router_node_and_the_admins_only(site: Path) -> None:
    cluster = _load(site, {"node": "spark-0"})
    front = cluster.node("spark-0")
    sources = ", ".join([str(front.mgmt_ip), *(str(p.ip) for p in front.fabric_ports)])
    api = cluster.ports.api
    for name in ("spark-0", "spark-4"):
        rules = _rules(host.firewall(cluster, cluster.node(name)))
        assert f"ip saddr @api_clients tcp dport {api} accept" not in rules
        assert f"ip saddr {{ {sources} }} tcp dport {api} accept" in rules
        assert f"ip saddr @admin_sources tcp dport {api} accept" in rules


def test_without_a_router_the_api_is_open_to_the_api_clients_as_before(site: Path) -> None:
    cluster = _load(site, None)
    rules = _rules(host.firewall(cluster, cluster.node("spark-4")))
    assert f"ip saddr @api_clients tcp dport {cluster.ports.api} accept" in rules


def test_up_takes_the_playbook_where_the_router_runs(site: Path) -> None:
    from sparkctl.serve import fastup

    cluster = _load(site, {"node": "spark-4"})
    doc = plan_document(cluster)
    reason = "spark-4: the router in front of the groups starts with the playbook"
    assert reason in fastup.judge(cluster, doc, {}, kit_needed=False)
    group_a = {**doc, "nodes": [e for e in doc["nodes"] if e["name"] in cluster.groups[0].nodes]}
    assert reason not in fastup.judge(cluster, group_a, {}, kit_needed=False)
    plain = _load(site, None)
    assert reason not in fastup.judge(plain, plan_document(plain), {}, kit_needed=False)


@pytest.mark.parametrize("name", ["spark-0", "spark-5"])
def test_the_rulesets_with_a_router_pass_nft(tmp_path: Path, name: str) -> None:
    import shutil as sh
    import subprocess

    from sparkctl.render import common

    if sh.which("nft") is None:
        pytest.skip("nft is not installed")
    cluster = load_inventory(TWO_GROUPS)  # the example runs its router on spark-0
    assert cluster.router is not None and cluster.router.node == "spark-0"
    dropins = tmp_path / "firewall.d"
    dropins.mkdir()
    path = tmp_path / "firewall.nft"
    ruleset = host.firewall(cluster, cluster.node(name))
    path.write_text(ruleset.replace(common.FIREWALL_DROPIN_DIR, str(dropins)))
    proc = subprocess.run(["nft", "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip("nft -c cannot run here (needs CAP_NET_ADMIN)")
    assert proc.returncode == 0, proc.stderr


def test_the_fast_down_stops_the_router_on_its_node_first(site: Path) -> None:
    from sparkctl.serve import faststop
    from sparkctl.ssh.fleet import HostResult

    class Fleet:
        def __init__(self) -> None:
            self.rounds: list[dict[str, str]] = []

        def run(self, scripts: dict[str, str], timeout: float, only: list[str]) -> dict[str, HostResult]:
            self.rounds.append(dict(scripts))
            return {n: HostResult(n, 0, "stop: stopped (was active, forced: no)\n") for n in scripts}

    stop = f"systemctl stop {router.UNIT_NAME}"
    fleet = Fleet()
    done = faststop.stop(plan_document(_load(site, {"node": "spark-5"})), fleet)
    assert fleet.rounds[0]["spark-5"].startswith(stop)  # spark-5 serves a worker: its rank stops after
    assert fleet.rounds[1]["spark-5"].startswith(faststop.MARK)
    where = [(r, n) for r, sent in enumerate(fleet.rounds) for n, t in sent.items() if stop in t]
    assert where == [(0, "spark-5")]
    fleet = Fleet()
    faststop.stop(plan_document(_load(site, {"node": "spark-4"})), fleet)  # the second group's rank 0
    assert fleet.rounds[0]["spark-4"].startswith(f"{faststop.MARK}\n{stop} ")
    assert "sparkctl-rank" in fleet.rounds[0]["spark-4"]
    assert "spark-5" in done
    fleet = Fleet()
    faststop.stop(plan_document(_load(site, None)), fleet)
    assert all(stop not in t for sent in fleet.rounds for t in sent.values())
    routed = plan_document(_load(site, {"node": "spark-5"}))
    assert all(stop not in t for t in faststop.scripts(routed).values())
