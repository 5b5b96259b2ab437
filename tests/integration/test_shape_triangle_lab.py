"""A three-node triangle on the lab (`lab up --shape triangle`): MiaAI-Lab's TP3 shape, each node
cabled to both others over its two physical ports, one point-to-point cable and subnet per pair.

The module brings its stream's lab up as a triangle (a new lab: the four-node one is taken down),
provisions it, checks the fabric on all three cables, stages the TP3 shards and serves mia-tp3
(with the lab profile's container, kit and simulator) through `up`, `status` and `qualify quick`.
At its end the lab stays a triangle; a later test that needs the four-node lab gets it back first
(conftest: _reshape).
In conftest's STREAMS at the end of the first stream (the ring after it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.shape_lab import json_doc, ok, sizes

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

SHAPE = "triangle"
TP = 3


@pytest.fixture(scope="module")
def triangle(lab: Lab) -> Iterator[Lab]:
    """The stream's lab brought up as a triangle; left so at the end (conftest: _reshape)."""
    from sparkctl_lab import control, topology

    report = control.up(lab.inventory, sizes(lab, SHAPE), shape=SHAPE)
    assert report.shape == SHAPE and topology.node_names() == ["spark-0", "spark-1", "spark-2"]
    try:
        yield lab
    finally:
        lab.run_sparkctl("down")


@pytest.fixture(scope="module")
def provisioned(triangle: Lab) -> Lab:
    proc = triangle.run_sparkctl("provision", json_out=True, timeout=900)
    doc = json_doc(proc)
    assert proc.returncode == 0, (doc.get("failures"), proc.stderr[-3000:])
    assert set(doc["hosts"]) >= set(triangle.nodes)
    return triangle


def test_the_lab_is_a_triangle_of_three_nodes(triangle: Lab) -> None:
    from sparkctl_lab import topology

    rows = triangle.status()
    assert list(rows) == ["spark-0", "spark-1", "spark-2", "lab-switch"]
    assert all(r["state"] == "running" for r in rows.values())
    # The patch panel: one bridge per cable, holding exactly the two ports at the cable's ends.
    for bridge, ports in topology.segments().items():
        out = triangle.exec("lab-switch", "ip", "-o", "link", "show", "master", bridge).stdout
        assert sorted(line.split(": ")[1].split("@")[0] for line in out.splitlines()) == sorted(ports), out


def test_check_fabric_passes_on_all_three_cables(provisioned: Lab) -> None:
    from sparkctl_lab import topology

    proc = provisioned.run_sparkctl("check", "fabric", json_out=True, timeout=300)
    doc = json_doc(proc)
    assert proc.returncode == 0, doc["problems"]
    assert doc["absent"] == []
    pairs = {(p["src"], p["dst"]): p for p in doc["pairs"]}
    nodes = provisioned.nodes
    assert set(pairs) == {(a, b) for a in nodes for b in nodes if a != b}
    assert all(p["ok"] for p in pairs.values())
    # Every ping crossed the one cable between its two nodes, from the port the cable leaves.
    sh = topology.shape()
    for (src, dst), ping in pairs.items():
        port = next(h for h in sh.ports if topology.peer(src, h, sh) == dst)
        assert ping["netdev"] == port.netdev
        assert ping["subnet"] == str(topology.cable_subnet(topology.cable_of(src, port, sh)))
        assert ping["dst_ip"] == str(topology.fabric_ip(dst, next(
            h for h in sh.ports if topology.peer(dst, h, sh) == src), sh).ip)


def test_a_cut_cable_fails_exactly_its_two_nodes(provisioned: Lab) -> None:
    from sparkctl_lab import topology

    sh = topology.shape()
    (a, key), (b, _) = sh.cables[0].ends
    with provisioned.link_down(a, half=key):
        proc = provisioned.run_sparkctl("check", "fabric", json_out=True, timeout=300)
    doc = json_doc(proc)
    assert proc.returncode != 0
    failing = {(p["src"], p["dst"]) for p in doc["pairs"] if not p["ok"]}
    assert failing == {(a, b), (b, a)}, doc["problems"]


def test_stage_all_packs_tp3_shards(provisioned: Lab) -> None:
    proc = provisioned.run_sparkctl("stage", "all", json_out=True, timeout=1800)
    ok(proc, "stage all")
    for rank, node in enumerate(provisioned.nodes):
        listing = provisioned.ssh(node, "ls /mnt/nvme/engram-tp3").stdout.split()
        assert f"manifest-r{rank}of{TP}.json" in listing, listing
        assert {f"engram-l{layer}-r{rank}of{TP}.bin" for layer in (1, 14)} <= set(listing), listing
        assert not [f for f in listing if "of4" in f], listing
    verify = provisioned.run_sparkctl("stage", "engram", "--verify-only", json_out=True, timeout=900)
    ok(verify, "stage engram --verify-only")


def test_up_status_and_qualify_quick_serve_tp3(provisioned: Lab, tmp_path: Path) -> None:
    up = provisioned.run_sparkctl("up", "--yes", json_out=True, timeout=900)
    ok(up, "up")
    assert json_doc(up)["result"] == "ready"
    status = provisioned.run_sparkctl("status", json_out=True)
    ok(status, "status")
    snap = json_doc(status)
    assert snap["verdict"] == "ready" and snap["reasons"] == []
    assert [n["unit"]["active"] for n in snap["nodes"]] == ["active"] * TP
    qualify = provisioned.run_sparkctl("qualify", "--suite", "quick", "--results", str(tmp_path),
                                       json_out=True, timeout=900)
    ok(qualify, "qualify --suite quick")
    # Rank 2's own launch: TP3, its own node rank.
    argv = provisioned.ssh("spark-2", "pgrep -af 'sglang serve' || true").stdout
    assert re.search(r"--tp-size[= ]3\b", argv) and re.search(r"--node-rank[= ]2\b", argv), argv
    ok(provisioned.run_sparkctl("down"), "down")
