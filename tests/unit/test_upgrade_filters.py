"""spark_upgrade's decision (roles/spark_upgrade/filter_plugins/sparkctl_upgrade.py): a node that
already matches the pins gets no update and no reboot; a node that differs gets its update and a
reboot only when the update requires one. Then the role itself, run by ansible-playbook on
localhost with a stand-in firmware command: a resumed run leaves a done node alone."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.modrun import ANSIBLE, LOCAL_RUN_ENV, needs_ansible

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "sparkctl_upgrade_filters", REPO / "roles" / "spark_upgrade" / "filter_plugins" / "sparkctl_upgrade.py"
)
assert _spec and _spec.loader
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)

DRIVER = "nvidia-driver-580-open"
PINNED = {DRIVER: "580.95.05-0ubuntu1"}
FIRMWARE = [["/usr/bin/fwupdmgr", "update", "--assume-yes"]]
EXPECT = {"nvidia_driver": "580.95.05", "cx7_firmware": "28.45.1020"}
RUNNING_NEW = {"nvidia_driver": "580.95.05", "cx7_firmware": "28.45.1020", "kernel": "6.11.0-1016-nvidia"}
RUNNING_OLD = {"nvidia_driver": "570.172.08", "cx7_firmware": "28.43.1014", "kernel": "6.11.0-1016-nvidia"}


def plan(installed: dict[str, str], identity: dict[str, str] | None, *, commands: Any = FIRMWARE,
         expect: dict[str, str] | None = None, record: str | None = None) -> dict[str, Any]:
    return filters.upgrade_plan(installed, PINNED, [], commands, EXPECT if expect is None else expect,
                                identity, record)


def test_a_node_that_matches_the_pins_gets_no_update_and_no_reboot() -> None:
    p = plan({DRIVER: "580.95.05-0ubuntu1"}, RUNNING_NEW)
    assert p["matches"] and not p["run_commands"]
    assert p["todo_packages"] == {} and p["todo_debs"] == [] and p["mismatched"] == {}
    # Even when the node asks for a reboot for something else: sparkctl changed nothing.
    assert filters.upgrade_reboot(p, True, True) == {
        "reboot": False, "why": "the node already matches the pins: nothing was changed"}


def test_a_node_on_the_old_driver_and_firmware_is_updated_and_rebooted() -> None:
    p = plan({DRIVER: "570.172.08-0ubuntu1"}, RUNNING_OLD)
    assert not p["matches"] and p["run_commands"]
    assert p["todo_packages"] == PINNED
    assert p["mismatched"] == {"nvidia_driver": {"running": "570.172.08", "expected": "580.95.05"},
                               "cx7_firmware": {"running": "28.43.1014", "expected": "28.45.1020"}}
    assert p["changes"] == [
        f"{DRIVER} 570.172.08-0ubuntu1 -> 580.95.05-0ubuntu1",
        "nvidia_driver is 570.172.08, expected 580.95.05",
        "cx7_firmware is 28.43.1014, expected 28.45.1020",
        "run /usr/bin/fwupdmgr update --assume-yes",
    ]
    decision = filters.upgrade_reboot(p, True, False)
    assert decision == {"reboot": True,
                        "why": "its running cx7_firmware, nvidia_driver differ(s) from expect"}


def test_an_installed_package_whose_driver_does_not_run_yet_still_reboots() -> None:
    """A run stopped after the install and before the reboot: the package is at its version, the
    running driver is not — the node is not done, and its reboot is due."""
    p = plan({DRIVER: "580.95.05-0ubuntu1"}, RUNNING_OLD)
    assert not p["matches"] and p["todo_packages"] == {}
    assert filters.upgrade_reboot(p, True, False)["reboot"] is True


def test_an_update_that_requires_no_reboot_does_not_reboot() -> None:
    # A userspace package moves; the running identity already is what expect pins; no reboot flag.
    p = plan({DRIVER: "580.95.05-0ubuntu0"}, RUNNING_NEW, commands=[])
    assert not p["matches"] and p["todo_packages"] == PINNED and p["mismatched"] == {}
    assert filters.upgrade_reboot(p, True, False) == {
        "reboot": False, "why": "the update does not require a reboot"}
    # ... unless the update asks for one.
    assert filters.upgrade_reboot(p, True, True) == {
        "reboot": True, "why": "the node asks for a reboot (reboot-required)"}
    assert filters.upgrade_reboot(p, False, True)["reboot"] is False  # sparkctl_upgrade.reboot: false


def test_commands_without_expect_run_until_recorded_then_never_again() -> None:
    installed = {DRIVER: "580.95.05-0ubuntu1"}
    first = plan(installed, None, expect={})
    assert not first["matches"] and first["run_commands"]
    assert first["changes"] == ["the commands were not recorded as applied with these pins",
                                "run /usr/bin/fwupdmgr update --assume-yes"]
    assert filters.upgrade_reboot(first, True, False)["reboot"] is True  # nothing else can confirm them
    again = plan(installed, None, expect={}, record=first["digest"])
    assert again["matches"] and not again["run_commands"]
    # Other pins (another firmware command) make the record stale.
    other = plan(installed, None, expect={}, record=first["digest"], commands=[["/usr/bin/true"]])
    assert not other["matches"]


def test_expect_without_a_read_identity_counts_as_differing() -> None:
    p = plan({DRIVER: "580.95.05-0ubuntu1"}, None)
    assert not p["matches"] and set(p["mismatched"]) == set(EXPECT)


def test_installed_versions_are_read_from_dpkg_query_lines() -> None:
    results = [{"rc": 0, "stdout": f"{DRIVER} 580.95.05-0ubuntu1 installed"},
               {"rc": 0, "stdout": "nvidia-utils 570.1 config-files"},
               {"rc": 1, "stdout": ""}]
    assert filters.upgrade_installed(results) == {DRIVER: "580.95.05-0ubuntu1"}


# --- the role, by ansible-playbook on localhost ----------------------------------------------------

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: The role's update step
      ansible.builtin.include_role:
        name: spark_upgrade
    - name: Keep the report
      ansible.builtin.copy:
        content: "{{ spark_upgrade_report | to_json }}"
        dest: "{{ report_path }}"
        mode: "0600"
"""


