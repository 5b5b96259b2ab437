"""The sparkctl_rendered vars plugin: Ansible sees exactly what `sparkctl plan` renders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from sparkctl import render
from sparkctl.model import load_inventory

REPO = Path(__file__).resolve().parents[2]


def _inventory_host(inv: Path, host: str) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([str(bin_dir / "ansible-inventory"), "-i", str(inv), "--host", host],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120, check=False)


def test_node_gets_its_plan_entry(example_copy: Path) -> None:
    proc = _inventory_host(example_copy, "spark-2")
    assert proc.returncode == 0, proc.stderr
    hostvars = json.loads(proc.stdout)
    expected = render.plan_document(load_inventory(example_copy), node="spark-2")["nodes"][0]
    assert hostvars["sparkctl_rendered"] == json.loads(json.dumps(expected))
    assert hostvars["sparkctl_cluster"]["head"] == "spark-0"
    assert "/etc/netplan/40-sparkctl-fabric.yaml" in hostvars["sparkctl_rendered"]["files"]


def test_switch_gets_its_config(example_copy: Path) -> None:
    proc = _inventory_host(example_copy, "crs812")
    assert proc.returncode == 0, proc.stderr
    rendered = json.loads(proc.stdout)["sparkctl_rendered"]
    assert rendered["type"] == "routeros"
    assert "qsfp56-dd-3-1" in rendered["switch_config"]


def test_bad_inventory_stops_ansible_with_sparkctls_message(example_copy: Path) -> None:
    hosts = example_copy / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    doc["all"]["children"]["sparks"]["hosts"]["spark-1"]["sparkctl_rank"] = 0
    hosts.write_text(yaml.safe_dump(doc))
    proc = _inventory_host(example_copy, "spark-1")
    assert proc.returncode != 0
    assert "sparkctl inventory" in proc.stderr and "rank" in proc.stderr


def test_manual_stage_run_gets_the_profiles_values(example_copy: Path) -> None:
    """spark_stage's defaults read the profile through the plugin, as `sparkctl stage` (which passes
    nothing of its own) does: a site's disk margin override reaches a manual ansible-playbook run."""
    group_vars = example_copy / "group_vars" / "all" / "sparkctl.yml"
    text = group_vars.read_text().replace(
        "sparkctl_profile_overrides: {}", "sparkctl_profile_overrides: {memory: {disk_margin_gib: 13}}"
    )
    group_vars.write_text(text)
    playbook = example_copy.parent / "stage_values.yml"
    playbook.write_text(
        "- name: The spark_stage values a manual run computes\n"
        "  hosts: spark-1\n  gather_facts: false\n  connection: local\n"
        f"  vars_files: [{REPO / 'roles' / 'spark_stage' / 'defaults' / 'main.yml'}]\n"
        "  tasks:\n    - name: Show them\n      ansible.builtin.debug:\n"
        "        msg: 'tp={{ spark_stage_tp | int }} margin={{ spark_stage_margin_gib | float }}'\n"
    )
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [str(bin_dir / "ansible-playbook"), "-i", str(example_copy), str(playbook)],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tp=4 margin=13.0" in proc.stdout


def test_node_of_a_second_group_gets_its_group_rank_and_tp() -> None:
    """On two TP4 groups spark-6 is rank 2 of group b: the roles' start waves and Engram shards
    read that, not its site rank 6 or a TP8."""
    proc = _inventory_host(REPO / "inventory" / "examples" / "switch-2xtp4", "spark-6")
    assert proc.returncode == 0, proc.stderr
    hostvars = json.loads(proc.stdout)
    group = hostvars["sparkctl_group"]
    assert (group["name"], group["rank"], group["tp_size"], group["head"]) == ("b", 2, 4, "spark-4")
    assert hostvars["sparkctl_rendered"]["rank"] == 2
    assert hostvars["sparkctl_rendered"]["group"] == "b"


def test_connection_files_follow_the_files_and_the_groups_within_one_run(example_copy: Path) -> None:
    """Within one process (one ansible-playbook run) the plugin keeps what a host's connection
    variables resolved to; a value set on the host, or the host in another group, is resolved afresh."""
    import importlib.util

    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    spec = importlib.util.spec_from_file_location("rendered", REPO / "plugins/vars/sparkctl_rendered.py")
    assert spec is not None and spec.loader is not None
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    loader = DataLoader()
    hosts_file = example_copy / "hosts.yml"

    def args_of(host_name: str, im: InventoryManager) -> str:
        got = plugin.VarsModule().get_vars(loader, str(example_copy), [im.get_host(host_name)])
        assert plugin.VarsModule().get_vars(loader, str(example_copy), im.groups["all"]) == {}
        return str(got["ansible_ssh_common_args"])

    im = InventoryManager(loader=loader, sources=[str(hosts_file)])
    first = args_of("spark-1", im)
    assert f"UserKnownHostsFile={example_copy / 'known_hosts'}" in first
    assert args_of("spark-1", im) == first  # asked again: the same

    # The host's own value set during the run (add_host does this): resolved afresh.
    im.get_host("spark-1").set_variable("ansible_ssh_common_args", "-o UserKnownHostsFile=pinned_hosts")
    assert f"UserKnownHostsFile={example_copy / 'pinned_hosts'}" in args_of("spark-1", im)

    # The host put in a group of its own that sets other arguments (add_host's groups, group_by).
    im = InventoryManager(loader=loader, sources=[str(hosts_file)])
    before = args_of("spark-1", im)
    im.add_group("bastioned")
    im.groups["bastioned"].set_variable(
        "ansible_ssh_common_args", "-o UserKnownHostsFile=bastion_hosts -o StrictHostKeyChecking=yes")
    im.groups["bastioned"].add_host(im.get_host("spark-1"))
    after = args_of("spark-1", im)
    assert "UserKnownHostsFile=" in before and "bastion_hosts" not in before
    assert f"UserKnownHostsFile={example_copy / 'bastion_hosts'}" in after
