"""Two serving groups on the lab: its four nodes as group a (spark-0, spark-1) and group b
(spark-2, spark-3), each TP2 with its own rendezvous and rank 0, over real SSH and systemd; then
SGLang's gateway in front of them (needs its x86_64 wheel, ``SPARKCTL_ROUTER_WHEELS``: `make
integration` fetches it; without it the router tests skip saying so).

The lab's inventory is copied and given ``sparkctl_groups`` (``support.groups_lab``). Each group's
ranks start with --nnodes 2 and --node-rank 0/1 and meet at their own head; Engram shards are packed
r0of2/r1of2 per group; `up`, `status`, `down`, `logs` and `bundle` act per group (--group) and on
all. With the router on spark-1 (round_robin): `up --full` installs and starts it after the groups
and returns once the router lists both groups' rank 0 (its router gate), status shows it routing to
both at once (the gateway's command line names its workers, never the key), the site's endpoint
(``qa.endpoint.for_cluster`` of the whole site, what bench and qualify measure through) is the
router, requests through it reach both groups' rank 0, and `bench` and `qualify --via-router`
measure the site once through it, each group's rank 0 idle and as its profile behind it; a killed
router comes back, and `down` stops it first; a router whose port is taken fails its start within
seconds with its own journal's words. At the end the lab is left as its own inventory had
it (``GroupsSite.restore``).
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from support.groups_lab import GROUPS, ROUTER_UNIT, GroupsSite, ok

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

ROUTER_NODE = "spark-1"
PORT, METRICS_PORT = 8889, 29000
WHEELS = os.environ.get("SPARKCTL_ROUTER_WHEELS", "")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(served: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GroupsSite]:
    served.run_sparkctl("down")  # the one-group ranks an earlier module left
    s = GroupsSite.make(served, tmp_path_factory.mktemp("groups"))
    ok(s.run("validate"), "validate")
    try:
        yield s
    finally:
        left = s.restore()
        assert not left, left


def test_stage_engram_packs_each_groups_tp2_shards(site: GroupsSite) -> None:
    from sparkctl.model import load_inventory

    engram_dir = load_inventory(site.inventory).paths.engram_dir
    ok(site.run("stage", "engram", timeout=1800), "stage engram")
    for name, nodes in GROUPS.items():
        for rank, node in enumerate(nodes):
            listing = site.lab.ssh(node, f"ls {engram_dir}", check=False).stdout
            assert f"r{rank}of2" in listing, f"group {name}: {node} has no r{rank}of2 shard: {listing}"


def test_up_brings_both_groups_up_each_with_its_own_rendezvous(site: GroupsSite) -> None:
    up = site.run("up", "--yes", json_out=True)
    ok(up, "up")
    doc = json.loads(up.stdout)
    assert doc["result"] == "ready" and sorted(doc["groups"]) == ["a", "b"]
    assert set(site.units().values()) == {"active"}
    head_b = site.lab.fabric_ip("spark-2")
    argv = site.rank_argv("spark-3")
    assert "--nnodes 2" in argv and "--node-rank 1" in argv and f"--dist-init-addr {head_b}:" in argv, argv
    status = site.run("status", json_out=True)
    ok(status, "status")
    snap = json.loads(status.stdout)
    assert snap["verdict"] == "ready"
    assert {g: s["verdict"] for g, s in snap["groups"].items()} == {"a": "ready", "b": "ready"}


def test_logs_and_bundle_of_one_group(site: GroupsSite, tmp_path: Path) -> None:
    logs = site.run("logs", "--group", "b", "-n", "20")
    ok(logs, "logs --group b")
    prefixes = {line.split("]", 1)[0] + "]" for line in logs.stdout.splitlines() if line.startswith("[")}
    assert prefixes == {"[b r0 spark-2]", "[b r1 spark-3]"}, logs.stdout[-2000:]
    # The node is named once, in the prefix: after the time comes the unit's own name, no hostname.
    tagged = [line.split("] ", 1)[1].split() for line in logs.stdout.splitlines() if line.startswith("[")]
    assert tagged and not any(words[1] in GROUPS["b"] for words in tagged), logs.stdout[-2000:]
    out = tmp_path / "a.tar.gz"
    ok(site.run("bundle", "--group", "a", "-o", str(out)), "bundle --group a")
    with tarfile.open(out) as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers()}
    assert {n.split("/")[1] for n in names if n.startswith("nodes/")} == {"spark-0", "spark-1"}


def test_down_group_stops_one_group_and_status_says_which(site: GroupsSite) -> None:
    ok(site.run("down", "--group", "a"), "down --group a")
    units = site.units()
    assert [units[n] for n in GROUPS["a"]] == ["inactive", "inactive"]
    assert [units[n] for n in GROUPS["b"]] == ["active", "active"]
    status = site.run("status", json_out=True)
    assert status.returncode == 3, status.stdout + status.stderr
    snap = json.loads(status.stdout)
    assert snap["groups"]["b"]["verdict"] == "ready" and snap["groups"]["a"]["verdict"] != "ready"
    ok(site.run("status", "--group", "b", json_out=True), "status --group b")
    ok(site.run("up", "--group", "a", "--yes"), "up --group a")
    assert set(site.units().values()) == {"active"}


# --- the router in front of the two groups ---------------------------------------------------------


@pytest.fixture(scope="module")
def routed(site: GroupsSite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GroupsSite]:
    """The same two groups with the gateway on spark-1: a second inventory copy (its own restore
    takes the router away; the groups' shards stay for it)."""
    if not WHEELS or not any(Path(WHEELS).glob("smg-1.13.0-*x86_64*.whl")):
        pytest.skip("SPARKCTL_ROUTER_WHEELS names no directory holding the smg 1.13.0 x86_64 wheel "
                    "(the lab has no route out: `make integration` downloads it on the controller)")
    router = {"node": ROUTER_NODE, "port": PORT, "metrics_port": METRICS_PORT, "policy": "round_robin",
              "wheel_dir": str(Path(WHEELS).absolute())}
    r = GroupsSite.make(site.lab, tmp_path_factory.mktemp("routed"), router)
    ok(r.run("validate"), "validate (with the router)")
    ok(site.run("down"), "down (the groups without the router)")
    ok(r.run("provision", "--tags", "firewall"),
       "provision --tags firewall (the router's port, the groups' API behind it)")
    try:
        yield r
    finally:
        left = r.restore()  # the router's unit, key and venv gone, the lab's own firewalls back
        assert not left, left


def test_up_starts_the_router_after_the_groups_and_status_shows_it(routed: GroupsSite) -> None:
    up = routed.run("up", "--yes", "--full", json_out=True)
    ok(up, "up --full (with the router)")
    # `up` returned after its router gate: the router lists both groups' rank 0, and status says so
    # at once (no waiting here).
    gate = json.loads(up.stdout)["router"]
    assert gate["gate"] == "router" and gate["node"] == ROUTER_NODE and sorted(gate["workers"]) == ["a", "b"]
    assert 0 <= gate["seconds"] < 180, gate
    state = routed.lab.ssh(ROUTER_NODE, f"systemctl is-active {ROUTER_UNIT}", check=False).stdout.strip()
    assert state == "active"
    # The gateway is told its workers on its command line; the API key is not there (a 0600 file).
    cmdline = routed.lab.ssh(ROUTER_NODE, "cat /proc/$(systemctl show -p MainPID --value "
                             f"{ROUTER_UNIT})/cmdline | tr '\\0' ' '", check=False).stdout
    key = routed.lab.api_key_file.read_text().strip()
    assert "--worker-urls" in cmdline and key not in cmdline, cmdline
    router = routed.router_row()
    assert router["unit"] == "active" and router["health"] == 200 and router["missing"] == [], router
    ok(routed.run("status"), "status (the router routing to both groups)")


def test_the_sites_endpoint_is_the_router_and_requests_reach_both_groups(routed: GroupsSite) -> None:
    from sparkctl.model import load_inventory
    from sparkctl.qa.endpoint import for_cluster

    key = routed.lab.api_key_file.read_text().strip()
    endpoint = for_cluster(load_inventory(routed.inventory))  # /v1/models through it
    assert endpoint.root == f"http://{routed.lab.mgmt_ip(ROUTER_NODE)}:{PORT}" and endpoint.simulator
    with httpx.Client(timeout=120) as http:
        before = {g: routed.served_requests(http, nodes[0], key) for g, nodes in GROUPS.items()}
        client = endpoint.client(timeout=120)
        for i in range(6):  # round_robin over two workers: three each
            reply = client.chat.completions.create(
                model=endpoint.model, max_tokens=8, messages=[{"role": "user", "content": f"say {i}"}])
            assert reply.choices[0].message.content is not None
        refused = http.post(f"{endpoint.root}/v1/chat/completions",
                            json={"model": endpoint.model, "messages": [{"role": "user", "content": "hi"}]})
        assert refused.status_code == 401
        after = {g: routed.served_requests(http, nodes[0], key) for g, nodes in GROUPS.items()}
    assert all(after[g] >= before[g] + 3 for g in GROUPS), (before, after)


def test_bench_and_qualify_via_router_measure_the_whole_site_once(routed: GroupsSite, tmp_path: Path) -> None:
    key = routed.lab.api_key_file.read_text().strip()
    with httpx.Client(timeout=120) as http:
        before = {g: routed.served_requests(http, nodes[0], key) for g, nodes in GROUPS.items()}
    bench = routed.run("bench", "--via-router", "--quick", "--workload", "coding", "--concurrency", "1,4",
                       "--prefill", "none", "--results", str(tmp_path), json_out=True)
    ok(bench, "bench --via-router")
    assert "groups" not in json.loads(bench.stdout)  # one measurement of the whole site
    doc = json.loads(Path(json.loads(bench.stdout)["results_json"]).read_text())
    assert doc["endpoint"].startswith(f"http://{routed.lab.mgmt_ip(ROUTER_NODE)}:{PORT}/"), doc["endpoint"]
    # every group's rank 0 idle before and after, and compared with its own profile, behind the router
    assert all(sorted(r["groups"]) == ["a", "b"] for r in doc["idle_checks"]), doc["idle_checks"]
    assert sorted(doc["server_identity_checked"]["groups"]) == ["a", "b"]
    with httpx.Client(timeout=120) as http:
        after = {g: routed.served_requests(http, nodes[0], key) for g, nodes in GROUPS.items()}
    assert all(after[g] > before[g] for g in GROUPS), (before, after)  # the policy spread the ladder
    qualify = routed.run("qualify", "--via-router", "--results", str(tmp_path), json_out=True)
    ok(qualify, "qualify --via-router")
    assert json.loads(qualify.stdout)["passed"]
    refused = routed.run("bench", "--via-router", "--group", "a", json_out=True)
    assert refused.returncode == 2 and "--group (a)" in refused.stdout, refused.stdout + refused.stderr


def test_a_killed_router_is_restarted_and_down_stops_it_first(routed: GroupsSite) -> None:
    restarts = f"systemctl show -p NRestarts --value {ROUTER_UNIT}"
    before = int(routed.lab.ssh(ROUTER_NODE, restarts).stdout)
    routed.lab.ssh(ROUTER_NODE, f"systemctl kill --signal=KILL {ROUTER_UNIT}", check=False)
    # systemd starts it again after the unit's RestartSec (5 s); a loaded node may take longer to
    # get there, so the probe waits up to 60 s for a running router that was restarted once.
    probe = (f"for i in $(seq 60); do [ \"$(systemctl is-active {ROUTER_UNIT})\" = active ] "
             f"&& [ \"$({restarts})\" -gt {before} ] && break; sleep 1; done; "
             f"systemctl is-active {ROUTER_UNIT}; {restarts}")
    state, count = routed.lab.ssh(ROUTER_NODE, probe, check=False).stdout.split()
    assert (state, int(count)) == ("active", before + 1)
    ok(routed.run("down"), "down")
    state = routed.lab.ssh(ROUTER_NODE, f"systemctl is-active {ROUTER_UNIT}", check=False).stdout.strip()
    assert state != "active"


def test_a_router_that_cannot_start_fails_its_start_with_its_journal(routed: GroupsSite) -> None:
    """Its port taken on the node, the gateway exits at once and systemd restarts it: the router
    playbook (by hand, as an admin runs it) fails after the role's settle time, not behind a gate's
    bound, and says why in the words of the gateway that exited, even when the one systemd started
    after it runs and has filled the unit's journal with its own start-up lines. The squatter lets
    the port go as soon as the first gateway has exited, so the second one starts and keeps running
    within the settle time (15 s here); only 5 journal lines are asked for, shown without the
    gateway's terminal colours.

    The node's journald is held (SIGSTOP) from the unit's start until the second gateway runs, as a
    loaded node's journald falls behind: it then stores the first gateway's lines after the restart,
    under the second run's invocation ID, so the role must find them by that run's process."""
    squat = "sparkctl-test-port-squat"
    listening = f"ss -ltn | grep -q ':{PORT} '"
    substate = f"systemctl show -p SubState --value {ROUTER_UNIT}"
    journald = "systemctl show -p MainPID --value systemd-journald"
    # journald is held as soon as the router's unit starts (systemd's invocation link appears before
    # the gateway is exec'd), not before: an SSH login to a node whose journald is held can stall for
    # minutes (160 s seen), and the playbook logs in first. After that it needs no new login.
    started = f"/run/systemd/units/invocation:{ROUTER_UNIT}"
    hold = (f"python3 -m http.server {PORT} & pid=$!; j=$({journald}); trap \"kill -CONT $j\" EXIT; "
            f"for i in $(seq 6000); do [ -L {started} ] && break; sleep 0.05; done; kill -STOP $j; "
            f"for i in $(seq 300); do "
            f"[ \"$({substate})\" = auto-restart ] && break; sleep 0.2; done; kill $pid; "
            f"for i in $(seq 150); do [ \"$({substate})\" = running ] && break; sleep 0.2; done; sleep 1")
    wait = f"for i in $(seq 50); do {listening} && break; sleep 0.2; done; {listening}"
    routed.lab.ssh(ROUTER_NODE, f"systemctl stop {ROUTER_UNIT} && systemd-run --unit {squat} sh -c '{hold}' "
                                f"&& {wait}")
    try:
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0"}
        t0 = time.monotonic()
        run = subprocess.run(["ansible-playbook", "-i", str(routed.inventory), "playbooks/router.yml",
                              "-e", "spark_router_settle_s=15", "-e", "spark_router_journal_lines=5"],
                             capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
        took = time.monotonic() - t0
        out = run.stdout + run.stderr
        assert run.returncode != 0, out[-3000:]
        assert "did not keep running" in out and "Address already in use" in out, out[-3000:]
        assert "1 restart(s)" in out, out[-3000:]  # the one that exited, then one that ran
        assert "\x1b[" not in out, out[-3000:]  # the gateway's colours are taken out of its words
        assert took < 120, took  # the role's settle (15 s), not the up gate's 180 s
    finally:
        routed.lab.ssh(ROUTER_NODE, f"systemctl stop {squat} {ROUTER_UNIT}; kill -CONT $({journald})",
                       check=False)
