"""`provision`'s fast path (sparkctl.serve.provfast, sparkctl.nodeside.provcheck): what the last whole
run decided from, kept on the controller; one SSH round that repeats the playbook's read on the nodes;
anything due, or anything changed on the controller, runs the playbook."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.modrun import ANSIBLE_PLAYBOOK, run_role_playbook
from support.runner import NODES

from sparkctl.model import load_inventory
from sparkctl.nodeside import applied, links, provcheck
from sparkctl.serve import provfast
from sparkctl.ssh.fleet import HostResult

REPO = Path(__file__).resolve().parents[2]
SWITCH = "crs812"


@pytest.fixture
def cluster(example_copy: Path) -> Any:
    return load_inventory(example_copy)


@pytest.fixture
def linux_switch(example_copy: Path) -> Any:
    """The example site with its switch made a Linux one (as the lab's)."""
    hosts = example_copy / "hosts.yml"
    text = hosts.read_text()
    assert "sparkctl_switch_type: routeros" in text
    hosts.write_text(text.replace("sparkctl_switch_type: routeros", "sparkctl_switch_type: linux"))
    return load_inventory(example_copy)


def _spec(path: str) -> dict[str, Any]:
    return {
        "inputs": "digest-1",
        "state": {"files": ["/etc/sparkctl/firewall.nft"]},
        "trees": ["spark_firewall"],
        "path": path,
    }


def _specs() -> dict[str, Any]:
    roles = {"firewall": {k: v for k, v in _spec("").items() if k != "path"}}
    return {n: {"path": "/var/lib/sparkctl/applied.json", "roles": roles} for n in NODES}


def _fresh() -> dict[str, Any]:
    return {"firewall": {"run": False, "reasons": []}}


class Fleet:
    """Answers each host's script with the given JSON (a string: unreachable); records the scripts."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.scripts: dict[str, str] = {}

    def run(self, scripts: Any, timeout: float = 10.0, only: Any = None) -> dict[str, HostResult]:
        self.scripts = dict(scripts)
        return {
            n: HostResult(n, error=a) if isinstance(a, str) else HostResult(n, 0, json.dumps(a) + "\n")
            for n, a in self.answers.items()
            if n in only
        }

    def close(self) -> None: ...


def _answers(roles: dict[str, Any] | None = None, /, **per_node: Any) -> dict[str, Any]:
    out: dict[str, Any] = {n: {"mode": "provcheck", "roles": roles or _fresh()} for n in NODES}
    out.update(per_node)
    return out


# --- the node's half ------------------------------------------------------------------------------


def _run_shipped(params: dict[str, Any]) -> dict[str, Any]:
    """The script exactly as the SSH round sends it, run here under this python3."""
    script = provfast.check_script(params)
    proc = subprocess.run(
        ["/bin/sh", "-s"], input=script, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc


def test_the_shipped_check_repeats_the_playbooks_read_and_names_a_hand_edit(tmp_path: Path) -> None:
    owned = tmp_path / "firewall.nft"
    owned.write_text("table inet sparkctl {}\n")
    record = str(tmp_path / "applied.json")
    roles = {"firewall": {"inputs": "d1", "state": {"files": [str(owned)], "sysctl": ["kernel.ostype"]}}}
    assert _run_shipped({"roles": roles, "path": record})["roles"]["firewall"] == {
        "run": True,
        "reasons": ["never recorded on this node"],
    }
    applied.record_roles(roles, ["firewall"], record)  # what the playbook's record step writes
    assert _run_shipped({"roles": roles, "path": record}) == {
        "mode": "provcheck",
        "roles": {"firewall": {"run": False, "reasons": []}},
    }
    owned.write_text("table inet sparkctl {}\n# edited by hand\n")
    after = _run_shipped({"roles": roles, "path": record})["roles"]["firewall"]
    assert after == {"run": True, "reasons": [f"file {owned}: changed since it was applied"]}
    other = {"firewall": {**roles["firewall"], "inputs": "d2"}}  # the controller's inputs moved on
    assert (
        "inputs changed" in _run_shipped({"roles": other, "path": record})["roles"]["firewall"]["reasons"][0]
    )


def test_the_shipped_check_reads_a_switchs_port_mtus() -> None:
    doc = _run_shipped({"ports": ["lo", "sparkctl-no-such-port"]})
    assert doc["ports"]["sparkctl-no-such-port"] == "absent"
    assert doc["ports"]["lo"] == links.read_link("lo")["mtu"] > 0
    assert "roles" not in doc


def test_an_mtu_set_by_hand_makes_the_links_role_due(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Live state a file digest does not cover: `ip link set dev X mtu 1500` after the role ran."""
    mtu = {"value": 9000}
    monkeypatch.setattr(
        links, "read_link", lambda dev, root=links.NET: {"present": True, "mtu": mtu["value"]}
    )
    monkeypatch.setattr(links, "ipv4_addresses", lambda: {"enp1s0f0np0": ["10.77.0.10/24"]})
    roles = {"fabric": {"inputs": "d1", "state": {"links": ["enp1s0f0np0"]}}}
    record = str(tmp_path / "applied.json")
    applied.record_roles(roles, ["fabric"], record)
    assert (
        provcheck.check({"roles": roles, "path": record}, applied, links)["roles"]["fabric"]["run"] is False
    )
    mtu["value"] = 1500
    verdict = provcheck.check({"roles": roles, "path": record}, applied, links)["roles"]["fabric"]
    assert verdict == {"run": True, "reasons": ["link enp1s0f0np0: changed since it was applied"]}


def test_a_state_that_cannot_be_read_is_an_error_not_a_pass(tmp_path: Path) -> None:
    roles = {"x": {"inputs": "d", "state": {"nonsense": [1]}}}
    doc = provcheck.check({"roles": roles, "path": str(tmp_path / "a.json")}, applied, links)
    assert "unknown state kind" in doc["error"] and "roles" not in doc


# --- the controller's half ------------------------------------------------------------------------


def test_without_a_record_nothing_is_contacted(cluster: Any, tmp_path: Path) -> None:
    fleet = Fleet({})
    verdict = provfast.check(cluster, fleet, {}, state=tmp_path)
    assert not verdict.ok and fleet.scripts == {}
    assert verdict.reasons == ["no whole provision run recorded from this controller for this inventory"]


def test_a_whole_run_is_kept_and_the_next_is_one_ssh_round(linux_switch: Any, tmp_path: Path) -> None:
    base = provfast.controller_key(linux_switch, {}, [])
    assert provfast.save(linux_switch, {}, _specs(), base, state=tmp_path) is True
    kept = json.loads(provfast.record_path(linux_switch, tmp_path).read_text())
    assert kept["trees"] == ["spark_firewall"] and set(kept["nodes"]) == set(NODES)
    assert oct(provfast.record_path(linux_switch, tmp_path).stat().st_mode & 0o777) == "0o600"
    ports = {p: int(linux_switch.switch.mtu) for p in provfast.switch_ports(linux_switch)}
    fleet = Fleet(_answers(**{SWITCH: {"mode": "provcheck", "ports": ports}}))
    verdict = provfast.check(linux_switch, fleet, {}, state=tmp_path)
    assert verdict.ok, verdict.reasons
    assert set(fleet.scripts) == {*NODES, SWITCH}
    assert (
        "sparkctl_node" in fleet.scripts["spark-0"]
        and "/etc/sparkctl/firewall.nft" in fleet.scripts["spark-0"]
    )
    assert verdict.applied == {n: _fresh() for n in NODES}
    assert verdict.as_dict()["path"] == "fast"


def test_a_due_role_an_unreachable_node_or_a_switch_port_runs_the_playbook(linux_switch: Any) -> None:
    mtu = int(linux_switch.switch.mtu)
    ports = {p: mtu for p in provfast.switch_ports(linux_switch)}
    first = sorted(ports)[0]
    due = {
        "firewall": {
            "run": True,
            "reasons": ["file /etc/sparkctl/firewall.nft: changed since it was applied"],
        }
    }
    answers = _answers(
        **{
            "spark-2": {"mode": "provcheck", "roles": due},
            "spark-3": "unreachable: timed out",
            SWITCH: {"mode": "provcheck", "ports": {**ports, first: 1500}},
        }
    )
    reasons, verdicts = provfast.judge(
        linux_switch, provfast.ship.answers(Fleet(answers).run({}, only=list(answers)), "provcheck")
    )
    assert reasons == [
        "firewall on spark-2: file /etc/sparkctl/firewall.nft: changed since it was applied",
        "spark-3: unreachable: unreachable: timed out",
        f"{SWITCH}: port {first} has MTU 1500, the inventory says {mtu}",
    ]
    assert verdicts["spark-2"] == due and "spark-3" not in verdicts


def test_a_routeros_switch_is_left_to_its_play(cluster: Any, tmp_path: Path) -> None:
    provfast.save(cluster, {}, _specs(), provfast.controller_key(cluster, {}, []), state=tmp_path)
    fleet = Fleet(_answers())
    verdict = provfast.check(cluster, fleet, {}, state=tmp_path)
    assert (
        verdict.reasons == [f"{SWITCH}: the routeros switch is read by its own play"] and fleet.scripts == {}
    )


@pytest.mark.parametrize("change", ["inventory", "role tree", "extra vars", "ansible env"])
def test_a_change_on_the_controller_runs_the_playbook_without_contacting_a_node(
    linux_switch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    roles = tmp_path / "content" / "roles"
    (roles / "spark_firewall").mkdir(parents=True)
    (roles / "spark_firewall" / "main.yml").write_text("a: 1\n")
    for name in ("playbooks", "plugins"):
        (tmp_path / "content" / name).mkdir()
    (tmp_path / "content" / "ansible.cfg").write_text("[defaults]\n")
    monkeypatch.setattr(provfast.content, "root", lambda: tmp_path / "content")
    state = tmp_path / "state"
    provfast.save(linux_switch, {}, _specs(), provfast.controller_key(linux_switch, {}, []), state=state)
    extravars: dict[str, Any] = {}
    if change == "inventory":
        hosts = Path(linux_switch.inventory_dir) / "hosts.yml"
        hosts.write_text(hosts.read_text() + "\n# a comment is a change too\n")
    elif change == "role tree":
        (roles / "spark_firewall" / "main.yml").write_text("a: 2\n")
    elif change == "extra vars":
        extravars = {"spark_firewall_extra": True}
    else:
        monkeypatch.setenv("ANSIBLE_FORKS", "3")
    fleet = Fleet(_answers())
    verdict = provfast.check(linux_switch, fleet, extravars, state=state)
    assert verdict.reasons == [
        "the inventory, the roles, sparkctl or its environment changed since the last whole run"
    ]
    assert fleet.scripts == {}
    # --full is no change of inputs: its record serves a plain run
    assert provfast.controller_key(linux_switch, {"spark_applied_full": True}, []) == provfast.controller_key(
        linux_switch, {}, []
    )


def test_a_partial_report_or_a_change_during_the_run_keeps_no_record(cluster: Any, tmp_path: Path) -> None:
    base = provfast.controller_key(cluster, {}, [])
    assert provfast.save(cluster, {}, _specs(), base, state=tmp_path) is True
    partial = {n: s for n, s in _specs().items() if n != "spark-3"}
    assert provfast.save(cluster, {}, partial, base, state=tmp_path) is False
    assert provfast.load(cluster, tmp_path) is None
    assert provfast.save(cluster, {}, _specs(), "another key", state=tmp_path) is False
    assert provfast.load(cluster, tmp_path) is None


@pytest.mark.skipif(
    not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not installed next to this python"
)
def test_the_action_plugin_reports_what_the_node_got(tmp_path: Path) -> None:
    """spark_applied's probe result carries each role's inputs digest and state spec as the module
    got them (``specs``), which provision.yml reports under results.APPLIED_SPECS."""
    owned = tmp_path / "qos-script"
    owned.write_text("#!/bin/sh\n")
    record = tmp_path / "applied.json"
    roles = {
        "qos": {
            "role": "spark_qos",
            "inputs": {"trees": ["spark_qos"], "values": {"a": 1}},
            "state": {"files": [str(owned)], "commands": [["echo", "{{ '{{' }}.ServerVersion}}"]]},
        }
    }
    playbook = tmp_path / "pb.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {"specs": roles, "rec": str(record)},
                    "tasks": [
                        {
                            "name": "probe",
                            "sparkctl_applied": {"roles": "{{ specs }}", "path": "{{ rec }}"},
                            "register": "p",
                        },
                        {
                            "name": "record",
                            "sparkctl_applied": {
                                "roles": "{{ specs }}",
                                "path": "{{ rec }}",
                                "mode": "record",
                                "record": ["qos"],
                                "inputs": "{{ p.inputs }}",
                            },
                        },
                        {
                            "name": "keep",
                            "ansible.builtin.copy": {
                                "dest": str(tmp_path / "out.json"),
                                "content": "{{ [p.inputs, p.specs] | to_json }}",
                            },
                        },
                    ],
                }
            ]
        )
    )
    proc = run_role_playbook("spark_applied", playbook)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    inputs, specs = json.loads((tmp_path / "out.json").read_text())
    assert specs == {
        "qos": {
            "inputs": inputs["qos"],
            "trees": ["spark_qos"],
            "state": {"files": [str(owned)], "commands": [["echo", "{{.ServerVersion}}"]]},
        }
    }
    # the node-side check, fed that report, agrees with the record the playbook wrote
    verdict = _run_shipped({"roles": {"qos": specs["qos"]}, "path": str(record)})["roles"]["qos"]
    assert verdict == {"run": False, "reasons": []}