def _installed(package: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True,
                          text=True, check=True).stdout.strip()


def run_role(tmp: Path, commands: list[list[str]]) -> dict[str, Any]:
    (tmp / "play.yml").write_text(PLAYBOOK)
    extra = {
        "ansible_python_interpreter": sys.executable,
        "sparkctl_upgrade": {"packages": {"bash": _installed("bash")}, "commands": commands,
                             "reboot": False, "update_cache": False},
        "spark_upgrade_record_path": str(tmp / "state" / "upgrade.json"),
        "spark_upgrade_reboot_flag": str(tmp / "reboot-required"),
        "spark_upgrade_reboot_timeout_s": 30,
        "report_path": str(tmp / "report.json"),
    }
    env = {**os.environ, **LOCAL_RUN_ENV, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_VARS_ENABLED": "host_group_vars", "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [str(ANSIBLE) + "-playbook", "-i", "localhost,", "-c", "local", "-e", json.dumps(extra),
         str(tmp / "play.yml")],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report: dict[str, Any] = json.loads((tmp / "report.json").read_text())
    return report


@needs_ansible
@pytest.mark.skipif(subprocess.run(["which", "dpkg-query"], capture_output=True).returncode != 0,
                    reason="no dpkg-query")
def test_the_role_runs_the_commands_once_and_a_resumed_run_leaves_the_node_alone(tmp_path: Path) -> None:
    ran = tmp_path / "firmware-ran"
    stand_in = [["/bin/sh", "-c", f"echo once >> {ran}"]]
    first = run_role(tmp_path, stand_in)
    assert ran.read_text() == "once\n"
    assert first["skipped"] is False and first["commands"] == 1 and first["rebooted"] is False
    assert first["reboot_why"].startswith("a reboot is due (firmware/driver commands ran")
    assert json.loads((tmp_path / "state" / "upgrade.json").read_text())["digest"]
    second = run_role(tmp_path, stand_in)
    assert ran.read_text() == "once\n", "the firmware command did not run again"
    assert second["skipped"] is True and second["commands"] == 0 and second["rebooted"] is False
    assert second["reboot_why"] == "the node already matches the pins: nothing was changed"
