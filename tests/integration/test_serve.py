"""`sparkctl up/status/down` on the lab: four simulated ranks as real systemd units over real SSH.

Needs the lab (tests/integration/conftest.py); the module provisions it and stages the shards once.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]
UNIT = "sparkctl-rank.service"


def _ok(proc: Any, what: str) -> None:
    assert proc.returncode == 0, (
        f"{what} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )


def _units(lab: Lab) -> dict[str, str]:
    return {n: lab.ssh(n, f"systemctl is-active {UNIT}", check=False).stdout.strip() for n in NODES}


def _rank_processes(lab: Lab, node: str) -> list[str]:
    out = lab.ssh(node, "pgrep -af sparkctl_sim.rank || true", check=False).stdout
    return [line for line in out.splitlines() if line.strip() and "pgrep" not in line]


def test_up_reaches_ready_and_status_exits_0(served: Lab) -> None:
    up = served.run_sparkctl("up", "--yes", json_out=True)  # ranks an earlier module left may run
    _ok(up, "up")
    doc = json.loads(up.stdout)
    assert doc["result"] == "ready"
    status = served.run_sparkctl("status", json_out=True)
    _ok(status, "status")
    snap = json.loads(status.stdout)
    assert snap["verdict"] == "ready" and snap["reasons"] == []
    assert [n["unit"]["active"] for n in snap["nodes"]] == ["active"] * 4
    # The API key sits only in the 0600 secrets config: not in argv, not in the unit or the env file.
    key = served.api_key_file.read_text().strip()
    for node in NODES:
        mode = served.ssh(node, "stat -c %a /etc/sparkctl/rank-secrets.yaml /etc/sparkctl/rank.env").stdout
        assert mode.split() == ["600", "600"]
        # The key travels on stdin into a 0600 pattern file, so the search itself never puts it in argv.
        search = (
            "umask 077; cat > /run/leak-pattern; "
            f"grep -l -F -f /run/leak-pattern /proc/[0-9]*/cmdline /etc/sparkctl/rank.env "
            f"/etc/systemd/system/{UNIT} 2>/dev/null; rm -f /run/leak-pattern; true"
        )
        leaked = subprocess.run(
            ["ssh", "-F", str(served.ssh_config), node, search],
            input=key + "\n", capture_output=True, text=True, timeout=60, check=True,
        ).stdout
        assert leaked.strip() == "", f"{node}: API key found in {leaked}"



def test_status_again_reads_the_unchanged_inventory_from_the_cache(served: Lab) -> None:
    """A second `status` on the unchanged lab inventory finds it in the parsed-inventory cache
    (sparkctl.model.cache): the same verdict, and a process that imports neither ansible-core nor
    ansible-runner (Python's import log, PYTHONPROFILEIMPORTTIME, names every module it imports)."""
    first = served.run_sparkctl("status", json_out=True)  # fills the cache where it was cold
    again = served.run_sparkctl("status", json_out=True, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert again.returncode == first.returncode, again.stderr[-2000:]
    assert json.loads(again.stdout)["verdict"] == json.loads(first.stdout)["verdict"]
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in again.stderr.splitlines()
                if line.startswith("import time:") and line.count("|") == 2}
    assert "sparkctl" in imported and not imported & {"ansible", "ansible_runner"}, sorted(imported)

def test_the_lab_ranks_get_no_traffic_class_without_a_lossless_switch_class(served: Lab) -> None:
    """host_qos is on in the lab, but its Linux bridge has no PFC class: neither the plan nor the
    env file up wrote on each node marks RoCE traffic (NCCL_IB_TC, B12X_ROCE_TRAFFIC_CLASS)."""
    plan = served.run_sparkctl("plan", json_out=True)
    _ok(plan, "plan")
    doc = json.loads(plan.stdout)
    assert doc["switch"]["type"] == "linux"
    for entry in doc["nodes"]:
        env = entry["rank_launch"]["env"]
        assert "NCCL_IB_HCA" in env and "NCCL_IB_TC" not in env and "B12X_ROCE_TRAFFIC_CLASS" not in env
    for node in NODES:
        text = served.ssh(node, "cat /etc/sparkctl/rank.env").stdout
        assert "NCCL_IB_HCA=" in text, node
        assert "NCCL_IB_TC=" not in text and "B12X_ROCE_TRAFFIC_CLASS=" not in text, (node, text)


def test_killed_rank_turns_status_degraded_and_up_heals(served: Lab) -> None:
    _ok(served.run_sparkctl("up"), "up")
    # SIGKILL the rank's process (systemd's own `kill` cannot signal a cgroup-v1 scope inside nspawn).
    served.ssh("spark-2", f"kill -9 $(systemctl show -p MainPID --value {UNIT})")
    deadline = time.monotonic() + 5.0
    while True:
        status = served.run_sparkctl("status", json_out=True)
        snap = json.loads(status.stdout)
        if snap["verdict"] == "degraded" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert snap["verdict"] == "degraded" and status.returncode == 3, snap
    assert any(r.startswith("spark-2 (rank 2)") for r in snap["reasons"])
    _ok(served.run_sparkctl("up", "--yes"), "up (heal)")  # replaces the three ranks still running
    _ok(served.run_sparkctl("status"), "status after heal")


def test_node_powered_off_before_up_is_refused(served: Lab) -> None:
    _ok(served.run_sparkctl("down"), "down")
    with served.powered_off("spark-3"):
        up = served.run_sparkctl("up")
        assert up.returncode == 1, up.stdout + up.stderr
        assert "preflight refused the start" in up.stderr and "spark-3" in up.stderr
        units = {n: s for n, s in _units(served).items() if n != "spark-3"}
        assert set(units.values()) <= {"inactive", "unknown"}, units


def test_memory_floor_above_the_lab_aborts_the_boot(served: Lab, tmp_path: Path) -> None:
    """The guard trips while the ranks boot: each simulated rank holds 1.5 GiB and the floor (a profile
    override in a copy of the lab inventory) sits 2 GiB under what preflight saw, so the start passes
    preflight and the memory guard stops everything."""
    _ok(served.run_sparkctl("down"), "down")
    avail_kib = int(served.ssh("spark-0", "awk '/MemAvailable/ {print $2}' /proc/meminfo").stdout)
    floor = round(avail_kib / 1024 / 1024 - 2.0, 2)
    site = tmp_path / "lab-floor"
    shutil.copytree(served.inventory, site)
    group_vars = site / "group_vars" / "all" / "sparkctl.yml"
    doc = yaml.safe_load(group_vars.read_text())
    doc["sparkctl_profile_overrides"] = {
        "memory": {"floor_gib": floor, "unified_gib": round(floor + 8, 2)},
        "simulator": {"hold_mem_mib": 1536},
    }
    group_vars.write_text(yaml.safe_dump(doc, sort_keys=False))
    up = subprocess.run(
        [sys.executable, "-m", "sparkctl", "-i", str(site), "up"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert up.returncode == 1, up.stdout + up.stderr
    assert "memory guard" in up.stderr, up.stderr
    assert set(_units(served).values()) <= {"inactive", "failed"}
    for node in NODES:
        assert _rank_processes(served, node) == []


def _status_naming(lab: Lab, node: str, words: str, within_s: float = 30.0) -> tuple[int, dict[str, Any]]:
    """`status --json` polled until a reason of ``node`` holds ``words`` (or the time is up)."""
    deadline = time.monotonic() + within_s
    while True:
        status = lab.run_sparkctl("status", json_out=True)
        snap = json.loads(status.stdout)
        mine = [r for r in snap["reasons"] if r.startswith(f"{node} (rank ") and words in r]
        if mine or time.monotonic() > deadline:
            return status.returncode, snap
        time.sleep(0.5)


def test_a_rank_unit_restarted_after_ready_fails_status_naming_it(served: Lab) -> None:
    """A rank restarted by hand rejoins no TP group: status says so even though its unit runs again
    (the unit's new invocation against the one `up` recorded at readiness)."""
    _ok(served.run_sparkctl("up", "--yes"), "up")
    _ok(served.run_sparkctl("status"), "status after up")
    served.ssh("spark-2", f"systemctl restart {UNIT}")
    rc, snap = _status_naming(served, "spark-2", "restarted since `up` made it ready")
    assert rc == 3 and snap["verdict"] == "degraded", snap
    assert "spark-2 (rank 2): restarted since `up` made it ready (≥1×: the rank unit runs a new invocation)" \
        in snap["reasons"], snap["reasons"]
    assert snap["faults"]["spark-2"], snap
    _ok(served.run_sparkctl("up", "--yes"), "up (heal)")  # a fresh group, recorded again at readiness
    _ok(served.run_sparkctl("status"), "status after heal")


def test_a_rank_container_restarted_by_docker_fails_status_naming_it(served: Lab) -> None:
    """`docker restart` of one rank's container (the container runtime: the lab with its kit)."""
    _ok(served.run_sparkctl("up", "--yes"), "up")
    listed = served.ssh("spark-1", "docker ps --format '{{.Names}}' 2>/dev/null || true", check=False)
    names = listed.stdout.split()
    rank = [n for n in names if n.endswith("-r1")]
    if not rank:
        pytest.skip("the lab's ranks run without containers (no kit in its inventory)")
    served.ssh("spark-1", f"docker restart --time 5 {rank[0]}")
    rc, snap = _status_naming(served, "spark-1", f"container {rank[0]} restarted since `up` made it ready")
    assert rc == 3 and snap["verdict"] in ("degraded", "down"), snap
    assert any(r.startswith(f"spark-1 (rank 1): container {rank[0]} restarted since `up` made it ready")
               for r in snap["reasons"]), snap["reasons"]
    _ok(served.run_sparkctl("up", "--yes"), "up (heal)")
    _ok(served.run_sparkctl("status"), "status after heal")


def test_a_rank_container_oom_killed_fails_status_naming_it(served: Lab) -> None:
    """A real OOM kill: the running rank container's memory limit set below what the simulated rank
    holds (the lab profile's hold_mem_mib, 256 MiB), no swap, so the kernel kills it (docker's
    State.OOMKilled). Skipped where the lab's ranks run without containers or its docker cannot set
    a memory limit (no memory controller inside the node)."""
    _ok(served.run_sparkctl("up", "--yes"), "up")
    listed = served.ssh("spark-3", "docker ps --format '{{.Names}}' 2>/dev/null || true", check=False)
    rank = [n for n in listed.stdout.split() if n.endswith("-r3")]
    if not rank:
        pytest.skip("the lab's ranks run without containers (no kit in its inventory)")
    limit = served.ssh("spark-3", f"docker update --memory 32m --memory-swap 32m {rank[0]} 2>&1", check=False)
    if limit.returncode != 0:
        served.run_sparkctl("up", "--yes")
        pytest.skip(f"docker cannot limit the rank container's memory here: {limit.stdout.strip()[-200:]}")
    rc, snap = _status_naming(served, "spark-3", f"container {rank[0]} was OOM-killed", within_s=60.0)
    assert rc == 3 and snap["verdict"] in ("degraded", "down"), snap
    assert f"spark-3 (rank 3): container {rank[0]} was OOM-killed" in snap["reasons"], snap["reasons"]
    _ok(served.run_sparkctl("up", "--yes"), "up (heal)")
    _ok(served.run_sparkctl("status"), "status after heal")


def test_down_leaves_no_rank_process(served: Lab) -> None:
    """The module's last test (not `lab_last`: at the end of its stream, after the shape modules had
    re-cabled the lab, it provisioned, staged and started the four-node group again for one `down`)."""
    _ok(served.run_sparkctl("up"), "up")
    down = served.run_sparkctl("down", json_out=True)
    _ok(down, "down")
    # Every node answered: the stop went over SSH, rank 0's SIGTERM first, and rank 0 drained and
    # told the workers to exit (no forced shutdown).
    doc = json.loads(down.stdout)
    assert doc["path"] == "ssh" and doc["stopped"] is True, doc
    assert set(_units(served).values()) == {"inactive"}
    for node in NODES:
        assert _rank_processes(served, node) == [], node
    head_log = served.ssh(NODES[0], "journalctl -u sparkctl-rank.service -n 30 --no-pager").stdout
    assert "graceful shutdown" in head_log, head_log[-2000:]
    again = served.run_sparkctl("down")
    _ok(again, "second down")
    assert "nothing was running" in again.stdout
