"""sparkctl_router: SGLang's gateway in front of the serving groups, validated with the site."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import EXIT_USAGE, InputError
from sparkctl.model import load_inventory
from sparkctl.model.router import KNOWN_WHEELS

REPO = Path(__file__).resolve().parents[2]
TWO_GROUPS = REPO / "inventory" / "examples" / "switch-2xtp4"


def _site_with(tmp_path: Path, router: Any, **more: Any) -> Path:
    inv = tmp_path / "site"
    shutil.copytree(TWO_GROUPS, inv)
    path = inv / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(path.read_text())
    if router is None:
        doc.pop("sparkctl_router", None)
    else:
        doc["sparkctl_router"] = router
    doc.update(more)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return inv


def _refused(inv: Path) -> list[str]:
    with pytest.raises(InputError) as err:
        load_inventory(inv)
    assert err.value.exit_code == EXIT_USAGE
    return err.value.details


def test_the_two_group_example_runs_mias_router_and_a_site_without_one_has_none(tmp_path: Path) -> None:
    router = load_inventory(TWO_GROUPS).router
    assert router is not None
    assert (router.node, router.policy, router.port) == ("spark-0", "round_robin", 8889)
    assert load_inventory(_site_with(tmp_path, None)).router is None


def test_the_router_takes_the_gateways_defaults(tmp_path: Path) -> None:
    cluster = load_inventory(_site_with(tmp_path, {"node": "spark-0"}))
    router = cluster.router
    assert router is not None
    assert (router.node, router.port, router.metrics_port) == ("spark-0", 8889, 29000)
    assert router.policy == "cache_aware"
    assert (router.distribution, router.version, router.module) == ("smg", "1.13.0", "smg")
    assert router.digests == KNOWN_WHEELS["smg==1.13.0"]
    assert not any("sparkctl_router" in w for w in cluster.warnings)


def test_the_earlier_package_name_runs_its_own_module(tmp_path: Path) -> None:
    cluster = load_inventory(_site_with(tmp_path, {"node": "spark-4", "package": "sglang-router==0.3.2",
                                                   "policy": "round_robin"}))
    assert cluster.router is not None
    assert (cluster.router.module, cluster.router.policy) == ("sglang_router", "round_robin")


def test_an_unknown_node_is_refused_naming_the_field(tmp_path: Path) -> None:
    details = _refused(_site_with(tmp_path, {"node": "spark-9"}))
    assert any(d.startswith("sparkctl_router.node: no node named spark-9") and "spark-0" in d
               for d in details)


@pytest.mark.parametrize(("field", "port", "other"), [
    ("port", 8004, "sparkctl_ports.api"),
    ("port", 29649, "sparkctl_ports.dist_init"),
    ("metrics_port", 9477, "sparkctl_ports.exporter"),
])
def test_a_port_another_service_uses_is_refused(tmp_path: Path, field: str, port: int, other: str) -> None:
    details = _refused(_site_with(tmp_path, {"node": "spark-0", field: port}))
    assert any(d.startswith(f"sparkctl_router.{field}: {port} is also {other}") for d in details), details


def test_the_router_nodes_ssh_port_is_taken(tmp_path: Path) -> None:
    inv = _site_with(tmp_path, {"node": "spark-0", "port": 2222})
    hosts = inv / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    doc["all"]["children"]["sparks"]["hosts"]["spark-0"]["ansible_port"] = 2222
    hosts.write_text(yaml.safe_dump(doc, sort_keys=False))
    details = _refused(inv)
    assert any(d.startswith("sparkctl_router.port: 2222 is also the SSH port of spark-0")
               for d in details), details


def test_the_two_router_ports_differ(tmp_path: Path) -> None:
    details = _refused(_site_with(tmp_path, {"node": "spark-0", "port": 9000, "metrics_port": 9000}))
    assert any(d.startswith("sparkctl_router.metrics_port: 9000 is also sparkctl_router.port")
               for d in details)


@pytest.mark.parametrize(("router", "what"), [
    ({"node": "spark-0", "policy": "least_busy"}, "sparkctl_router.policy"),
    ({"node": "spark-0", "package": "smg>=1.0"}, "sparkctl_router.package"),
    ({"node": "spark-0", "package": "vllm-router==0.1.0"}, "sparkctl_router.package"),
    ({"node": "spark-0", "package": "smg==9.9.9"}, "sparkctl_router"),
    ({"node": "spark-0", "sha256": {"aarch64": "abc"}}, "sparkctl_router.sha256.aarch64"),
    ({"node": "spark-0", "sha256": {"riscv64": "0" * 64}}, "sparkctl_router.sha256"),
    ({"node": "spark-0", "wheel_dir": "../wheels"}, "sparkctl_router.wheel_dir"),
    ({"node": "spark-0", "api_key": "secret"}, "sparkctl_router.api_key"),
])
def test_bad_values_are_refused_naming_the_field(tmp_path: Path, router: dict[str, Any], what: str) -> None:
    details = _refused(_site_with(tmp_path, router))
    assert any(d.startswith(what) for d in details), details


def test_an_unknown_release_with_its_own_digest_is_accepted(tmp_path: Path) -> None:
    digest = "ab" * 32
    cluster = load_inventory(_site_with(tmp_path, {"node": "spark-0", "package": "smg==9.9.9",
                                                   "sha256": {"aarch64": digest}}))
    assert cluster.router is not None and cluster.router.digests == {"aarch64": digest}


def test_one_group_behind_the_router_is_a_note(tmp_path: Path) -> None:
    inv = _site_with(tmp_path, {"node": "spark-0"},
                     sparkctl_groups=[{"name": "a", "nodes": ["spark-0", "spark-1", "spark-2", "spark-3"]}])
    cluster = load_inventory(inv)
    assert any(w.startswith("sparkctl_router: one serving group (a)") for w in cluster.warnings)
