"""Changes that can cut the controller's access are undone by the node itself (dead man's switch).

A ruleset that drops SSH and a netplan whose route captures the controller's address are applied
through the roles' own guarded apply tasks; the node must revert on its own, within the armed time,
and the controller must get back in.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
TARGET = "spark-1"


def _playbook(lab: Any, name: str, **extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    argv = ["ansible-playbook", "-i", str(lab.inventory), str(PLAYBOOKS / name),
            "-e", f"sparkctl_test_target={TARGET}"]
    for key, value in extra.items():
        argv += ["-e", f"{key}={value}"]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0"}
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    return proc, time.monotonic() - t0


@pytest.fixture(scope="module")
def provisioned(lab: Any) -> Any:
    lab.heal()
    proc = lab.run_sparkctl("provision", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return lab


def test_a_ruleset_that_cuts_ssh_is_taken_away_by_the_node(provisioned: Any) -> None:
    lab = provisioned
    try:
        proc, seconds = _playbook(lab, "firewall_cut.yml", sparkctl_test_revert_seconds="20")
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-3000:]
        assert "deleted the table and disabled sparkctl-firewall-cut.service by itself" in out, out[-3000:]
        assert seconds < 20 + 90, f"the revert took {seconds:.0f} s"
        # The node took the table away and will not load it at boot.
        assert lab.ssh(TARGET, "nft list table inet sparkctl", check=False).returncode != 0
        enabled = lab.ssh(TARGET, "systemctl is-enabled sparkctl-firewall-cut.service", check=False)
        assert enabled.stdout.strip() == "disabled"
    finally:
        lab.exec(TARGET, "sh", "-c",
                 "systemctl disable --now sparkctl-firewall-cut.service;"
                 " rm -f /etc/systemd/system/sparkctl-firewall-cut.service /etc/sparkctl/firewall-cut.nft;"
                 " systemctl daemon-reload; systemctl restart sparkctl-firewall.service", check=False)
    # The real ruleset is back and SSH works through it.
    assert lab.ssh(TARGET, "nft list table inet sparkctl", check=False).returncode == 0


def test_a_netplan_that_cuts_the_controllers_path_is_restored_by_the_node(provisioned: Any) -> None:
    lab = provisioned
    netplan = "/etc/netplan/40-sparkctl-fabric.yaml"
    before = lab.exec(TARGET, "cat", netplan).stdout
    peer = lab.fabric_ip("spark-0", "a")
    try:
        proc, seconds = _playbook(lab, "netplan_cut.yml", sparkctl_test_revert_seconds="40",
                                  sparkctl_test_peer=peer)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-3000:]
        assert "the previous network configuration was restored" in out, out[-3000:]
        assert seconds < 40 + 15 + 120, f"the revert took {seconds:.0f} s"
        assert lab.exec(TARGET, "cat", netplan).stdout == before
        routes = lab.exec(TARGET, "ip", "-4", "route").stdout
        assert f"via {peer}" not in routes, routes
        assert lab.ssh(TARGET, "true", check=False).returncode == 0
    finally:
        if lab.exec(TARGET, "cat", netplan, check=False).stdout != before:
            lab.run_sparkctl("provision", "--tags", "fabric", "--limit", TARGET, timeout=600)


def test_the_configuration_directory_is_private(provisioned: Any) -> None:
    # The rank's env and secrets files land here later (`up`): nobody else may ever read them.
    for node in provisioned.nodes:
        mode = provisioned.exec(node, "stat", "-c", "%a", "/etc/sparkctl").stdout.strip()
        assert mode == "700", f"{node}: /etc/sparkctl is {mode}"


def test_a_limited_provision_keeps_every_node_in_the_ssh_mesh(provisioned: Any) -> None:
    lab = provisioned
    proc = lab.run_sparkctl("provision", "--tags", "base", "--limit", TARGET, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    keys = lab.exec(TARGET, "sh", "-c", "sed -n '/BEGIN sparkctl mesh/,/END sparkctl mesh/p' "
                    "$(getent passwd root | cut -d: -f6)/.ssh/authorized_keys").stdout
    assert sum("sparkctl-mesh" in line for line in keys.splitlines()) == len(lab.nodes), keys
    pinned = lab.exec(TARGET, "sh", "-c", "sed -n '/BEGIN sparkctl mesh/,/END sparkctl mesh/p' "
                      "/etc/ssh/ssh_known_hosts").stdout
    for node in lab.nodes:
        assert any(line.startswith(f"{node},") for line in pinned.splitlines()), (node, pinned)


def _writers(under: Path) -> list[int]:
    """PIDs of the processes whose environment names `under` (ansible-runner gives it to
    ansible-playbook, which hands it on to every worker it forks)."""
    needle = str(under).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                pids.append(int(entry.name))
        except OSError:  # gone meanwhile, or a kernel thread
            continue
    return pids


def _kill_writers(under: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while pids := _writers(under):
        assert time.monotonic() < deadline, f"processes still writing under {under}: {pids}"
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def test_a_provision_killed_mid_way_leaves_no_secret_in_its_records(provisioned: Any, tmp_path: Path) -> None:
    """A secret in the controller's environment (HF_TOKEN here) must not reach the run records even
    when sparkctl and ansible-playbook are killed without any chance to clean up."""
    lab = provisioned
    token = "hf_" + "Zq7" * 12
    runs = tmp_path / "runs"
    env = {**os.environ, "HF_TOKEN": token, "SPARKCTL_RUNS_DIR": str(runs)}
    # --full: on a provisioned lab a plain provision finds nothing due in one SSH round and runs no
    # playbook at all (it ended before it could be killed); the secret must survive a playbook's kill.
    argv = [sys.executable, "-m", "sparkctl", "-i", str(lab.inventory), "provision", "--full"]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not list(runs.glob("*/artifacts/*/job_events/*.json")):
            time.sleep(0.5)
        time.sleep(3)  # well inside the run: events written, the playbook busy on the nodes
        assert proc.poll() is None, "provision ended before it could be killed"
    finally:
        with contextlib.suppress(ProcessLookupError):  # already ended: the assertion above says so
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        # ansible-runner starts ansible-playbook in a session of its own (a pty), so the group kill
        # never reached it: kill it and its workers too, and read the records only once nothing
        # writes there any more (a listed event file could otherwise be renamed under the read).
        _kill_writers(runs)
    files = [p for p in runs.rglob("*") if p.is_file()]
    assert files, "the run wrote no records"
    for path in files:
        assert token not in path.read_text(errors="replace"), path
