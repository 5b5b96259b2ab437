"""Eight Sparks as two TP4 groups behind SGLang's gateway on the lab (`lab up --shape switch8`):
Mia AI Lab's 2 x TP4 shape as inventory/examples/switch-2xtp4 ships it (group a on spark-0..3,
group b on spark-4..7, the router on spark-0, round_robin).

The module brings its stream's lab up with eight nodes (a new lab: the one before is taken down),
copies the eight-node lab inventory and gives it the two groups, each serving the lab's own TP4
profile (the rank simulator in the lab's engine container, as the four-node lab serves), and the
router as the example places it. It provisions, stages (each group's r{k}of4 Engram shards), runs
`up --full` (both groups, then the router), checks that `status` shows both groups ready and the
router routing to both, sends requests through the router and reads each group's rank-0 request
counter (both must grow), and takes everything down. At its end the lab stays in its shape (a later
test that needs the four-node lab gets it back first: conftest's _reshape). It records the wall time
and the lowest memory the controller had available while it ran.

Needs the gateway's x86_64 wheel (``SPARKCTL_ROUTER_WHEELS``, `make router-wheels` downloads it);
without it the module skips saying so. Left out of `make test` for its cost (conftest's HEAVY):
`make integration-heavy` runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import yaml
from support.groups_lab import RANK_UNIT, ROUTER_UNIT, GroupsSite, ok
from support.shape_lab import available_gib, sizes

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

SHAPE = "switch8"
GROUPS = {"a": [f"spark-{i}" for i in range(4)], "b": [f"spark-{i}" for i in range(4, 8)]}
ROUTER_NODE = "spark-0"  # where inventory/examples/switch-2xtp4 puts it
PORT, METRICS_PORT = 8889, 29000
WHEELS = os.environ.get("SPARKCTL_ROUTER_WHEELS", "")


class _LowestMemory:
    """The lowest MemAvailable seen, sampled every second in a thread while the module runs."""

    def __init__(self) -> None:
        self.lowest = available_gib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            self.lowest = min(self.lowest, available_gib())

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.lowest


def _two_tp4_site(lab: Lab, where: Path) -> GroupsSite:
    """A copy of the eight-node lab inventory serving the lab's TP4 profile as groups a and b with
    the router on spark-0 (the lab's inventory itself is not changed)."""
    from sparkctl_lab import inventory as lab_inventory

    inv = where / "lab"
    shutil.copytree(lab.inventory, inv, symlinks=True)
    gv = next(inv.glob("group_vars/all/sparkctl*.yml"))
    doc = yaml.safe_load(gv.read_text())
    doc["sparkctl_profile"] = lab_inventory.LAB_PROFILE
    doc["sparkctl_profile_overrides"] = {}
    doc["sparkctl_paths"]["engram_dir"] = lab_inventory.LAB_PATHS["engram_dir"]  # r{k}of4 shards
    doc["sparkctl_groups"] = [{"name": name, "nodes": nodes} for name, nodes in GROUPS.items()]
    doc["sparkctl_router"] = {"node": ROUTER_NODE, "port": PORT, "metrics_port": METRICS_PORT,
                              "policy": "round_robin", "wheel_dir": str(Path(WHEELS).absolute())}
    gv.write_text(yaml.safe_dump(doc))
    return GroupsSite(lab, inv, doc["sparkctl_router"])


@pytest.fixture(scope="module")
def site(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GroupsSite]:
    """The stream's lab up with eight nodes on the switch, served as two TP4 groups behind the
    router; left so at the end (conftest: _reshape; the eight nodes, and all they hold, go with
    the next rebuild)."""
    if not WHEELS or not any(Path(WHEELS).glob("smg-1.13.0-*x86_64*.whl")):
        pytest.skip("SPARKCTL_ROUTER_WHEELS names no directory holding the smg 1.13.0 x86_64 wheel "
                    "(the lab has no route out: `make router-wheels` downloads it on the controller)")
    from sparkctl.model import load_inventory
    from sparkctl.render import groups as rgroups
    from sparkctl.serve import events
    from sparkctl_lab import control, topology

    t0, memory = time.monotonic(), _LowestMemory()
    report = control.up(lab.inventory, sizes(lab, SHAPE), shape=SHAPE)
    assert report.shape == SHAPE and topology.node_names() == GROUPS["a"] + GROUPS["b"]
    sys.stderr.write(f"\nswitch8 lab up in {report.seconds:.0f}s; {available_gib():.1f} GiB available\n")
    s = _two_tp4_site(lab, tmp_path_factory.mktemp("twotp4"))
    try:
        ok(s.run("validate"), "validate (two TP4 groups and the router)")
        yield s
    finally:
        s.run("down")
        for g in load_inventory(s.inventory).groups:
            shutil.rmtree(events.supervisor_dir(rgroups.view_name(load_inventory(s.inventory), g)),
                          ignore_errors=True)
        sys.stderr.write(f"\n2 x TP4 module: {time.monotonic() - t0:.0f}s wall; lowest available memory "
                         f"on the controller {memory.stop():.1f} GiB\n")


def _units(site: GroupsSite) -> dict[str, str]:
    return {n: site.lab.ssh(n, f"systemctl is-active {RANK_UNIT}", check=False).stdout.strip()
            for nodes in GROUPS.values() for n in nodes}


def test_two_tp4_groups_serve_behind_the_router(site: GroupsSite) -> None:
    from sparkctl.model import load_inventory
    from sparkctl.qa.endpoint import for_cluster

    lab = site.lab
    ok(lab.run_sparkctl("provision", "--tags", "base,fabric,qos,runtime", timeout=1200),
       "provision (what serving needs)")
    ok(site.run("provision", "--tags", "firewall"),
       "provision --tags firewall (the router's port, the groups' API behind it)")
    engram_dir = load_inventory(site.inventory).paths.engram_dir
    ok(site.run("stage", timeout=1800), "stage")
    for name, nodes in GROUPS.items():
        for rank, node in enumerate(nodes):
            listing = lab.ssh(node, f"ls {engram_dir}", check=False).stdout
            assert f"r{rank}of4" in listing, f"group {name}: {node} has no r{rank}of4 shard: {listing}"

    up = site.run("up", "--yes", "--full", json_out=True, timeout=1800)
    ok(up, "up --full (two groups and the router)")
    doc = json.loads(up.stdout)
    assert doc["result"] == "ready" and sorted(doc["groups"]) == ["a", "b"], doc
    assert set(_units(site).values()) == {"active"}
    for name, nodes in GROUPS.items():
        head = lab.fabric_ip(nodes[0])
        argv = site.rank_argv(nodes[-1])
        assert "--nnodes 4" in argv and "--node-rank 3" in argv and f"--dist-init-addr {head}:" in argv, \
            (name, argv)
    state = lab.ssh(ROUTER_NODE, f"systemctl is-active {ROUTER_UNIT}", check=False).stdout.strip()
    assert state == "active"
    router = site.router_row()
    assert router["unit"] == "active" and router["health"] == 200 and router["missing"] == [], router
    status = site.run("status", json_out=True)
    ok(status, "status (both groups ready, the router routing to both)")
    snap = json.loads(status.stdout)
    assert snap["verdict"] == "ready"
    assert {g: s["verdict"] for g, s in snap["groups"].items()} == {"a": "ready", "b": "ready"}
    sys.stderr.write(f"\n2 x TP4 serving: {available_gib():.1f} GiB available on the controller\n")

    key = lab.api_key_file.read_text().strip()
    endpoint = for_cluster(load_inventory(site.inventory))
    assert endpoint.root == f"http://{lab.mgmt_ip(ROUTER_NODE)}:{PORT}", endpoint.root
    with httpx.Client(timeout=120) as http:
        before = {g: site.served_requests(http, nodes[0], key) for g, nodes in GROUPS.items()}
        client = endpoint.client(timeout=120)
        for i in range(6):  # round_robin over two workers: three each
            reply = client.chat.completions.create(
                model=endpoint.model, max_tokens=8, messages=[{"role": "user", "content": f"say {i}"}])
            assert reply.choices[0].message.content is not None
        after = {g: site.served_requests(http, nodes[0], key) for g, nodes in GROUPS.items()}
    assert all(after[g] >= before[g] + 3 for g in GROUPS), (before, after)

    ok(site.run("down"), "down")
    assert set(_units(site).values()) == {"inactive"}

