"""The sparkctl_rendered vars plugin, through Ansible itself (`ansible-inventory --host`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkctl.model import load_inventory
from sparkctl.render import cluster_facts, plan_document

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "example"
ANSIBLE_INVENTORY = Path(sys.executable).with_name("ansible-inventory")

pytestmark = pytest.mark.skipif(
    not ANSIBLE_INVENTORY.exists() and shutil.which("ansible-inventory") is None,
    reason="ansible-core not installed",
)


def host_vars(inventory: Path, host: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    exe = str(ANSIBLE_INVENTORY) if ANSIBLE_INVENTORY.exists() else "ansible-inventory"
    proc = subprocess.run(
        [exe, "-i", str(inventory), "--host", host],
        cwd=ROOT,  # picks up ansible.cfg, which enables the plugin
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_spark_host_gets_its_plan_entry() -> None:
    got = host_vars(EXAMPLE, "spark-3", {"SPARKCTL_API_KEY": "sk-never-in-hostvars-42"})
    assert "sk-never-in-hostvars-42" not in json.dumps(got)
    want = plan_document(load_inventory(EXAMPLE), "spark-3")["nodes"][0]
    assert got["sparkctl_rendered"] == want
    argv = got["sparkctl_rendered"]["rank_launch"]["argv"]
    assert argv[argv.index("--node-rank") + 1] == "3"
    facts = got["sparkctl_cluster"]
    # The same dict `validate --json` prints (the plugin loads the inventory by its real path).
    assert facts == json.loads(json.dumps(cluster_facts(load_inventory(EXAMPLE.resolve()))))
    assert facts["cluster"] == "example" and facts["fabric"]["host_qos"] is True
    assert facts["fabric"]["subnets"] == ["10.77.0.0/24", "10.77.1.0/24"]
    assert facts["mgmt"]["subnet"] == "192.168.7.0/24"
    assert facts["ports"] == {"dist_init": 29649, "api": 8004, "nccl_test": 29659, "exporter": 9477}
    assert facts["paths"]["engram_dir"] == "/mnt/nvme/engram-tp4"
    assert facts["tp_size"] == 4 and facts["memory"]["disk_margin_gib"] == 8
    assert "sparkctl_secret_refs" not in got


def test_switch_host_gets_its_config() -> None:
    got = host_vars(EXAMPLE, "crs812")
    assert got["sparkctl_rendered"]["switch_config"].startswith("# Rendered by sparkctl")
    assert "sparkctl_secret_refs" not in got


def test_not_a_sparkctl_inventory_gets_nothing(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    box: {ansible_host: 127.0.0.1}\n")
    got = host_vars(tmp_path, "box")
    assert "sparkctl_rendered" not in got
