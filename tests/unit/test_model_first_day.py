"""Inventory refusals that protect a first day on real hardware (nothing is contacted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from ipaddress import IPv4Address
from pathlib import Path

import pytest

from sparkctl.errors import InputError
from sparkctl.model import checks, connection, load_inventory

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example"


def test_a_fabric_subnet_that_holds_the_controllers_address_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []

    def source(address: str) -> IPv4Address:
        seen.append(address)
        return IPv4Address("10.77.1.250")  # a VPN or a second NIC inside the second fabric subnet

    monkeypatch.setattr(checks, "controller_source", source)
    with pytest.raises(InputError) as err:
        load_inventory(EXAMPLE)
    assert seen == ["192.168.7.10"]
    assert any(d.startswith("sparkctl_fabric.subnets[1]: 10.77.1.0/24 contains 10.77.1.250")
               for d in err.value.details), err.value.details


def test_the_controllers_route_lookup_sends_nothing_and_may_fail_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no `ip` at all: no verdict, no crash
    assert checks.controller_source("192.168.7.10") is None


@pytest.mark.parametrize(
    ("args", "weak"),
    [
        ("-o StrictHostKeyChecking=no", True),
        ("-oStrictHostKeyChecking=accept-new", True),
        ("-o 'StrictHostKeyChecking off'", True),
        ("-o StrictHostKeyChecking=yes -o UserKnownHostsFile=/dev/null", True),
        ("-o UserKnownHostsFile=/etc/sparkctl/known_hosts -o StrictHostKeyChecking=yes", False),
        ("-o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes", False),
        ("-o ProxyJump=bastion", False),
    ],
)
def test_ssh_arguments_that_weaken_host_key_checking(args: str, weak: bool) -> None:
    assert (connection._weak_args(args) is not None) is weak


def test_extra_vars_of_the_running_playbook_are_not_inventory_keys() -> None:
    """The vars plugin reads the inventory inside ansible-playbook/-inventory: their -e values and
    --check are the run's, not the site's (`sparkctl stage` passes -e spark_stage_what=...)."""
    repo = Path(__file__).resolve().parents[2]
    tool = Path(sys.executable).with_name("ansible-inventory")
    env = {**os.environ, "ANSIBLE_CONFIG": str(repo / "ansible.cfg")}
    proc = subprocess.run(
        [str(tool), "-i", str(EXAMPLE), "--host", "spark-1", "-e", "spark_stage_what=engram",
         "-e", "ansible_check_mode=true"],
        capture_output=True, text=True, timeout=120, env=env, cwd=repo,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["sparkctl_rendered"]["rank_launch"]["argv"]


def test_facts_a_persistent_fact_cache_holds_are_not_inventory_keys(tmp_path: Path) -> None:
    """An admin's jsonfile fact cache (kept between runs) has facts for the inventory's hosts:
    reading the inventory must not take them for 200 unknown keys."""
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "ANSIBLE_CONFIG": str(repo / "ansible.cfg"), "ANSIBLE_CACHE_PLUGIN": "jsonfile",
           "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")}
    fill = (  # the cache as a run that gathered facts leaves it, written by Ansible's own plugin
        "from ansible import constants as C\n"
        "from ansible.plugins.loader import cache_loader\n"
        "cache = cache_loader.get(C.CACHE_PLUGIN)\n"
        "for host in ('spark-0', 'spark-1', 'spark-2', 'spark-3'):\n"
        "    cache.set(host, {'ansible_system': 'Linux', 'gather_subset': ['all'], 'module_setup': True})\n"
    )
    subprocess.run([sys.executable, "-c", fill], check=True, env=env, cwd=repo, timeout=120)
    assert len(list((tmp_path / "facts").iterdir())) == 4
    proc = subprocess.run(
        [sys.executable, "-m", "sparkctl", "--json", "-i", str(EXAMPLE), "validate"],
        capture_output=True, text=True, timeout=120, env=env, cwd=repo,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "gather_subset" not in proc.stdout + proc.stderr
