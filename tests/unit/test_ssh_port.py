"""One SSH port per node, resolved in the model the way Ansible resolves it: the firewall opens it,
sparkctl's own SSH dials it, the roles read it and the vars plugin hands it to Ansible.

A node with ``ansible_ssh_port: 2222`` once validated, Ansible connected on 2222 and the firewall
rendered ``tcp dport 22``: provision's armed revert then fired on every node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import InputError
from sparkctl.model import load_inventory
from sparkctl.model.sshconfig import port_from_vars, resolve_port
from sparkctl.render import host
from sparkctl.ssh.targets import targets_for

REPO = Path(__file__).resolve().parents[2]


def _set_host_vars(inv: Path, values: dict[str, dict[str, Any]]) -> None:
    hosts = inv / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    for name, extra in values.items():
        group = "switches" if name == "crs812" else "sparks"
        doc["all"]["children"][group]["hosts"][name].update(extra)
    hosts.write_text(yaml.safe_dump(doc, sort_keys=False))


def _dports(nft: str) -> list[str]:
    """The port(s) the ruleset opens to SSH (the line under its "# SSH" comment)."""
    return re.findall(r"# SSH [^\n]*\n\s*ip saddr @admin_sources tcp dport (\d+) accept", nft)


@pytest.mark.parametrize("variable", ["ansible_ssh_port", "ansible_port"])
def test_a_nodes_port_variable_is_the_port_its_firewall_opens(example_copy: Path, run_cli: Any,
                                                              variable: str) -> None:
    _set_host_vars(example_copy, {"spark-1": {variable: 2222}})
    cluster = load_inventory(example_copy)
    node = cluster.node("spark-1")
    assert node.ssh_port == 2222
    assert _dports(host.firewall(cluster, node)) == ["2222"]
    assert _dports(host.firewall(cluster, cluster.node("spark-2"))) == ["22"]

    result = run_cli("plan", "-i", str(example_copy), "--json")
    assert result.code == 0, result.err
    entry = next(n for n in json.loads(result.out)["nodes"] if n["name"] == "spark-1")
    assert entry["ssh_port"] == 2222
    nft = next(text for path, text in entry["files"].items() if path.endswith(".nft"))
    assert _dports(nft) == ["2222"]
    assert [t.port for t in targets_for(cluster) if t.name == "spark-1"] == [2222]


def test_ansible_ssh_port_wins_as_in_ansible_and_a_disagreement_is_refused(example_copy: Path) -> None:
    # ansible-core (ssh's `port` option lists ansible_port then ansible_ssh_port; the last defined
    # wins) and Mitogen both take ansible_ssh_port.
    assert port_from_vars({"ansible_port": 2200, "ansible_ssh_port": 2222}) == 2222
    _set_host_vars(example_copy, {"spark-1": {"ansible_port": 2200, "ansible_ssh_port": 2222}})
    with pytest.raises(InputError) as err:
        load_inventory(example_copy)
    text = str(err.value) + "\n".join(err.value.details)
    assert "sparks.spark-1.ansible_port" in text and "Ansible connects on 2222" in text


def test_ssh_arguments_in_ansibles_order() -> None:
    # ssh keeps the first value: ansible_ssh_args come before -o Port=<ansible_port>, the common
    # and extra arguments after it.
    assert port_from_vars({"ansible_ssh_args": "-o Port=2201", "ansible_port": 2222}) == 2201
    assert port_from_vars({"ansible_ssh_common_args": "-p 2202", "ansible_port": 2222}) == 2222
    assert port_from_vars({"ansible_ssh_common_args": "-o UserKnownHostsFile=kh -p 2202"}) == 2202
    assert port_from_vars({"ansible_ssh_extra_args": "-oPort=2203"}) == 2203
    assert port_from_vars({"ansible_port": "2204"}) == 2204  # an INI inventory's text
    assert port_from_vars({}) is None


def test_the_inventorys_ssh_config_names_the_port(example_copy: Path, tmp_path: Path) -> None:
    (example_copy / "ssh_config").write_text("Host 192.168.7.12\n  Port 2212\nHost spark-3\n  Port 2213\n")
    cluster = load_inventory(example_copy)
    ports = {n.name: n.ssh_port for n in cluster.nodes}
    assert ports == {"spark-0": 22, "spark-1": 22, "spark-2": 2212, "spark-3": 2213}
    assert _dports(host.firewall(cluster, cluster.node("spark-3"))) == ["2213"]
    assert {t.name: t.port for t in targets_for(cluster)} == ports
    # an Ansible variable comes before ssh_config, as on ssh's command line
    assert resolve_port({"ansible_port": 2299}, example_copy, "192.168.7.12", "spark-2") == 2299
    # an -F file replaces the inventory's own
    other = tmp_path / "other_config"
    other.write_text("Host *\n  Port 2300\n")
    assert resolve_port({"ansible_ssh_common_args": f"-F {other}"}, example_copy, "192.168.7.12", "x") == 2300


def test_the_vars_plugin_hands_ansible_the_resolved_port(example_copy: Path) -> None:
    (example_copy / "ssh_config").write_text("Host 192.168.7.13\n  Port 2213\n")
    _set_host_vars(example_copy, {"spark-1": {"ansible_ssh_port": 2222}})
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([str(bin_dir / "ansible-inventory"), "-i", str(example_copy), "--list"],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    hostvars = json.loads(proc.stdout)["_meta"]["hostvars"]
    for name, port in {"spark-0": 22, "spark-1": 2222, "spark-3": 2213}.items():
        assert hostvars[name]["ansible_port"] == port
        assert hostvars[name]["sparkctl_rendered"]["ssh_port"] == port
    assert hostvars["crs812"]["ansible_port"] == hostvars["crs812"]["sparkctl_rendered"]["ssh_port"] == 22


def test_roles_read_the_rendered_port_only() -> None:
    """No role re-derives the port (`ansible_port | default(22)` once read 22 where Ansible used
    ansible_ssh_port): every task and default reads sparkctl_rendered.ssh_port."""
    readers = []
    for path in sorted((REPO / "roles").rglob("*.yml")):
        text = path.read_text()
        expressions = re.findall(r"\{\{.*?\}\}", text, flags=re.S)
        assert not [e for e in expressions if re.search(r"\bansible(_ssh)?_port\b", e)], path
        if "sparkctl_rendered.ssh_port" in text:
            readers.append(path.relative_to(REPO).as_posix())
    assert "roles/spark_firewall/tasks/main.yml" in readers and len(readers) >= 7, readers



def test_port_and_key_set_for_every_node_in_group_vars_reach_the_firewall_and_sparkctls_ssh(
        example_copy: Path, tmp_path: Path) -> None:
    """Ansible applies `all`'s variables to every host: a port and a key file written once in
    group_vars/all are what every node is dialled with, and the port is what its firewall opens
    (the model once read a host's ansible_* variables from its own entry only)."""
    key = tmp_path / "id_site"
    key.write_text("not read here\n")
    key.chmod(0o600)
    site = example_copy / "group_vars" / "all" / "ssh.yml"
    site.write_text(yaml.safe_dump({"ansible_port": 2222, "ansible_ssh_private_key_file": str(key)}))
    cluster = load_inventory(example_copy)
    assert {n.ssh_port for n in cluster.nodes} == {2222}
    assert _dports(host.firewall(cluster, cluster.node("spark-1"))) == ["2222"]
    targets = targets_for(cluster)
    assert {t.port for t in targets} == {2222}
    assert all(t.key_files and t.key_files[0] == key for t in targets), [t.key_files for t in targets]
    # A host's own entry still wins over the site's, as in Ansible.
    _set_host_vars(example_copy, {"spark-2": {"ansible_port": 2200}})
    cluster = load_inventory(example_copy)
    assert cluster.node("spark-2").ssh_port == 2200 and cluster.node("spark-1").ssh_port == 2222


def test_become_for_every_host_is_refused_naming_the_field(example_copy: Path, run_cli: Any) -> None:
    """`ansible_become: true` under all reaches Ansible's implicit localhost, and the variable
    outranks a task's `become: false`: the controller's own tasks ran sudo on the controller."""
    hosts = example_copy / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    doc["all"]["vars"]["ansible_become"] = True
    hosts.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = run_cli("validate", "-i", str(example_copy))
    assert result.code == 2, result.err
    flat = " ".join(result.err.replace("│", " ").split())
    assert "all.vars.ansible_become" in flat and "children.sparks.vars" in flat, flat
    del doc["all"]["vars"]["ansible_become"]
    doc["all"]["children"]["sparks"]["vars"] = {"ansible_become": True}  # where the example has it
    hosts.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert run_cli("validate", "-i", str(example_copy)).code == 0


def test_the_ssh_config_is_read_once_while_unchanged_and_again_once_edited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan asks each node's port and its proxies, both from the same ssh_config files: each file
    is read once while it stays as it was, and an edit (a new size or time) is read again."""
    from sparkctl.model import sshconfig

    config = tmp_path / "ssh_config"
    config.write_text("Host spark-0\n  User root\n")
    reads: list[Path] = []
    real = Path.read_text

    def counting(self: Path, *args: Any, **kwargs: Any) -> str:
        reads.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counting)
    hostvars = {"ansible_ssh_common_args": f"-F {config}"}
    for _ in range(3):
        assert sshconfig.resolve_port(hostvars, tmp_path, "10.0.0.1", "spark-0") == 22
        assert sshconfig.proxies(hostvars, tmp_path, "10.0.0.1", "spark-0") == (None, None)
    assert reads.count(config) == 1
    config.write_text("Host spark-0\n  User root\n  Port 2222\n  ProxyJump bastion\n")
    assert sshconfig.resolve_port(hostvars, tmp_path, "10.0.0.1", "spark-0") == 2222
    assert sshconfig.proxies(hostvars, tmp_path, "10.0.0.1", "spark-0") == ("bastion", None)
