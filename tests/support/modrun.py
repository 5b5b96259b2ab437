"""One node-side Ansible module run through Ansible itself on localhost (AnsiballZ packing the role's
module_utils symlinks included), for the role modules' unit tests.

Plain ``linear``, not Mitogen (LOCAL_RUN_ENV): the module runs as an ``ansible-playbook`` without
Mitogen runs it, AnsiballZ and all, and a one-task run costs ~30 % less CPU than bootstrapping a
Mitogen child. A Mitogen child must also come up within 30 s, which a unit test niced beside the
lab tests (`make test`) cannot promise. Mitogen's own shipping of module_utils is checked by
test_strategy_mitogen.py, and every module runs through Mitogen on the lab's nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = Path(sys.executable).parent / "ansible"

LOCAL_RUN_ENV = {"ANSIBLE_STRATEGY": "linear"}

needs_ansible = pytest.mark.skipif(not ANSIBLE.exists(),
                                   reason="ansible is not installed next to this python")


def run_module(role: str, name: str, args: dict[str, Any], check: bool = False,
               env: dict[str, str] | None = None) -> tuple[bool, dict[str, Any]]:
    """Run module ``name`` of ``roles/<role>`` on localhost with ``args``; (failed, result)."""
    full_env = {
        **os.environ,
        **(env or {}),
        **LOCAL_RUN_ENV,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LIBRARY": str(REPO / "roles" / role / "library"),
        "ANSIBLE_MODULE_UTILS": str(REPO / "roles" / role / "module_utils"),
        "ANSIBLE_VARS_ENABLED": "host_group_vars",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.minimal",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_NOCOLOR": "1",
    }
    argv = [str(ANSIBLE), "localhost", "-i", "localhost,", "-c", "local", "-m", name,
            "-e", f"ansible_python_interpreter={sys.executable}", "-a", json.dumps(args)]
    if check:
        argv.append("--check")
    proc = subprocess.run(argv, capture_output=True, text=True, env=full_env, cwd=REPO, timeout=180,
                          check=False)
    head, sep, body = proc.stdout.partition(" => ")
    assert sep, proc.stdout + proc.stderr
    res: dict[str, Any] = json.loads(body)
    return "FAILED" in head or bool(res.get("failed")), res


ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def run_role_playbook(role: str, playbook: Path) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook playbook`` on localhost with ``roles/<role>``'s modules, action plugins and
    module_utils (plain linear, as ``run_module``); the finished process, whatever its exit."""
    where = REPO / "roles" / role
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LIBRARY": str(where / "library"),
        "ANSIBLE_ACTION_PLUGINS": str(where / "action_plugins"),
        "ANSIBLE_MODULE_UTILS": str(where / "module_utils"),
        "ANSIBLE_VARS_ENABLED": "host_group_vars",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        **LOCAL_RUN_ENV,
    }
    argv = [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(playbook),
            "-e", f"ansible_python_interpreter={sys.executable}"]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=180, check=False)
