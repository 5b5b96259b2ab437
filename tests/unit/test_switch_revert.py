"""RouterOS apply: a dead-man revert armed on the switch, and fabric ports moved out of any other bridge.

The role's tasks are read from roles/spark_switch/tasks/routeros.yml and walked in order against a
stand-in switch (support.routeros_fake): the commands are the role's own Jinja, rendered with the
role's own filters, so the order arm -> import -> new login -> disarm and the rescue's two ways back
(revert at once while the switch answers, else let the armed revert fire) are tested by behaviour.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from support.routeros_fake import FakeRouterOS, LoginRefused

from sparkctl.model import load_inventory
from sparkctl.render import switch

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "roles" / "spark_switch" / "tasks"
_spec = importlib.util.spec_from_file_location(
    "sparkctl_switch_filters_revert",
    REPO / "roles" / "spark_switch" / "filter_plugins" / "sparkctl_switch.py")
assert _spec and _spec.loader
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)

BACKUP = "sparkctl-backup-20261205T093000Z"
PORTS = ["qsfp56-dd-1-1", "qsfp56-dd-2-1", "qsfp56-dd-3-1", "qsfp56-dd-4-1"]


@pytest.fixture(scope="module")
def rsc() -> str:
    return switch.routeros(load_inventory(REPO / "inventory" / "example"))


# --- the rendered script: ports moved out of another bridge, never left ----------------------------

def test_each_port_is_taken_out_of_any_other_bridge_before_it_is_added(rsc: str) -> None:
    for port in PORTS:
        move = (f':foreach p in=[find where interface="{port}" and bridge!=sparkctl-fabric] do={{ '
                f':put ("sparkctl: moving {port} out of bridge " . [get $p bridge]); remove $p }}')
        add = (f':if ([:len [find interface="{port}" bridge=sparkctl-fabric]] = 0) do={{ '
               f'add bridge=sparkctl-fabric interface="{port}" hw=yes }}')
        assert move in rsc and add in rsc
        assert rsc.index("/interface bridge port\n") < rsc.index(move) < rsc.index(add)


def test_the_script_itself_arms_no_revert(rsc: str) -> None:
    """Imported by hand it must not arm a revert to a backup it knows nothing of."""
    assert "scheduler" not in rsc and "backup load" not in rsc


def _fabric(ports: dict[str, str]) -> FakeRouterOS:
    fake = FakeRouterOS(bridge_ports={"ether1": "bridge", **ports})
    return fake


def test_a_port_in_the_default_bridge_is_moved_and_said(rsc: str) -> None:
    fake = _fabric({"qsfp56-dd-1-1": "bridge", "qsfp56-dd-3-1": "sparkctl-fabric"})
    fake.files["sparkctl-fabric.rsc"] = rsc
    answer = fake.run("/import file-name=sparkctl-fabric.rsc verbose=yes")
    assert {p: fake.bridge_ports[p] for p in PORTS} == dict.fromkeys(PORTS, "sparkctl-fabric")
    assert filters.routeros_moved_ports(answer) == ["qsfp56-dd-1-1 out of bridge bridge"]
    assert filters.routeros_import_errors(answer) == []
    # imported again: nothing to move, nothing added twice
    again = fake.run("/import file-name=sparkctl-fabric.rsc verbose=yes")
    assert filters.routeros_moved_ports(again) == [] and filters.routeros_import_errors(again) == []


def test_ports_in_another_bridge_are_found_before_the_apply(rsc: str) -> None:
    listing = ("Flags: I - INACTIVE\n"
               " 0   interface=ether1 bridge=bridge priority=0x80\n"
               ' 1 I interface=qsfp56-dd-1-1 bridge=bridge priority=0x80 comment="x y"\n'
               ' 2   interface="qsfp56-dd-2-1" bridge=sparkctl-fabric\n'
               ' 3   interface=qsfp56-dd-3-1 bridge="lan 2"\n')
    assert filters.routeros_foreign_bridge_ports(listing, rsc) == [
        "qsfp56-dd-1-1 (in bridge)", "qsfp56-dd-3-1 (in lan 2)"]
    assert filters.routeros_foreign_bridge_ports("", rsc) == []


def test_the_moved_port_line_is_no_error_and_its_echo_is_no_move() -> None:
    answer = ['/interface bridge port\n:foreach p in=[find where interface="x" and bridge!=sparkctl-fabric] '
              'do={ :put ("sparkctl: moving x out of bridge " . [get $p bridge]); remove $p }\n'
              "sparkctl: moving x out of bridge bridge\nScript file loaded and executed successfully"]
    assert filters.routeros_import_errors(answer) == []
    assert filters.routeros_moved_ports(answer) == ["x out of bridge bridge"]


# --- the revert commands ------------------------------------------------------------------------------

def test_arm_probe_and_disarm_commands() -> None:
    assert filters.routeros_revert_arm(BACKUP, 300) == (
        '/system scheduler add name="sparkctl-revert" interval=300s '
        f'comment="sparkctl: dead-man revert to {BACKUP} (removed once a new login works)" '
        'on-event=":log warning \\"sparkctl: no new login confirmed the change; loading '
        f'{BACKUP}.backup\\"; /system backup load name=\\"{BACKUP}.backup\\" password=\\"\\""')
    assert filters.routeros_revert_probe() == (
        ':put ("sparkctl-revert armed=" . [:len [/system scheduler find where name="sparkctl-revert"]])')
    assert filters.routeros_revert_disarm() == '/system scheduler remove [find where name="sparkctl-revert"]'
    assert filters.routeros_revert_armed(["sparkctl-revert armed=1"]) == 1
    assert filters.routeros_revert_armed("sparkctl-revert armed=0\n") == 0
    # the probe's own echo carries no count; a cut session no answer
    assert filters.routeros_revert_armed(filters.routeros_revert_probe()) == -1
    assert filters.routeros_revert_armed("") == -1


@pytest.mark.parametrize("seconds", [0, 10, 29])
def test_a_revert_too_short_to_outlast_the_import_is_refused(seconds: int) -> None:
    with pytest.raises(ValueError, match="30 or more"):
        filters.routeros_revert_arm(BACKUP, seconds)


@pytest.mark.parametrize("name", ["", 'a"b', "a;b", "a$b"])
def test_a_backup_name_that_is_no_plain_file_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError):
        filters.routeros_revert_arm(name, 300)


# --- the role's order, read from its YAML -------------------------------------------------------------

def _load(name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((TASKS / name).read_text())


def _apply_block() -> list[dict[str, Any]]:
    (apply,) = [t for t in _load("routeros.yml") if t["name"] == "Apply the rendered script"]
    return apply["block"]


def _armed_block() -> dict[str, Any]:
    (armed,) = [t for t in _apply_block() if t["name"] == "Import under a revert armed on the switch"]
    return armed


def test_the_backup_is_saved_with_no_revert_armed_and_before_the_import() -> None:
    names = [t["name"] for t in _apply_block()]
    clear, save, armed = (names.index(n) for n in ("Clear a revert left armed by an earlier run",
                                                    "Save a backup and an export on the switch",
                                                    "Import under a revert armed on the switch"))
    assert clear < save < armed
    assert not any("/import" in str(t) for t in _apply_block()
                   if t["name"] != "Import under a revert armed on the switch")


def test_the_order_is_arm_import_new_login_disarm() -> None:
    names = [t["name"] for t in _armed_block()["block"]]
    order = ["Arm the revert on the switch", "Import the script",
             "Drop the open connection (the next command must log in anew)",
             "Log in anew and find the revert still waiting", "Disarm the revert"]
    assert [n for n in names if n in order] == order
    tasks = {t["name"]: t for t in _armed_block()["block"]}
    assert tasks["Drop the open connection (the next command must log in anew)"]["ansible.builtin.meta"] == \
        "reset_connection"
    assert "sparkctl_routeros_revert_arm" in str(tasks["Arm the revert on the switch"])
    assert "sparkctl_routeros_revert_disarm" in str(tasks["Disarm the revert"])


def test_the_rescue_never_disarms() -> None:
    """A failed apply either reverts at once or leaves the revert armed to fire: never removes it."""
    rescue = _armed_block()["rescue"]
    assert "sparkctl_routeros_revert_disarm" not in str(rescue)
    (now,) = [t for t in rescue if t["name"].startswith("Revert now")]
    assert now["ansible.builtin.include_tasks"] == "routeros_rollback.yml"
    assert now["vars"] == {"spark_switch_restore_name": "{{ spark_switch_backup_name }}"}


# --- the role's tasks walked against the stand-in switch ----------------------------------------------

class Failed(Exception):
    def __init__(self, task: dict[str, Any], result: dict[str, Any]) -> None:
        super().__init__(result.get("msg", ""))
        self.task, self.result = task, result


class Unreachable(Exception):
    pass


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "on")
    return bool(value)


class _Undefined(jinja2.ChainableUndefined):
    """Like Ansible's: `.a.b[0]` of something undefined stays undefined (for `default`), but
    rendering it fails."""

    def __str__(self) -> str:
        self._fail_with_undefined_error()
        return ""


class Walker:
    """Runs the role's tasks (the modules they use here) against a FakeRouterOS."""

    def __init__(self, fake: FakeRouterOS, rsc: str, **extra: Any) -> None:
        self.fake = fake
        self.env = jinja2.Environment(undefined=_Undefined)
        self.env.filters.update(filters.FilterModule().filters())
        self.env.filters["bool"] = _bool
        self.env.tests["unreachable"] = lambda r: bool((r or {}).get("unreachable"))
        self.env.tests["succeeded"] = lambda r: not (r or {}).get("failed")
        self.env.tests["failed"] = lambda r: bool((r or {}).get("failed"))
        self.vars: dict[str, Any] = {
            "inventory_hostname": "crs812", "ansible_check_mode": False,
            "spark_switch_backup_name": BACKUP, "spark_switch_backups": [],
            "spark_switch_backup_dir": "/state/switch-backups",
            "spark_switch_script_name": "sparkctl-fabric.rsc", "sparkctl_rendered": {"switch_config": rsc,
                                                                                      "ssh_port": 22},
            **{k: v for k, v in yaml.safe_load(
                (REPO / "roles" / "spark_switch" / "defaults" / "main.yml").read_text()).items()
               if k.startswith("spark_switch_revert_") or k in ("spark_switch_reboot_timeout",
                                                                 "spark_switch_backups_keep")},
            **extra,
        }
        self.trace: list[str] = []

    def value(self, template: Any) -> Any:
        if isinstance(template, str):
            m = re.fullmatch(r"\s*\{\{(.*)\}\}\s*", template, re.S)
            if m and "{{" not in m.group(1):
                return self.env.compile_expression(m.group(1), undefined_to_none=False)(**self.vars)
            return self.env.from_string(template).render(**self.vars)
        if isinstance(template, list):
            return [self.value(t) for t in template]
        if isinstance(template, dict):
            return {k: self.value(v) for k, v in template.items()}
        return template

    def test(self, expr: Any) -> bool:
        if isinstance(expr, bool):
            return expr
        return _bool(self.env.compile_expression(str(expr))(**self.vars))

    def tasks(self, tasks: list[dict[str, Any]]) -> None:
        for task in tasks:
            self.task(task)

    def task(self, task: dict[str, Any]) -> None:
        if "block" in task:
            conditions = task.get("when", [])
            if not all(self.test(c) for c in (conditions if isinstance(conditions, list) else [conditions])):
                return
            try:
                self.tasks(task["block"])
            except Failed as exc:
                if "rescue" not in task:
                    raise
                self.trace.append(f"rescue after: {exc.task['name']}")
                self.vars["ansible_failed_task"] = {"name": exc.task["name"]}
                self.vars["ansible_failed_result"] = exc.result
                self.tasks(task["rescue"])
            return
        saved = dict(self.vars)
        self.vars.update({k: self.value(v) for k, v in (task.get("vars") or {}).items()})
        try:
            conditions = task.get("when", [])
            if not all(self.test(c) for c in (conditions if isinstance(conditions, list) else [conditions])):
                result = {"skipped": True}
            elif "loop" in task:
                self.trace.append(task["name"])
                result = {}
                for item in self.value(task["loop"]):
                    self.vars["item"] = item
                    result = self.module(task)
            else:
                self.trace.append(task["name"])
                result = self.module(task)
        finally:
            local = set(task.get("vars") or {})
            for k in local:
                if k in saved:
                    self.vars[k] = saved[k]
                else:
                    self.vars.pop(k, None)
        if "register" in task:
            self.vars[task["register"]] = result
        if result.get("skipped"):
            return
        if result.get("unreachable") and not task.get("ignore_unreachable"):
            raise Unreachable(task["name"])
        if result.get("failed") and not task.get("ignore_errors"):
            raise Failed(task, result)

    def module(self, task: dict[str, Any]) -> dict[str, Any]:
        fake = self.fake
        if "ansible.builtin.set_fact" in task:
            self.vars.update({k: self.value(v) for k, v in task["ansible.builtin.set_fact"].items()})
            return {}
        if "ansible.builtin.assert" in task:
            args = task["ansible.builtin.assert"]
            that = args["that"] if isinstance(args["that"], list) else [args["that"]]
            if not all(self.test(t) for t in that):
                return {"failed": True, "msg": self.value(args.get("fail_msg", "assertion failed"))}
            return {}
        if "ansible.builtin.fail" in task:
            msg = str(self.value(task["ansible.builtin.fail"]["msg"]))
            return {"failed": True, "msg": " ".join(msg.split())}
        if "ansible.builtin.debug" in task:
            return {"msg": self.value(task["ansible.builtin.debug"].get("msg"))}
        if "ansible.builtin.meta" in task:
            assert task["ansible.builtin.meta"] == "reset_connection"
            fake.reset_connection()
            return {}
        if "ansible.builtin.copy" in task:
            str(self.value(task["ansible.builtin.copy"]["content"]))  # what it would write must render
            return {}
        if "ansible.netcommon.net_put" in task:
            dest = self.value(task["ansible.netcommon.net_put"]["dest"])
            fake.files[dest] = self.vars["sparkctl_rendered"]["switch_config"]
            return {}
        if "ansible.builtin.include_tasks" in task:
            self.tasks(_load(self.value(task["ansible.builtin.include_tasks"])))
            return {}
        if "ansible.builtin.wait_for" in task:
            args = self.value(task["ansible.builtin.wait_for"])
            if "port" not in args:
                fake.advance(int(args["timeout"]))
                return {}
            fake.advance(int(args.get("delay", 0)))
            if fake.management_works():
                return {}
            fake.advance(int(args["timeout"]))
            return {"failed": True, "msg": "Timeout when waiting for the switch"}
        if "community.routeros.command" in task or "ansible.netcommon.cli_command" in task:
            if self.vars["ansible_check_mode"] and task.get("check_mode") is not False:
                return {"skipped": True}  # the module does not support check mode
            if "community.routeros.command" in task:
                commands = self.value(task["community.routeros.command"]["commands"])
            else:
                commands = [self.value(task["ansible.netcommon.cli_command"]["command"])]
            out = []
            try:
                for command in commands:
                    out.append(fake.run(command))
            except LoginRefused as exc:
                return {"unreachable": True, "msg": str(exc)}
            if "failed_when" in task:
                return {"stdout": out, "failed": False}
            return {"stdout": out}
        raise AssertionError(f"the walker does not run {task['name']}")

    def diff(self) -> None:
        """`switch diff`: the whole apply block in check mode."""
        self.vars["ansible_check_mode"] = True
        self.tasks(_apply_block())

    def apply(self) -> None:
        self.tasks(_apply_block())


