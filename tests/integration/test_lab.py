"""The lab itself, against the real thing: four systemd nodes and a switch, real SSH, real MTUs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Lab  # tests/integration/conftest.py: the session fixture's handle

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]
HALF_A = "enp1s0f0np0"


def run_argv(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def _nspawn_pids() -> list[int]:
    """This lab's systemd-nspawn processes (not another lab's on the same host)."""
    from sparkctl_lab import state

    pattern = f"systemd-nspawn --boot --machine=[^ ]+ --directory={state.machines_dir()}/"
    return [int(p) for p in run_argv(["pgrep", "-f", pattern]).stdout.split()]


def _skip_if_shared(lab: Lab) -> None:
    if lab.in_use_by_another_session():
        pytest.skip(
            "another test session is using the lab right now; this test would break it under that session"
        )


def test_hostname_over_ssh_with_the_written_config(lab: Lab) -> None:
    proc = run_argv(["ssh", "-F", str(lab.ssh_config), "spark-2", "hostname"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "spark-2"


@pytest.mark.parametrize("machine", [*NODES, "lab-switch"])
def test_every_machine_runs_systemd_cleanly(lab: Lab, machine: str) -> None:
    out = lab.ssh(machine, "systemctl is-system-running; systemctl --failed --no-legend --plain", check=False)
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "running", f"{machine}: {out.stdout} {out.stderr}"
    assert lines[1:] == [], f"{machine} has failed units: {lines[1:]}"


def test_each_node_has_its_own_identity(lab: Lab) -> None:
    seen: dict[str, set[str]] = {"machine-id": set(), "hostkey": set(), "boot": set()}
    for node in NODES:
        ident = lab.ssh(
            node,
            "hostname; cat /etc/machine-id; cut -d' ' -f2 /etc/ssh/ssh_host_ed25519_key.pub; "
            "ip -br link show enP7s7; ip -br link show enp1s0f0np0; ip -br link show enP2p1s0f0np0; "
            "findmnt -n -o TARGET /mnt/nvme || test -d /mnt/nvme && echo dir",
        ).stdout.split("\n")
        assert ident[0] == node
        seen["machine-id"].add(ident[1])
        seen["hostkey"].add(ident[2])
        # Spark interface names, all up; fabric at the default MTU until provisioned.
        assert ident[3].startswith("enP7s7") and "UP" in ident[3]
        assert ident[4].startswith("enp1s0f0np0") and ident[5].startswith("enP2p1s0f0np0")
        mgmt = lab.ssh(node, "ip -4 -o addr show dev enP7s7").stdout
        assert f"{lab.mgmt_ip(node)}/24" in mgmt
    assert len(seen["machine-id"]) == 4 and len(seen["hostkey"]) == 4


def test_each_node_keeps_its_units_in_a_cgroup_of_its_own(lab: Lab) -> None:
    # Four systemds in one shared cgroup tree raced on every unit they had in common: one node
    # stopping sparkctl-firewall.service removed the cgroup another was starting it in (219/CGROUP).
    homes = {}
    for node in NODES:
        pid = lab.status()[node]["pid"]
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        homes[node] = sorted(ln.split(":", 2)[2] for ln in lines
                             if ln.startswith("0::") or ":name=systemd:" in ln)
        assert homes[node] and all(f"/{node}/" in path for path in homes[node]), (node, lines)
    assert len({tuple(h) for h in homes.values()}) == len(NODES), homes


def test_host_keys_are_checked_and_root_is_key_only(lab: Lab, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    strict = run_argv(
        ["ssh", "-F", str(lab.ssh_config), "-o", f"UserKnownHostsFile={empty}", "spark-1", "true"]
    )
    assert strict.returncode != 0 and "Host key verification failed" in strict.stderr
    password = run_argv(
        [
            "ssh",
            "-F",
            str(lab.ssh_config),
            "-o",
            "PreferredAuthentications=password,keyboard-interactive",
            "-o",
            "PubkeyAuthentication=no",
            "spark-1",
            "true",
        ]
    )
    assert password.returncode != 0 and "Permission denied" in password.stderr


def test_written_inventory_loads_into_the_model(lab: Lab) -> None:
    from sparkctl.model import load_inventory

    cluster = load_inventory(lab.inventory)
    assert [n.name for n in cluster.nodes] == NODES
    # The ranks run as containers of the kit's image, built on the head from the lab's synthetic kit.
    assert (cluster.runtime.kind, cluster.runtime.image_source) == ("container", "build")
    assert cluster.kit is not None and cluster.kit.source == "git" and cluster.kit.commit is not None
    assert cluster.switch is not None and cluster.switch.type == "linux"
    assert cluster.switch.host == lab.mgmt_ip("lab-switch")
    assert cluster.switch.ports["spark-2"] == {HALF_A: "s2a", "enP2p1s0f0np0": "s2b"}
    assert [str(p.address) for p in cluster.nodes[3].fabric_ports] == ["10.251.0.13/24", "10.251.1.13/24"]
    assert lab.api_key_file.stat().st_mode & 0o077 == 0
    known = lab.known_hosts.read_text().splitlines()
    subnet = re.escape(lab.mgmt_ip("lab-switch").rsplit(".", 1)[0])  # 10.250.0 on lab 0
    assert len(known) == 5 and all(re.match(rf"^\S+,{subnet}\.\d+ ssh-ed25519 \S+$", k) for k in known)


def test_ansible_reaches_every_host_with_the_inventory(lab: Lab, tmp_path: Path) -> None:
    ansible = REPO / ".venv" / "bin" / "ansible"
    if not ansible.exists():
        pytest.skip("ansible is not installed in .venv")
    proc = run_argv([str(ansible), "-i", str(lab.inventory), "all", "-m", "ansible.builtin.ping", "-o"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == 5


@pytest.fixture
def own_lab(lab: Lab) -> Lab:
    """The lab, for tests that break it on purpose: skipped while another session shares it."""
    _skip_if_shared(lab)
    return lab


def _link_state(lab: Lab, node: str, dev: str) -> tuple[int, list[str]]:
    data = json.loads(lab.exec(node, "ip", "-j", "addr", "show", "dev", dev).stdout)[0]
    return int(data["mtu"]), [f"{a['local']}/{a['prefixlen']}" for a in data.get("addr_info", [])]


@pytest.fixture
def jumbo_pair(own_lab: Lab) -> Iterator[tuple[str, str]]:
    """spark-0 and spark-1 with half A at MTU 9000 and its fabric address; restored afterwards."""
    lab = own_lab
    saved = {n: _link_state(lab, n, HALF_A) for n in ("spark-0", "spark-1")}
    for node in saved:
        lab.exec(node, "ip", "link", "set", HALF_A, "mtu", "9000")
        lab.exec(node, "ip", "addr", "replace", f"{lab.fabric_ip(node, 'a')}/24", "dev", HALF_A)
    yield lab.fabric_ip("spark-0", "a"), lab.fabric_ip("spark-1", "a")
    for node, (mtu, addrs) in saved.items():
        lab.exec(node, "ip", "link", "set", HALF_A, "mtu", str(mtu))
        if f"{lab.fabric_ip(node, 'a')}/24" not in addrs:
            lab.exec(node, "ip", "addr", "del", f"{lab.fabric_ip(node, 'a')}/24", "dev", HALF_A)


def _ping(lab: Lab, src: str, dst_ip: str, size: int) -> bool:
    proc = lab.ssh(src, f"ping -c 2 -W 1 -i 0.2 -M do -s {size} {dst_ip}", check=False)
    return proc.returncode == 0


def test_jumbo_frames_pass_only_while_every_hop_allows_them(lab: Lab, jumbo_pair: tuple[str, str]) -> None:
    _, dst = jumbo_pair
    assert _ping(lab, "spark-0", dst, 8972), "jumbo ping at MTU 9000 through 9216 switch ports should pass"
    with lab.port_mtu("s1a", 1500):
        assert not _ping(lab, "spark-0", dst, 8972), "a 1500 switch port must drop jumbo frames"
        assert _ping(lab, "spark-0", dst, 1400), "small frames still pass: the link itself is fine"
    assert _ping(lab, "spark-0", dst, 8972)


def test_cut_fabric_cable_keeps_management(lab: Lab, jumbo_pair: tuple[str, str]) -> None:
    _, dst = jumbo_pair
    with lab.link_down("spark-1", half="a"):
        assert not _ping(lab, "spark-0", dst, 56)
        carrier = lab.exec("spark-1", "cat", f"/sys/class/net/{HALF_A}/carrier", check=False).stdout.strip()
        assert carrier == "0"
        assert lab.ssh("spark-1", "hostname").stdout.strip() == "spark-1"
    # The cable back, networkd on the node configures the port again: seconds on a loaded machine (one
    # 2-ping burst right after it failed with two busy loops beside the lab tests).
    deadline = time.monotonic() + 20
    while not _ping(lab, "spark-0", dst, 56):
        assert time.monotonic() < deadline, f"spark-0 cannot reach {dst} 20 s after the cable was put back"
        time.sleep(1)


def test_power_off_and_on_gives_a_new_boot(own_lab: Lab) -> None:
    lab = own_lab
    boot_before = lab.ssh("spark-3", "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    lab.ssh("spark-3", "echo persisted > /mnt/nvme/marker && echo upper > /root/marker")
    with lab.powered_off("spark-3"):
        assert lab.status()["spark-3"]["state"] == "stopped"
        # ssh gives up itself (a stopped node answers nothing while the controller's ARP entry
        # still stands; 5 s here instead of the lab's ssh_config's ConnectTimeout 30)
        gone = subprocess.run(["ssh", "-F", str(lab.ssh_config), "-o", "ConnectTimeout=5", "spark-3", "true"],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert gone.returncode == 255, gone.stderr
    assert lab.status()["spark-3"]["system"] == "running"
    after = lab.ssh(
        "spark-3", "cat /proc/sys/kernel/random/boot_id /mnt/nvme/marker /root/marker"
    ).stdout.split()
    assert after[0] != boot_before
    assert after[1:] == ["persisted", "upper"]
    lab.ssh("spark-3", "rm -f /mnt/nvme/marker /root/marker")


def test_fill_nvme_leaves_the_requested_free_space(own_lab: Lab) -> None:
    lab = own_lab
    if not lab.nvme_gib:
        pytest.skip("the lab runs without size-limited NVMe (SPARKCTL_LAB_NVME_GIB=0)")
    with lab.nvme_filled("spark-2", free_mib=64):
        avail_mib = int(lab.ssh("spark-2", "df -m --output=avail /mnt/nvme | tail -1").stdout)
        assert 56 <= avail_mib <= 72
        full = lab.ssh("spark-2", "head -c 100M /dev/zero > /mnt/nvme/too-big", check=False)
        assert full.returncode != 0 and "No space left" in full.stderr
        lab.ssh("spark-2", "rm -f /mnt/nvme/too-big")
    assert int(lab.ssh("spark-2", "df -m --output=avail /mnt/nvme | tail -1").stdout) > 1000


def test_status_and_re_up_change_nothing(lab: Lab) -> None:
    status = lab.run_sparkctl("lab", "status", json_out=True)
    assert status.returncode == 0, status.stderr
    rows = {r["machine"]: r for r in json.loads(status.stdout)}
    assert {r["state"] for r in rows.values()} == {"running"}
    assert rows["spark-1"]["mgmt_ip"] == lab.mgmt_ip("spark-1")  # 10.250.0.11 on lab 0
    before = {p: p.read_text() for p in lab.inventory.rglob("*") if p.is_file()}
    t0 = time.monotonic()
    again = lab.run_sparkctl("lab", "up", json_out=True)
    elapsed = time.monotonic() - t0
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["started"] == [] and report["inventory_changed"] == []
    assert {p: p.read_text() for p in lab.inventory.rglob("*") if p.is_file()} == before
    # Nothing restarted (no machine started, the same PIDs below); how long it took is reported, not
    # held to the wall clock (at load ~25 it took 24.7 s; docs/performance.md: benchmarks under bench/).
    sys.stderr.write(f"\nlab up again (everything running): {elapsed:.1f} s\n")
    after = {r["machine"]: r["pid"] for r in lab.status().values()}
    assert after == {m: r["pid"] for m, r in rows.items()}


def test_exec_passes_the_exit_code_and_rejects_unknown_machines(lab: Lab) -> None:
    assert lab.run_sparkctl("lab", "exec", "spark-0", "--", "sh", "-c", "exit 7").returncode == 7
    bad = lab.run_sparkctl("lab", "exec", "spark-9", "--", "true")
    assert bad.returncode == 2 and "unknown lab machine" in bad.stderr
    assert lab.run_sparkctl("lab", "mtu", "s9a", "1500").returncode == 2


@pytest.mark.lab_last
def test_a_crashed_run_is_cleaned_by_the_next_up(lab: Lab) -> None:
    from sparkctl_lab import control, state

    _skip_if_shared(lab)
    # A crash: every container process killed, the state file lost, everything else left behind.
    for pid in _nspawn_pids():
        run_argv(["kill", "-9", str(pid)])
    state.state_file().unlink()
    time.sleep(1)
    assert any(item.startswith("network namespace") for item in control.leftovers())
    sizes = ["--nvme-gib", str(lab.nvme_gib)] if lab.nvme_gib else []
    proc = lab.run_sparkctl("lab", "up", *sizes, json_out=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)["system"].values()) == {"running"}
    assert lab.ssh("spark-2", "hostname").stdout.strip() == "spark-2"
    # exactly one container per machine afterwards
    assert len(_nspawn_pids()) == 5


@pytest.mark.lab_last
def test_down_leaves_nothing_behind(lab: Lab) -> None:
    from sparkctl_lab import state
    from sparkctl_lab import topology as topo

    _skip_if_shared(lab)
    inits = [r["pid"] for r in lab.status().values() if r["pid"]]
    assert len(inits) == 5
    proc = lab.run_sparkctl("lab", "down")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Checked with the host's own tools, not with the lab's bookkeeping.
    netns = run_argv(["ip", "netns", "list"]).stdout.split()
    assert not [ns for ns in netns if ns.startswith(topo.NETNS_PREFIX)]
    links = run_argv(["ip", "-o", "link", "show"]).stdout
    assert topo.MGMT_BRIDGE not in links and not re.search(rf"\d+: {topo.MGMT_VETH_PREFIX}", links)
    lab_root = f"{state.lab_dir()}/"  # this lab's files (another lab on the host has its own)
    assert lab_root not in Path("/proc/self/mountinfo").read_text()
    assert lab_root not in run_argv(["losetup", "--list", "--noheadings", "--output", "BACK-FILE"]).stdout
    for pid in inits:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", (
            f"init {pid} still runs"
        )
    nspawns = run_argv(["pgrep", "-a", "systemd-nspawn"]).stdout
    assert lab_root not in nspawns
    assert not state.state_file().exists()
    assert not lab.inventory.exists()
