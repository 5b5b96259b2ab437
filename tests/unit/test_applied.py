"""The provision fast path's pieces: node-side state items and record (sparkctl.nodeside.applied), the
controller's inputs digest (spark_applied's action plugin), and the module as Ansible ships it."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest
from support.modrun import ANSIBLE_PLAYBOOK, run_role_playbook

from sparkctl.nodeside import applied, system

REPO = Path(__file__).resolve().parents[2]


def _action_plugin() -> Any:
    path = REPO / "roles" / "spark_applied" / "action_plugins" / "sparkctl_applied.py"
    spec = importlib.util.spec_from_file_location("sparkctl_applied_action", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Any]:
    """A role owning a file, a managed block and a directory under tmp_path, with an empty record."""
    (tmp_path / "rules.nft").write_text("table inet sparkctl {}\n")
    (tmp_path / "hosts").write_text(
        "127.0.0.1 localhost\n# BEGIN sparkctl names\n10.0.0.1 a\n# END sparkctl names\n"
    )
    (tmp_path / "versions").mkdir()
    (tmp_path / "versions" / "abc").mkdir()
    spec = {
        "files": [str(tmp_path / "rules.nft"), str(tmp_path / "absent.conf")],
        "blocks": [{"path": str(tmp_path / "hosts"), "marker": "# {mark} sparkctl names"}],
        "dirs": [str(tmp_path / "versions")],
        "exists": [str(tmp_path / "versions" / "abc")],
    }
    return {
        "roles": {"firewall": {"inputs": "d1", "state": spec}},
        "record": str(tmp_path / "rec" / "applied.json"),
        "dir": tmp_path,
    }


def test_a_role_never_recorded_runs_and_after_its_record_is_up_to_date(node: dict[str, Any]) -> None:
    first = applied.probe(node["roles"], node["record"])
    assert first == {"firewall": {"run": True, "reasons": ["never recorded on this node"]}}
    assert applied.record_roles(node["roles"], ["firewall"], node["record"]) is True
    assert applied.probe(node["roles"], node["record"]) == {"firewall": {"run": False, "reasons": []}}
    # recording the same state again leaves the file alone; it is root-only
    assert applied.record_roles(node["roles"], ["firewall"], node["record"]) is False
    assert oct(os.stat(node["record"]).st_mode & 0o777) == "0o600"


def test_a_file_edited_by_hand_is_named(node: dict[str, Any]) -> None:
    applied.record_roles(node["roles"], ["firewall"], node["record"])
    (node["dir"] / "rules.nft").write_text("table inet sparkctl { chain x {} }\n")
    verdict = applied.probe(node["roles"], node["record"])["firewall"]
    assert verdict["run"] is True
    assert verdict["reasons"] == [f"file {node['dir'] / 'rules.nft'}: changed since it was applied"]


def test_a_mode_change_a_new_file_and_a_removed_version_count_as_drift(node: dict[str, Any]) -> None:
    applied.record_roles(node["roles"], ["firewall"], node["record"])
    os.chmod(node["dir"] / "rules.nft", 0o666)
    (node["dir"] / "absent.conf").write_text("x")
    os.rmdir(node["dir"] / "versions" / "abc")
    reasons = applied.probe(node["roles"], node["record"])["firewall"]["reasons"]
    assert len(reasons) == 4, reasons
    assert all(r.endswith("changed since it was applied") for r in reasons)


def test_only_the_managed_block_of_a_shared_file_counts(node: dict[str, Any]) -> None:
    applied.record_roles(node["roles"], ["firewall"], node["record"])
    hosts = node["dir"] / "hosts"
    hosts.write_text(hosts.read_text() + "192.0.2.7 added-by-someone-else\n")
    assert applied.probe(node["roles"], node["record"])["firewall"]["run"] is False
    hosts.write_text(hosts.read_text().replace("10.0.0.1 a", "10.0.0.9 a"))
    assert applied.probe(node["roles"], node["record"])["firewall"]["reasons"] == [
        f"block {hosts} # {{mark}} sparkctl names: changed since it was applied"
    ]


def test_changed_inputs_full_and_an_other_format_run_the_role(node: dict[str, Any]) -> None:
    applied.record_roles(node["roles"], ["firewall"], node["record"])
    changed = {"firewall": dict(node["roles"]["firewall"], inputs="d2")}
    assert applied.probe(changed, node["record"])["firewall"]["reasons"] == [
        "inputs changed since it was applied (inventory, rendered files or role)"
    ]
    assert applied.probe(node["roles"], node["record"], full=True)["firewall"] == {
        "run": True,
        "reasons": ["--full asks for every probe"],
    }
    Path(node["record"]).write_text(json.dumps({"format": 0, "roles": {}}))
    assert applied.probe(node["roles"], node["record"])["firewall"]["reasons"] == [
        "never recorded on this node"
    ]


def test_a_check_mode_record_writes_nothing(node: dict[str, Any]) -> None:
    assert applied.record_roles(node["roles"], ["firewall"], node["record"], write=False) is True
    assert not Path(node["record"]).exists()


def test_an_unknown_state_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown state kind"):
        applied.read_state({"base": {"file": ["/etc/hosts"]}})


def test_private_keys_enter_the_record_by_mode_and_owner_only(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    os.chmod(key, 0o600)
    item = applied.file_item(str(key), content=False)
    assert item.startswith("file 0600 ") and "sha256" not in item


def test_home_relative_paths_expand_for_the_named_user() -> None:
    import pwd

    me = pwd.getpwuid(os.getuid())
    assert applied.expand(f"~{me.pw_name}/.ssh/config") == os.path.join(me.pw_dir, ".ssh/config")
    assert applied.expand("~no-such-user-here/x") == "~no-such-user-here/x"


def test_units_and_packages_are_read_in_one_call_each(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(argv: list[str], timeout: float = 5.0) -> tuple[int, str, str]:
        calls.append(argv)
        if argv[0] == "systemctl":
            return (
                0,
                (
                    "Id=a.service\nUnitFileState=enabled\nActiveState=active\n\n"
                    "Id=b.service\nUnitFileState=\nActiveState=inactive\n"
                ),
                "",
            )
        return 1, "nftables ii\n", "dpkg-query: no packages found matching nope\n"

    monkeypatch.setattr(system, "run", fake_run)
    state = applied.read_state(
        {
            "x": {"units": ["b.service", "a.service"], "packages": ["nftables"]},
            "y": {"units": ["a.service"], "packages": ["nope"]},
        }
    )
    assert state["x"] == {
        "unit b.service": "-/inactive",
        "unit a.service": "enabled/active",
        "package nftables": "ii",
    }
    assert state["y"] == {"unit a.service": "enabled/active", "package nope": "absent"}
    assert [c[0] for c in calls] == ["systemctl", "dpkg-query"]


def test_the_controller_address_survives_sudo(tmp_path: Path) -> None:
    assert applied.controller_address({"SSH_CLIENT": "::ffff:10.250.0.1 5022 22"}) == "10.250.0.1"
    # sudo dropped SSH_CLIENT: the parent's environment still has it
    parent = tmp_path / str(os.getppid())
    parent.mkdir()
    (parent / "environ").write_bytes(b"HOME=/root\0SSH_CLIENT=10.250.0.9 40000 22\0")
    (parent / "stat").write_text(f"{os.getppid()} (bash) S 1 1 1")
    assert applied.controller_address({}, proc=str(tmp_path)) == "10.250.0.9"


# --- controller side -----------------------------------------------------------------------------------


def test_a_tree_digest_follows_symlinks_and_ignores_bytecode(tmp_path: Path) -> None:
    plugin = _action_plugin()
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "mod.py").write_text("x = 1\n")
    role = tmp_path / "role"
    (role / "files").mkdir(parents=True)
    (role / "files" / "shared").symlink_to(shared)
    before = plugin.tree_digest(role)
    (shared / "__pycache__").mkdir()
    (shared / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    assert plugin.tree_digest(role) == before
    (shared / "mod.py").write_text("x = 2\n")
    assert plugin.tree_digest(role) != before
    assert plugin.tree_digest(tmp_path / "nothing") == "absent"


def test_the_plugin_and_the_provision_fast_path_digest_trees_with_one_function(tmp_path: Path) -> None:
    from sparkctl.ansible import treedigest
    from sparkctl.serve import provfast

    assert _action_plugin().tree_digest is treedigest.tree_digest is provfast.tree_digest
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "a").write_text("a")
    (tmp_path / ".ruff_cache").mkdir()
    (tmp_path / ".ruff_cache" / "x").write_text("x")
    whole = treedigest.tree_digest(tmp_path)
    (tmp_path / ".ruff_cache" / "x").write_text("y")  # a cache never counts
    assert treedigest.tree_digest(tmp_path) == whole
    assert treedigest.tree_digest(tmp_path, skip=frozenset({"keep"})) != whole


def test_an_absent_source_tree_falls_back_to_the_installed_package(tmp_path: Path) -> None:
    plugin = _action_plugin()
    assert plugin.source_digest(tmp_path / "sparkctl_sim").startswith("installed ")
    assert plugin.source_digest(tmp_path / "no_such_package_xyz") == "absent"


def test_the_inputs_digest_follows_the_roles_own_variables_and_values() -> None:
    plugin = _action_plugin()
    spec = {
        "trees": ["spark_firewall"],
        "values": {"files": {"/etc/sparkctl/firewall.nft": "table inet sparkctl {}"}},
    }
    task_vars = {"spark_firewall_reconnect_timeout": 30, "spark_base_memlock": "unlimited", "other": 1}
    base = plugin.inputs_digest("spark_firewall", spec, task_vars)
    assert (
        plugin.inputs_digest("spark_firewall", spec, {**task_vars, "spark_base_memlock": "1", "other": 2})
        == base
    )
    assert (
        plugin.inputs_digest("spark_firewall", spec, {**task_vars, "spark_firewall_reconnect_timeout": 60})
        != base
    )
    edited = {
        "trees": spec["trees"],
        "values": {"files": {"/etc/sparkctl/firewall.nft": "table inet sparkctl { }"}},
    }
    assert plugin.inputs_digest("spark_firewall", edited, task_vars) != base


# --- the module as Ansible ships it (action plugin + module_utils symlinks) ------------------------------


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible is not installed next to this python")
def test_the_module_probes_records_and_notices_an_edit(tmp_path: Path) -> None:
    owned = tmp_path / "qos-script"
    owned.write_text("#!/bin/sh\ndcb ...\n")
    record = tmp_path / "applied.json"
    playbook = tmp_path / "pb.yml"
    roles = {
        "qos": {
            "role": "spark_qos",
            "inputs": {"trees": ["spark_qos"], "values": {"a": 1}},
            "state": {"files": [str(owned)], "links": ["lo"], "commands": [["true"]]},
        }
    }
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
                            "name": "again",
                            "sparkctl_applied": {"roles": "{{ specs }}", "path": "{{ rec }}"},
                            "register": "q",
                        },
                        {"name": "edit", "ansible.builtin.copy": {"dest": str(owned), "content": "edited\n"}},
                        {
                            "name": "after edit",
                            "sparkctl_applied": {"roles": "{{ specs }}", "path": "{{ rec }}"},
                            "register": "r",
                        },
                        {
                            "name": "keep",
                            "ansible.builtin.copy": {
                                "dest": str(tmp_path / "out.json"),
                                "content": "{{ [p.roles, q.roles, r.roles] | to_json }}",
                            },
                        },
                    ],
                }
            ]
        )
    )
    proc = run_role_playbook("spark_applied", playbook)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    first, second, third = json.loads((tmp_path / "out.json").read_text())
    assert first["qos"]["reasons"] == ["never recorded on this node"]
    assert second["qos"] == {"run": False, "reasons": []}
    assert third["qos"] == {"run": True, "reasons": [f"file {owned}: changed since it was applied"]}