def _switch(rsc: str, **ports: str) -> tuple[FakeRouterOS, Walker]:
    fake = FakeRouterOS(bridge_ports={"ether1": "bridge", **ports})
    return fake, Walker(fake, rsc)


def test_a_good_apply_proves_a_new_login_then_disarms(rsc: str) -> None:
    fake, walk = _switch(rsc, **{"qsfp56-dd-2-1": "bridge"})
    walk.apply()
    assert fake.scheduler == {}  # disarmed
    assert fake.bridge_ports["qsfp56-dd-2-1"] == "sparkctl-fabric"
    assert fake.reboots == 0 and fake.sessions == 2  # the one that imported, and a new one that disarmed
    trace = walk.trace
    assert trace.index("Arm the revert on the switch") < trace.index("Import the script") < trace.index(
        "Log in anew and find the revert still waiting") < trace.index("Disarm the revert")
    assert "Report the fabric ports moved out of another bridge" in trace
    # said before anything changed (also what `switch diff` shows), and again once moved
    assert trace.index("Disarm the revert") < trace.index("Report whether the switch changed")
    said = trace.index("Say which fabric ports leave another bridge")
    assert said < trace.index("Arm the revert on the switch")
    assert BACKUP + ".backup" in fake.backups and fake.backups[BACKUP + ".backup"]["scheduler"] == {}
    fake.advance(3600)
    assert fake.reboots == 0  # nothing left to fire


