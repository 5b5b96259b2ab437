"""Golden files: every renderer's output on inventory/example (and its runtime/switch variants).

Regenerate after an intended change with:
    SPARKCTL_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_render_golden.py
then read the diff (`git diff tests/golden`) before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sparkctl.model import Runtime, load_inventory
from sparkctl.profiles import load_profile
from sparkctl.render import common, host, plan_document, rank, switch

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
EXAMPLE = ROOT / "inventory" / "example"
UPDATE = os.environ.get("SPARKCTL_UPDATE_GOLDEN") == "1"


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} missing: run with SPARKCTL_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from the golden file"


@pytest.fixture(scope="module")
def example() -> Any:
    return load_inventory(EXAMPLE)


def variant(cluster: Any, **update: Any) -> Any:
    return cluster.model_copy(update=update)


def test_plan_document(example: Any) -> None:
    check("example/plan.json", json.dumps(plan_document(example), indent=2) + "\n")


@pytest.mark.parametrize("node", ["spark-0", "spark-3"])
def test_node_files(example: Any, node: str) -> None:
    n = example.node(node)
    check(f"example/{node}/sparkctl-rank.service", rank.rank_unit(example, n))
    check(f"example/{node}/rank.env", rank.rank_env_text(example, n))
    check(f"example/{node}/40-sparkctl-fabric.yaml", host.netplan(example, n))
    check(f"example/{node}/sparkctl-roce-qos", host.qos_script(example, n))
    check(f"example/{node}/sparkctl-roce-qos.service", host.qos_unit(example, n))
    check(f"example/{node}/50-sparkctl-roce-qos", host.qos_link_hook(example, n))
    check(f"example/{node}/firewall.nft", host.firewall(example, n))
    check(f"example/{node}/sparkctl-firewall.service", host.firewall_unit(example, n))


def containers_text(cluster: Any, node: Any) -> str:
    """The rank's launch command and the NCCL check's, one shell line each, as the node runs them."""
    nccl = rank.nccl_check(cluster, node)
    lines = [
        f"# rank {node.rank} ({cluster.runtime.kind} runtime): the unit's ExecStart",
        common.shell_command(rank.launch_command(cluster, node)),
        f"# `sparkctl check fabric`: the NCCL all-reduce (environment from {nccl['env_file']})",
        common.shell_command([*(f"{k}={v}" for k, v in nccl["env"].items()), *nccl["command"]]),
    ]
    return "\n".join(lines) + "\n"


def test_container_commands(example: Any) -> None:
    """The rank and the NCCL check come from one `docker run` renderer: same flags, image, env file."""
    check("example/spark-1/containers.sh", containers_text(example, example.node("spark-1")))


def test_venv_commands(example: Any) -> None:
    cluster = variant(example, runtime=Runtime(kind="venv", venv_path="/opt/sparkctl/venv"))
    check("runtime/venv-spark-1.commands.sh", containers_text(cluster, cluster.node("spark-1")))


def test_rank_secrets_file(example: Any) -> None:
    check("example/rank-secrets.yaml", rank.rank_secrets_text(example))


@pytest.mark.parametrize("kind", ["routeros", "nvue", "linux"])
def test_switch_configs(example: Any, kind: str) -> None:
    cluster = variant(example, switch=example.switch.model_copy(update={"type": kind}))
    check(f"switch/{switch.FILE_NAMES[kind]}", switch.switch_config(cluster))


def test_venv_runtime_unit(example: Any) -> None:
    cluster = variant(example, runtime=Runtime(kind="venv", venv_path="/opt/sparkctl/venv"))
    check("runtime/venv-spark-1.service", rank.rank_unit(cluster, cluster.node("spark-1")))


def test_lab_runtime_unit(example: Any) -> None:
    cluster = variant(example, runtime=Runtime(kind="lab"), profile=load_profile("lab"))
    check("runtime/lab-spark-1.service", rank.rank_unit(cluster, cluster.node("spark-1")))
    check("runtime/lab-spark-1.env", rank.rank_env_text(cluster, cluster.node("spark-1")))


def test_mgmt_bootstrap_without_qos(example: Any) -> None:
    fabric = example.fabric.model_copy(update={"bootstrap_over": "mgmt", "host_qos": False})
    cluster = variant(example, fabric=fabric, profile=load_profile("m1-1m"))
    node = cluster.node("spark-2")
    check("m1-mgmt/spark-2.argv", "\n".join(rank.rank_argv(cluster, node)) + "\n")
    check("m1-mgmt/spark-2.env", rank.rank_env_text(cluster, node))
    check("m1-mgmt/spark-2-firewall.nft", host.firewall(cluster, node))
