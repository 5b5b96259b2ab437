"""Four simulated ranks started by hand on the lab, with exactly `sparkctl plan`'s argv and env.

The ranks run directly on the nodes (runtime kind ``lab``, no container and no kit: the plan comes
from a copy of the lab inventory saying so), so the simulator's own rendezvous is what is tested.
The rendezvous runs over the lab fabric (the head's fabric address in --dist-init-addr): rank 0
is not ready while a rank is missing, becomes ready once all four joined, and turns /health to
503 within 5 s of rank 2 being killed.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import yaml

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

UNIT = "sparkctl-byhand"
# SIGKILL the rank's process (a power cut for the rank; the unit's cgroup is left to systemd).
_KILL = f"pid=$(systemctl show -p MainPID --value {UNIT}); [ \"${{pid:-0}}\" -gt 0 ] && kill -9 $pid"


def _plan(lab: Lab, tmp: Path) -> dict[str, Any]:
    """`sparkctl plan --json` of the lab's inventory with the simulator run directly on the nodes."""
    inv = tmp / "lab-direct"
    shutil.copytree(lab.inventory, inv, symlinks=True)
    site = inv / "group_vars" / "all" / "sparkctl.yml"
    site_vars = yaml.safe_load(site.read_text())
    site_vars["sparkctl_runtime"] = {"kind": "lab"}
    site_vars.pop("sparkctl_kit", None)
    site.write_text(yaml.safe_dump(site_vars, sort_keys=False))
    proc = subprocess.run([sys.executable, "-m", "sparkctl", "-i", str(inv), "--json", "plan"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def _start(lab: Lab, node: dict[str, Any]) -> None:
    launch = node["rank_launch"]
    setenv = [f"--setenv={k}={v}" for k, v in launch["env"].items()]
    cmd = ["systemd-run", f"--unit={UNIT}", "--collect", "--property=KillMode=mixed", *setenv, "--",
           "/usr/bin/env", *launch["argv"]]
    lab.ssh(node["name"], shlex.join(cmd))


def _stop_all(lab: Lab, names: list[str]) -> None:
    for name in names:
        lab.ssh(name, f"{_KILL}; systemctl stop {UNIT} 2>/dev/null; true", check=False)


def _get(url: str) -> int:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return 0


def _wait(url: str, want: int, timeout: float) -> float | None:
    """Seconds until `url` answers `want`, or None after `timeout`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if _get(url) == want:
            return time.monotonic() - t0
        time.sleep(0.2)
    return None


@pytest.fixture(scope="module")
def by_hand(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, dict[str, Any]]]:
    # The fabric addresses and the simulator on every node (a lab already provisioned: the fast
    # path, no playbook); nothing of a previous `up` running.
    proc = lab.run_sparkctl("provision", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lab.run_sparkctl("down", timeout=300)
    plan = _plan(lab, tmp_path_factory.mktemp("by-hand"))
    names = [n["name"] for n in plan["nodes"]]
    # The rank's --config file carries the API key on real nodes; give it one of the same shape.
    key = lab.api_key_file.read_text().strip()
    for name in names:
        lab.ssh(name, f"install -d -m 0700 /etc/sparkctl && umask 077 && "
                      f"printf 'api-key: %s\\n' {shlex.quote(key)} > /etc/sparkctl/rank-secrets.yaml")
    _stop_all(lab, names)
    yield lab, plan
    _stop_all(lab, names)


def test_ready_only_when_all_four_joined_and_peer_loss_is_seen(by_hand: tuple[Lab, dict[str, Any]]) -> None:
    lab, plan = by_hand
    nodes = {n["rank"]: n for n in plan["nodes"]}
    head = nodes[0]
    argv = head["rank_launch"]["argv"]
    assert argv[argv.index("--dist-init-addr") + 1].startswith(lab.fabric_ip("spark-0") + ":")
    port = argv[argv.index("--port") + 1]
    base = f"http://{head['mgmt']}:{port}"
    boot = float(head["rank_launch"]["env"].get("SPARKCTL_SIM_BOOT_DELAY_S", "3"))

    for rank in (1, 2, 0):  # rank 3 held back
        _start(lab, nodes[rank])
    assert _wait(f"{base}/ready", 200, boot + 6) is None, "rank 0 became ready with rank 3 missing"

    _start(lab, nodes[3])
    took = _wait(f"{base}/ready", 200, boot + 30)
    assert took is not None, "rank 0 never became ready after all four joined"
    assert _get(f"{base}/health") == 200
    key = lab.api_key_file.read_text().strip()
    info = httpx.get(f"{base}/server_info", headers={"Authorization": f"Bearer {key}"}, timeout=5).json()
    assert info["simulator"] is True
    assert info["tp_size"] == 4

    lab.ssh(nodes[2]["name"], _KILL)
    lost = _wait(f"{base}/health", 503, 5.0)
    assert lost is not None, "rank 0 /health still 200 five seconds after rank 2 was killed"