def test_an_import_that_cuts_management_reverts_on_the_switch_by_itself(rsc: str) -> None:
    """The management port was (wrongly) cabled as a Spark port: the move cuts every new login."""
    cut = rsc.replace('"qsfp56-dd-1-1"', '"ether1"')
    fake, walk = _switch(cut)
    with pytest.raises(Failed) as failed:
        walk.apply()
    # the open session imported; the new login failed; nothing could disarm; the switch reverted itself
    assert "rescue after: Require the new login and the revert still armed" in walk.trace
    assert "Disarm the revert" not in walk.trace and not any(t.startswith("Revert now") for t in walk.trace)
    assert fake.reboots == 1 and fake.management_works()
    assert fake.bridge_ports["ether1"] == "bridge" and fake.scheduler == {}
    assert f"reverted by itself to {BACKUP}" in str(failed.value)
    assert not any(t.startswith("Remove backups beyond") for t in walk.trace)  # the backup it needs stays
    assert fake.log == [f"sparkctl: no new login confirmed the change; loading {BACKUP}.backup"]


def test_a_failed_import_on_a_switch_that_answers_reverts_at_once(rsc: str) -> None:
    broken = rsc.replace("/interface bridge port\n", "/interface bridge port\nbogus line\n", 1)
    fake, walk = _switch(rsc, **{"qsfp56-dd-2-1": "bridge"})
    walk.vars["sparkctl_rendered"]["switch_config"] = broken

    def failing_import(script: str, _orig: Any = fake._import) -> str:
        try:
            return _orig(script)
        except AssertionError:
            return "bad command name bogus (line 1 column 1)"

    fake._import = failing_import  # type: ignore[method-assign]
    with pytest.raises(Failed) as failed:
        walk.apply()
    assert "rescue after: Refuse an import that reported any error" in walk.trace
    assert "Revert now (the switch answers; the switch reboots into this run's backup)" in walk.trace
    assert "Load the backup (the switch reboots)" in walk.trace
    assert fake.reboots == 1 and fake.scheduler == {}
    assert f"reverted at once to {BACKUP}" in str(failed.value)


def test_a_revert_that_cannot_arm_imports_nothing(rsc: str) -> None:
    fake, walk = _switch(rsc, **{"qsfp56-dd-2-1": "bridge"})
    walk.vars["spark_switch_revert_seconds"] = 10  # refused by the arm filter
    with pytest.raises((Failed, ValueError)):
        walk.apply()
    assert "Import the script" not in walk.trace
    assert fake.bridge_ports["qsfp56-dd-2-1"] == "bridge" and fake.reboots == 0


def test_switch_diff_reads_says_and_changes_nothing(rsc: str) -> None:
    fake, walk = _switch(rsc, **{"qsfp56-dd-2-1": "bridge"})
    before = dict(fake.bridge_ports)
    walk.diff()
    assert "Say which fabric ports leave another bridge" in walk.trace
    assert "Show what would change against the script applied last time" in walk.trace
    assert not any(t.startswith(("Arm", "Import", "Clear", "Save")) for t in walk.trace)
    assert fake.bridge_ports == before and fake.scheduler == {} and fake.backups == {}
