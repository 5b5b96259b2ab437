"""The armed revert exists once (roles/spark_armed) and the three roles that can cut SSH include it;
reset.yml run by hand refuses without -e spark_reset_confirm=yes; ansible.cfg names only paths
that exist."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
# role -> (tasks file that includes spark_armed, the change file, the check file or "", the
# variable holding the apply command spark_armed runs in a transient unit, or "")
GUARDED = {
    "spark_fabric": ("apply.yml", "apply_change.yml", "apply_check.yml", "spark_fabric_apply_command"),
    "spark_firewall": ("apply.yml", "apply_change.yml", "", ""),
    "spark_reset": ("netplan.yml", "netplan_change.yml", "", "spark_reset_apply_command"),
}


def _tasks(path: Path) -> list[dict[str, Any]]:
    return yaml.safe_load(path.read_text()) or []


def _walk(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for task in tasks:
        out.append(task)
        for key in ("block", "rescue", "always"):
            out += _walk(task.get(key) or [])
    return out


def test_the_procedure_is_written_once_in_spark_armed() -> None:
    block = _tasks(ROLES / "spark_armed" / "tasks" / "main.yml")[0]
    names = [t["name"] for t in block["block"]]
    order = ["Arm the revert on the node", "Make the change",
             "Drop the open connection (the next task must connect anew)",
             "Connect again", "Prove the change took", "Disarm the revert"]
    assert [n for n in names if n in order] == order
    assert "rescue" in block
    # nowhere else: no other role arms a timer, drops the connection or waits for a new one
    for path in sorted(ROLES.rglob("tasks/*.yml")):
        if path.parts[-3] == "spark_armed":
            continue
        for task in _walk(_tasks(path)):
            argv = (task.get("ansible.builtin.command") or {}).get("argv") if isinstance(
                task.get("ansible.builtin.command"), dict) else None
            assert not (argv and argv[0] == "systemd-run"), f"{path}: arms a timer of its own"


@pytest.mark.parametrize("role", sorted(GUARDED))
def test_each_guarded_role_includes_it(role: str) -> None:
    includer, change, check, apply = GUARDED[role]
    tasks = _walk(_tasks(ROLES / role / "tasks" / includer))
    (armed,) = [t for t in tasks if "ansible.builtin.include_role" in t]
    assert armed["ansible.builtin.include_role"] == {"name": "spark_armed"}
    params = armed["vars"]
    assert params["spark_armed_role"] == role
    assert params["spark_armed_change"] == change and (ROLES / role / "tasks" / change).is_file()
    assert params.get("spark_armed_check", "") == check
    if check:
        assert (ROLES / role / "tasks" / check).is_file()
    assert params.get("spark_armed_apply", "") == ("{{ " + apply + " }}" if apply else "")
    spec = yaml.safe_load((ROLES / "spark_armed" / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert set(params) <= set(options), set(params) - set(options)
    required = {k for k, v in options.items() if v.get("required")}
    assert required <= set(params), required - set(params)
    defaults = yaml.safe_load((ROLES / "spark_armed" / "defaults" / "main.yml").read_text())
    assert set(defaults) == set(options)


def test_no_async_job_runs_where_the_connection_is_dropped() -> None:
    """A change file runs just before spark_armed drops the connection. Mitogen's async job says it
    started before it detaches from that connection, so the drop can kill it before it ran (a reset
    under load failed so: 'the respondent Context has disconnected'); the apply runs in a transient
    unit of spark_armed's instead, which the node's systemd owns."""
    for role, (_includer, change, check, _apply) in GUARDED.items():
        for name in (change, check):
            if not name:
                continue
            for task in _walk(_tasks(ROLES / role / "tasks" / name)):
                assert "async" not in task and "ansible.builtin.async_status" not in task, \
                    f"{role}/tasks/{name}: {task.get('name')} runs as an async job"
    names = [t["name"] for t in _walk(_tasks(ROLES / "spark_armed" / "tasks" / "main.yml")[0]["block"])]
    assert names.index("Start the apply on the node (detached)") \
        < names.index("Drop the open connection (the next task must connect anew)") \
        < names.index("Wait for the apply to finish") < names.index("Prove the change took")


# Only a hang reaches this: the run takes seconds alone, minutes when starved beside the lab tests
# (180 s was once not enough there).
HANG_S = 900


def _reset_run(inventory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    # every node points at a closed local port: nothing past the refusal could get anywhere
    return subprocess.run(
        [str(bin_dir / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks" / "reset.yml"),
         "-e", "ansible_host=127.0.0.1", "-e", "ansible_port=9", "-e", "ansible_timeout=5", *extra],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=HANG_S, check=False)


def test_reset_by_hand_refuses_without_the_confirmation(example_copy: Path) -> None:
    proc = _reset_run(example_copy)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "run it again with -e spark_reset_confirm=yes" in out, out
    assert "PLAY [Preflight" not in out and "UNREACHABLE" not in out, out


def test_reset_by_hand_goes_on_with_the_confirmation(example_copy: Path) -> None:
    proc = _reset_run(example_copy, "-e", "spark_reset_confirm=yes")
    out = proc.stdout + proc.stderr
    assert "spark_reset_confirm=yes to go ahead" not in out, out
    assert "PLAY [Preflight" in out, out  # past the refusal (the closed port stops it there)


def test_ansible_cfg_names_only_paths_that_exist() -> None:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg")
    for key in ("roles_path", "collections_path", "library", "vars_plugins", "strategy_plugins",
                "module_utils", "action_plugins", "filter_plugins", "lookup_plugins"):
        value = cfg["defaults"].get(key)
        for part in (value or "").split(":"):
            if part:
                assert (REPO / part).exists(), f"ansible.cfg {key} = {value}: {part} does not exist"
