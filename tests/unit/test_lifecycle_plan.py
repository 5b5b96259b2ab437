"""The lifecycle plans and playbooks: upgrade refuses an inventory that pins nothing, reset carries
--purge-data, the rolling play walks one node at a time and stops at the first failure, and reset
takes the firewall table only after the services and before the netplan file, under a revert."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from sparkctl.ansible import plan as planning
from sparkctl.errors import InputError
from sparkctl.model import load_inventory
from sparkctl.model.cluster import Upgrade

REPO = Path(__file__).resolve().parents[2]


def _play(playbook: str, name_part: str) -> dict[str, Any]:
    plays = yaml.safe_load((REPO / "playbooks" / playbook).read_text())
    return next(p for p in plays if name_part in p.get("name", ""))


def _task_names(path: str) -> list[str]:
    return [t["name"] for t in yaml.safe_load((REPO / path).read_text())]


def test_upgrade_plan_refuses_an_inventory_without_pins(example_copy: Path) -> None:
    cluster = load_inventory(example_copy)
    assert cluster.upgrade is None
    with pytest.raises(InputError, match="sparkctl_upgrade is not set"):
        planning.for_upgrade(cluster)


def test_upgrade_plan_check_mode_shows_the_diff(example_copy: Path) -> None:
    gv = example_copy / "group_vars" / "all" / "sparkctl.yml"
    gv.write_text(gv.read_text() + "\nsparkctl_upgrade:\n  packages: {chrony: 4.5-1}\n  reboot: false\n")
    cluster = load_inventory(example_copy)
    assert cluster.upgrade is not None and cluster.upgrade.packages == {"chrony": "4.5-1"}
    plan = planning.for_upgrade(cluster, check=True)
    assert (plan.playbook, plan.check, plan.diff, plan.extravars) == ("upgrade.yml", True, True, {})
    assert plan.argv()[-2:] == ["--check", "--diff"]


def test_reset_plan_carries_purge_data(example_copy: Path) -> None:
    cluster = load_inventory(example_copy)
    assert planning.for_reset(cluster).extravars == {"spark_reset_purge_data": False,
                                                     "spark_reset_confirm": "yes"}
    plan = planning.for_reset(cluster, purge_data=True, check=True)
    assert (plan.playbook, plan.check) == ("reset.yml", True)
    assert plan.extravars == {"spark_reset_purge_data": True}  # a check run needs no confirmation


@pytest.mark.parametrize(("value", "says"), [
    ({"packages": {"nvidia-driver-580-open": "580.*"}}, "not an exact version"),
    ({"packages": {"Bad_Name": "1.0"}}, "not a Debian package name"),
    ({"debs": ["/srv/fw/bundle.tar"]}, "not a .deb file"),
    ({"commands": [["fwupdmgr", "update"]]}, "absolute path"),
    ({"reboot_timeout_s": 5}, "greater than or equal to 30"),
])
def test_upgrade_section_refuses(value: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        Upgrade.model_validate(value)


def test_upgrade_section_empty_means_nothing_to_apply() -> None:
    assert Upgrade.model_validate({"reboot": False}).empty
    assert not Upgrade.model_validate({}).empty  # a reboot alone is an upgrade (e.g. a new kernel staged)


def test_the_rolling_play_takes_one_node_at_a_time_and_stops_at_the_first_failure() -> None:
    play = _play("upgrade.yml", "one node at a time")
    assert play["serial"] == 1
    assert play["max_fail_percentage"] == 0
    assert play["order"] == "sorted"
    roles = [t["ansible.builtin.include_role"] for t in play["tasks"] if "ansible.builtin.include_role" in t]
    assert [r["name"] for r in roles] == ["spark_upgrade", "spark_preflight", "spark_upgrade"]
    assert roles[2]["tasks_from"] == "verify.yml"
    down = _play("upgrade.yml", "group down")
    assert down.get("serial") is None and down["any_errors_fatal"] is True
    # check mode reports the stop instead of waiting for units it cannot stop (spark_rank's stop,
    # shared with down.yml and reset.yml)
    stop = next(t for t in down["tasks"] if t["name"] == "Stop the rank units in order")
    assert stop["vars"] == {"spark_rank_action": "stop"}
    rank_stop = yaml.safe_load((REPO / "roles/spark_rank/tasks/stop.yml").read_text())
    acting = next(t for t in rank_stop if "block" in t)
    assert acting["when"] == "not ansible_check_mode"
    assert {t["name"] for t in acting["block"]} >= {
        "Wait for each group's rank 0 to drain and leave within the grace period",
        "Wait for the other ranks to leave now that their rank 0 is gone"}
    report = next(t for t in rank_stop if t.get("ansible.builtin.debug"))
    assert "ansible_check_mode" in report["when"]
    # the whole group agrees at the end
    final = _play("upgrade.yml", "agree again")
    assert final["roles"] == [{"role": "spark_preflight"}]


def test_the_first_preflight_of_upgrade_does_not_compare_identities() -> None:
    # A resumed upgrade starts with nodes at two levels: only the per-node and final checks compare.
    first = yaml.safe_load((REPO / "playbooks" / "upgrade.yml").read_text())[0]
    assert first["ansible.builtin.import_playbook"] == "preflight.yml"
    assert first["vars"] == {"spark_preflight_identity": False}


def test_upgrade_role_is_honest_in_check_mode() -> None:
    tasks = yaml.safe_load((REPO / "roles/spark_upgrade/tasks/main.yml").read_text())
    by_name = {t["name"]: t for t in tasks}
    assert "not ansible_check_mode" in by_name["Run the firmware and driver commands"]["when"]
    assert "not ansible_check_mode" in by_name["Reboot the node and wait for SSH"]["when"]
    assert by_name["Report the reboot a real run would do (check mode)"]["changed_when"] is True
    # readers run for real in check mode (they change nothing), so the report says what would move
    assert by_name["Read the installed versions of the pinned packages"]["check_mode"] is False


def test_reset_order_services_then_firewall_then_netplan_then_files() -> None:
    names = _task_names("roles/spark_reset/tasks/main.yml")

    def at(part: str) -> int:
        return next(i for i, n in enumerate(names) if part in n)

    assert at("Stop and disable the sparkctl units") < at("Disable and stop the firewall loader")
    assert at("Disable and stop the firewall loader") < at("Delete the sparkctl table")
    assert at("Delete the sparkctl table") < at("Prove a new SSH connection")
    assert at("Prove a new SSH connection") < at("Remove the fabric netplan")
    assert at("Remove the fabric netplan") < at("Remove the rendered files")
    assert at("Remove the rendered files") < at("Remove sparkctl's revert state")
    # The netplan file goes under spark_armed's procedure (tests/unit/test_armed_revert.py): the
    # file is kept before it is armed, removed as its change, and the addresses flushed only after.
    block = next(t for t in yaml.safe_load((REPO / "roles/spark_reset/tasks/netplan.yml").read_text())
                 if "block" in t)
    inner = [t["name"] for t in block["block"]]
    armed = next(t for t in block["block"] if "ansible.builtin.include_role" in t)
    assert armed["ansible.builtin.include_role"]["name"] == "spark_armed"
    assert armed["vars"]["spark_armed_change"] == "netplan_change.yml"
    assert inner.index("Keep the netplan file") < inner.index(armed["name"])
    assert inner.index(armed["name"]) < inner.index("Flush the fabric addresses netplan no longer manages")
    assert "Remove the netplan file" in _task_names("roles/spark_reset/tasks/netplan_change.yml")


def test_reset_keeps_ssh_and_data_by_default() -> None:
    defaults = yaml.safe_load((REPO / "roles/spark_reset/defaults/main.yml").read_text())
    assert defaults["spark_reset_purge_data"] is False
    kept = ("/etc/ssh", "/root", "/home", "/etc/sudoers.d", "/etc/netplan", "/mnt")
    for path in defaults["spark_reset_dirs"] + defaults["spark_reset_files"]:
        assert not path.startswith(kept), path
    # only marked blocks leave shared SSH files, never the files themselves
    assert {b["path"] for b in defaults["spark_reset_blocks"]} == {"/etc/hosts", "/etc/ssh/ssh_known_hosts"}


def test_an_identity_mismatch_quotes_both_values() -> None:
    """An OS string that differs only by a prefix read as the same string twice ("os is held back Debian
    … here but Debian … on spark-0"): the upgrade's verify step quotes each value so the difference shows."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    task = yaml.safe_load((REPO / "roles/spark_upgrade/tasks/verify.yml").read_text())[0]
    variables: dict[str, Any] = {k: trust_as_template(v) for k, v in task["vars"].items()}
    variables.update(
        inventory_hostname="spark-2", groups={"sparks": ["spark-0", "spark-1", "spark-2"]},
        spark_upgrade_identity_fields=["os", "kernel"], spark_upgrade_expect={"kernel": "6.9"},
        spark_preflight_identity_result={"identity": {"os": "held back Debian 12", "kernel": "6.8"}},
        hostvars={"spark-0": {"spark_upgrade_identity": {"os": "Debian 12", "kernel": "6.8"}},
                  "spark-1": {}, "spark-2": {}},
    )
    said = Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template(task["ansible.builtin.assert"]["fail_msg"]))
    assert 'os is "held back Debian 12" here but "Debian 12" on spark-0' in said, said
    assert 'kernel is "6.8" here but sparkctl_upgrade.expect pins "6.9"' in said, said
    assert "spark-1" not in said  # not upgraded yet in this run: nothing to compare with
