"""spark_applied's state specs stay in step with the roles: every file a provision role writes is
hashed by the fast path's cheap round (or named here with why not), so a hand edit is noticed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
SHORT = ("base", "fabric", "qos", "runtime", "exporter", "firewall")
# Each role's own description (roles/spark_<role>/vars/applied.yml) and spark_applied's defaults.
APPLIED = {short: ROLES / f"spark_{short}" / "vars" / "applied.yml" for short in SHORT}
DEFAULTS = (ROLES / "spark_applied" / "defaults" / "main.yml").read_text()
SPEC = DEFAULTS + "".join(path.read_text() for path in APPLIED.values())
WRITERS = {
    "ansible.builtin.copy": "dest",
    "ansible.builtin.blockinfile": "path",
    "ansible.builtin.file": "path",
    "ansible.builtin.lineinfile": "path",
    "ansible.builtin.template": "dest",
}

# Each destination a provision role writes -> the text in spark_applied's defaults that covers it,
# or None with the reason it is no configuration of the node.
COVERED: dict[str, str | None] = {
    "/etc/chrony/conf.d/sparkctl.conf": "/etc/chrony/conf.d/sparkctl.conf",
    "/etc/hosts": '{path: /etc/hosts, marker: "# {mark} sparkctl fabric names"}',
    "/etc/sysctl.d/60-sparkctl.conf": "/etc/sysctl.d/60-sparkctl.conf",
    "/etc/security/limits.d/90-sparkctl-memlock.conf": "/etc/security/limits.d/90-sparkctl-memlock.conf",
    "/etc/systemd/system.conf.d": "- /etc/systemd/system.conf.d\n",
    "/etc/systemd/system.conf.d/90-sparkctl-memlock.conf": "- /etc/systemd/system.conf.d/90-sparkctl-memlock",
    "{{ spark_base_home }}/.ssh": '"~{{ spark_base_applied_mesh_user }}/.ssh"',
    "{{ spark_base_home }}/.ssh/{{ item }}": '"~{{ spark_base_applied_mesh_user }}/.ssh/id_ed25519_sparkctl"',
    "{{ spark_base_home }}/.ssh/authorized_keys": '/.ssh/authorized_keys", marker: "# {mark} sparkctl mesh"',
    "/etc/ssh/ssh_known_hosts": '{path: /etc/ssh/ssh_known_hosts, marker: "# {mark} sparkctl mesh"}',
    "{{ spark_base_home }}/.ssh/config": '/.ssh/config", marker: "# {mark} sparkctl mesh"',
    "/etc/sudoers.d/90-sparkctl": "/etc/sudoers.d/90-sparkctl",
    "{{ spark_fabric_netplan.key }}": "select('match', spark_fabric_netplan_pattern)",
    "{{ item.key | dirname }}": None,  # spark_qos: the directories of its files (the files are hashed)
    "{{ item.key }}": "select('search', spark_qos_file_pattern)",
    "{{ item }}": None,  # runtime/exporter/firewall: directories of the files hashed below them
    "{{ spark_runtime_lab_prefix }}/wheels/{{ spark_runtime_wheel.hash }}.whl": "_lab_prefix }}/wheels",
    None: '"{{ spark_runtime_lab_prefix }}/current"',  # the `current` link (file task with src/dest)
    "{{ spark_runtime_lab_launcher }}": '"{{ spark_runtime_lab_launcher }}"',
    "{{ item.path }}": '"{{ spark_runtime_lab_prefix }}"',  # older versions removed: the listing shows them
    "{{ spark_exporter_dir }}/nodeside/{{ item }}": "spark_exporter_applied_dir ~ '/nodeside/'",
    "{{ spark_exporter_unit_file.key }}": "spark_exporter_applied_unit.keys()",
    "{{ spark_firewall_dropin_dir }}/controller.nft": "~ '/controller.nft'",
    "{{ spark_firewall_ruleset.key }}": "spark_firewall_ruleset_pattern | default(",
    "{{ spark_firewall_unit_file.key }}": "spark_firewall_unit_pattern | default(",
}
# Written only while a change is applied under a revert guard (gone or inert once it is disarmed),
# or by check fabric (not a provision role's task).
TRANSIENT = ("revert", "nccl_check")


def _writes(tasks: list[dict[str, Any]] | None) -> Iterator[str | None]:
    for task in tasks or []:
        for key in ("block", "rescue", "always"):
            yield from _writes(task.get(key))
        for module, arg in WRITERS.items():
            if isinstance(task.get(module), dict):
                yield task[module].get(arg)


def test_every_file_a_provision_role_writes_is_hashed_by_the_cheap_round() -> None:
    seen = set()
    for role in (
        "spark_base",
        "spark_fabric",
        "spark_qos",
        "spark_runtime",
        "spark_exporter",
        "spark_firewall",
    ):
        for path in sorted((ROLES / role / "tasks").glob("*.yml")):
            for dest in _writes(yaml.safe_load(path.read_text())):
                if dest and any(word in dest for word in TRANSIENT):
                    continue
                assert dest in COVERED, (
                    f"{role}/{path.name} writes {dest}: add it to spark_applied's state spec"
                )
                seen.add(dest)
                covering = COVERED[dest]
                assert covering is None or covering in SPEC, (
                    f"{dest}: spark_applied's defaults lack {covering!r}"
                )
    assert seen == set(COVERED), f"no longer written: {set(COVERED) - seen}"


def test_the_firewall_patterns_repeated_in_spark_applied_match_the_roles_defaults() -> None:
    defaults = yaml.safe_load((ROLES / "spark_firewall" / "defaults" / "main.yml").read_text())
    for name in (
        "spark_firewall_ruleset_pattern",
        "spark_firewall_unit_pattern",
        "spark_firewall_dropin_dir",
        "spark_firewall_revert_unit",
    ):
        match = re.search(re.escape(name) + r" \| default\('([^']*)'\)", SPEC)
        assert match, name
        assert match.group(1).replace("\\\\", "\\") == defaults[name], name


def test_every_provision_role_ends_at_once_where_it_is_not_due() -> None:
    for short in ("base", "fabric", "qos", "runtime", "exporter", "firewall"):
        first = yaml.safe_load((ROLES / f"spark_{short}" / "tasks" / "main.yml").read_text())[0]
        assert first["ansible.builtin.meta"] == "end_role" and first["tags"] == ["always"]
        assert first["when"] == f"not spark_{short}_due | bool"
        defaults = yaml.safe_load((ROLES / f"spark_{short}" / "defaults" / "main.yml").read_text())
        assert defaults[f"spark_{short}_due"] is True  # other playbooks and manual runs: the whole role


def test_every_role_of_the_provision_playbook_is_gated_and_recorded() -> None:
    plays = yaml.safe_load((REPO / "playbooks" / "provision.yml").read_text())
    spec = yaml.safe_load(DEFAULTS)
    gated = {}
    for play in plays[1:]:
        for entry in play.get("roles", []):
            if entry["role"] == "spark_applied":
                continue
            short = entry["role"].removeprefix("spark_")
            assert short in spec["spark_applied_roles"], entry["role"]
            assert entry["tags"] == [spec["spark_applied_tags"][short]]
            due = entry[f"spark_{short}_due"]
            assert "when" not in entry  # a role-level condition costs a skipped task per task and host
            assert f"spark_applied_run.{short}" in due or "spark_applied_firewall_first" in due
            gated[short] = entry["role"]
        recorded = [t for t in play.get("post_tasks", []) if "ansible.builtin.include_role" in t]
        assert recorded and recorded[0]["ansible.builtin.include_role"]["tasks_from"] == "record"
    assert set(gated) == set(spec["spark_applied_roles"])


def test_each_role_describes_itself_next_to_its_tasks() -> None:
    """The registry names the roles; what each reads and owns is in the role's own directory, and
    none of it is parsed back out of rendered text (sparkctl renders the paths it needs)."""
    registry = yaml.safe_load(DEFAULTS)["spark_applied_roles"]
    assert set(registry) == set(SHORT) == set(yaml.safe_load(DEFAULTS)["spark_applied_tags"])
    for short, path in APPLIED.items():
        own = yaml.safe_load(path.read_text())
        entry = own[f"spark_{short}_applied"]
        assert entry["role"] == f"spark_{short}" and set(entry) == {"role", "inputs", "state"}
        assert registry[short] == f"{{{{ spark_{short}_applied }}}}"
        assert all(name.startswith(f"spark_{short}_") for name in own), path  # the role's prefix
        assert "regex_search" not in path.read_text(), path
    assert "regex_search" not in DEFAULTS
    loads = yaml.safe_load((ROLES / "spark_applied" / "tasks" / "main.yml").read_text())[0]
    assert loads["ansible.builtin.include_vars"]["file"].endswith("/spark_{{ item }}/vars/applied.yml")


def _included_roles(tasks: list[dict[str, Any]] | None) -> Iterator[str]:
    for task in tasks or []:
        for key in ("block", "rescue", "always"):
            yield from _included_roles(task.get(key))
        for module in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
            if isinstance(task.get(module), dict):
                yield str(task[module]["name"])


def test_a_role_a_provision_role_includes_is_among_its_inputs() -> None:
    """A change to an included role (spark_packages, spark_armed) changes what the including role
    does: its tree is digested with the including role's, so the fast path runs that role again."""
    for short, path in APPLIED.items():
        role = f"spark_{short}"
        included = {name for tasks in sorted((ROLES / role / "tasks").glob("*.yml"))
                    for name in _included_roles(yaml.safe_load(tasks.read_text()))}
        spec = yaml.safe_load(path.read_text())[f"{role}_applied"]
        trees = set(spec["inputs"]["trees"]) if isinstance(spec["inputs"]["trees"], list) else set()
        assert included <= trees, f"{role} includes {sorted(included - trees)}: add them to its inputs' trees"


def test_the_package_probe_is_written_once_in_spark_packages() -> None:
    """dpkg's probe of which names are installed (its Status-Abbrev), and apt's install of the
    missing ones, live in roles/spark_packages alone; the roles that need packages include it with
    their own names (spark_upgrade reads versions and installs exact pins, its own business)."""
    probes = sorted(str(p.relative_to(ROLES)) for p in ROLES.glob("*/tasks/*.yml")
                    if "Status-Abbrev" in p.read_text())
    assert probes == ["spark_packages/tasks/main.yml"], probes
    for role, names in (("spark_base", "spark_base_packages"), ("spark_exporter", "spark_exporter_packages"),
                        ("spark_router", "spark_router_packages")):
        text = "".join(p.read_text() for p in (ROLES / role / "tasks").glob("*.yml"))
        assert "name: spark_packages" in text and f'spark_packages_names: "{{{{ {names} }}}}"' in text, role