def test_the_key_covers_the_package_parts_ansible_runs_and_not_the_verbs(
    cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The roles are given what model/render compute and run what ansible/, nodeside/ and stage/ hold;
    an edit to a verb's code (cli, serve, qa, site) changes nothing they are given."""
    parts = provfast.sparkctl_digest()
    assert set(provfast.CONTROLLER_PARTS) <= set(parts) and "__init__.py" in parts
    assert not {"cli", "serve", "qa", "site"} & set(parts)
    seen: list[Path] = []
    real = provfast.tree_digest

    def spy(path: Path, skip: frozenset[str] = frozenset()) -> str:
        seen.append(path)
        return real(path, skip)

    monkeypatch.setattr(provfast, "tree_digest", spy)
    before = provfast.controller_key(cluster, {}, [])
    assert any(p.name == "render" for p in seen) and not any(p.name == "serve" for p in seen)
    monkeypatch.setattr(
        provfast,
        "tree_digest",
        lambda path, skip=frozenset(): "x" if path.name == "render" else real(path, skip),
    )
    assert provfast.controller_key(cluster, {}, []) != before


def test_a_host_that_does_not_answer_is_named_dark(linux_switch: Any, tmp_path: Path) -> None:
    provfast.save(linux_switch, {}, _specs(), provfast.controller_key(linux_switch, {}, []), state=tmp_path)
    ports = {p: int(linux_switch.switch.mtu) for p in provfast.switch_ports(linux_switch)}
    fleet = Fleet(_answers(**{"spark-3": "timed out", SWITCH: {"mode": "provcheck", "ports": ports}}))
    verdict = provfast.check(linux_switch, fleet, {}, state=tmp_path)
    assert not verdict.ok and verdict.dark == ["spark-3"]
    assert verdict.reasons == ["spark-3: unreachable: timed out"]
