"""The switch before the nodes: `switch diff|apply` run playbooks/switch.yml limited to the switch,
and Ansible itself then puts no node in any play (the nodes' preflight has no host), so a switch
can be configured while every node is still unreachable or not yet cabled."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from sparkctl.ansible import plan as planning
from sparkctl.model import load_inventory

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"


def _hosts_per_play(argv: list[str]) -> dict[str, list[str]]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}")
    proc = subprocess.run([*argv, "--list-hosts"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    plays: dict[str, list[str]] = {}
    current = ""
    for line in proc.stdout.splitlines():
        if m := re.match(r"\s*play #\d+ \((\S+)\)", line):
            current = m.group(1)
            plays[current] = []
        elif current and re.match(r"^\s{6}\S+$", line):
            plays[current].append(line.strip())
    return plays


def test_switch_diff_and_apply_put_no_node_in_any_play() -> None:
    cluster = load_inventory(REPO / "inventory" / "example")
    for check in (True, False):
        plan = planning.for_switch(cluster, check=check, diff=check)
        plays = _hosts_per_play(plan.argv())
        assert plays == {"sparks": [], "switches": ["crs812"]}, plays
