"""sparkctl.ansible.reach: a node whose SSH port gives no TCP answer gets a short SSH timeout for the run.

A powered-off node whose neighbour entry the controller still held answered nothing at all, and
every playbook verb waited ansible.cfg's whole 60 s timeout before naming it (the lab: `preflight`
61.7 s with spark-3's management link cut, 9.8 s with this)."""

from __future__ import annotations

import json
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sparkctl.ansible import reach, runner
from sparkctl.ansible.plan import Plan


@pytest.fixture
def ports() -> Iterator[dict[str, int]]:
    """``open``: a listening port; ``refused``: a closed one; ``silent``: a port whose accept queue is
    full, so the kernel drops every SYN (no answer at all, as from a node that is gone)."""
    live = socket.create_server(("127.0.0.1", 0))
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    held = [socket.create_connection(full.getsockname(), timeout=2)]  # the queue's one place, taken
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused = closed.getsockname()[1]
    closed.close()
    try:
        yield {"open": live.getsockname()[1], "refused": refused, "silent": full.getsockname()[1]}
    finally:
        for s in (live, full, *held):
            s.close()


def test_only_a_port_that_answers_nothing_is_silent(ports: dict[str, int]) -> None:
    nodes = {name: ("127.0.0.1", port) for name, port in ports.items()}
    assert reach.silent(nodes, timeout=0.5) == ["silent"]  # refused is an answer: ssh fails at once
    assert reach.silent({}) == []


def test_nodes_behind_a_jump_host_or_a_proxy_command_are_not_dialled(tmp_path: Path) -> None:
    from sparkctl.model import load_inventory

    inv = tmp_path / "site"
    shutil.copytree(Path(__file__).resolve().parents[2] / "inventory" / "example", inv)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    sparks = hosts["all"]["children"]["sparks"]["hosts"]
    names = list(sparks)
    sparks[names[1]]["ansible_ssh_extra_args"] = "-J admin@bastion"
    sparks[names[2]]["ansible_port"] = 2222
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    cluster = load_inventory(inv)
    address = {n.name: str(n.mgmt_ip) for n in cluster.nodes}
    (inv / "ssh_config").write_text(f"Host {address[names[3]]}\n  ProxyCommand nc -X connect %h %p\n")
    direct = {names[0]: (address[names[0]], 22), names[2]: (address[names[2]], 2222)}
    assert reach.endpoints(cluster) == direct


def test_a_plan_carries_every_directly_dialled_nodes_port(tmp_path: Path) -> None:
    from sparkctl.ansible import plan as planning
    from sparkctl.model import load_inventory

    cluster = load_inventory(Path(__file__).resolve().parents[2] / "inventory" / "example")
    plan = planning.for_preflight(cluster)
    assert plan.ssh_endpoints == {n.name: (str(n.mgmt_ip), n.ssh_port) for n in cluster.nodes}
    assert len(plan.ssh_endpoints) == 4


PLAYBOOK = """\
- name: Timeouts
  hosts: all
  gather_facts: false
  tasks:
    - name: Say each host's SSH timeout
      ansible.builtin.debug:
        msg: "timeout={{ ansible_ssh_timeout }} role={{ probe_role }}"
"""


def test_a_silent_node_gets_a_short_ssh_timeout_in_the_run(tmp_path: Path, ports: dict[str, int],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reach, "CONNECT_TIMEOUT_S", 0.5)
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "probe.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "hosts": {"a": {"probe_role": "gone"}, "b": {"probe_role": "here"}}}}))
    plan = Plan("probe.yml", tmp_path / "hosts.yml",
                ssh_endpoints={"a": ("127.0.0.1", ports["silent"]), "b": ("127.0.0.1", ports["open"])})
    res = runner.execute(plan, runs_dir=tmp_path / "runs", project_dir=tmp_path)
    assert res.ok, res.failures
    said = {host: r["msg"] for host, r in res.task_results("Say each host's SSH timeout").items()}
    # the host keeps its own inventory variables; only the silent one gets the short timeout
    assert said["a"] == f"timeout={reach.SILENT_SSH_TIMEOUT_S} role=gone"
    assert said["b"] == "timeout=60 role=here"  # ansible.cfg's
    kept = res.run_dir / "silent" / runner.SILENT_FILE
    assert json.loads(kept.read_text().split("\n", 1)[1]) == {
        "all": {"hosts": {"a": {"ansible_ssh_timeout": reach.SILENT_SSH_TIMEOUT_S}}}}


def test_when_every_node_answers_the_inventory_is_the_only_source(tmp_path: Path,
                                                                   ports: dict[str, int]) -> None:
    plan = Plan("probe.yml", tmp_path, ssh_endpoints={"b": ("127.0.0.1", ports["open"])})
    assert runner._inventory_sources(plan, tmp_path / "run") == str(tmp_path.resolve())
    assert not (tmp_path / "run").exists()
