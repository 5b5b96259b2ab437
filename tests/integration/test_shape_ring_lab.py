"""A switchless four-node ring on the lab (`lab up --shape ring`): MiaAI-Lab's TP4 ring, each node
cabled to its two neighbours only, one point-to-point cable and subnet per pair, no path between
opposite nodes.

A reduced path, to keep the suite's time: the module brings its stream's lab up as a ring (a new
lab: the one before is taken down), provisions it and runs `check fabric`, which must prove every
neighbour over its cable and name the two opposite pairs as having no direct path. It does not
stage or serve (the ring's profile needs the patched NCCL artifact, which the lab does not build;
serving TP4 is the switched lab's and the triangle's tests). It leaves the lab a ring: a later test
that needs the four-node lab gets it back first (conftest: _reshape). In conftest's STREAMS at the end
of the first stream, after the triangle: nothing after it needs the rebuild.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from support.shape_lab import json_doc, sizes

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

SHAPE = "ring"
OPPOSITE = [("spark-0", "spark-2"), ("spark-1", "spark-3")]


@pytest.fixture(scope="module")
def ring(lab: Lab) -> Iterator[Lab]:
    """The stream's lab brought up as a ring, provisioned; left so at the end (conftest: _reshape)."""
    from sparkctl_lab import control

    report = control.up(lab.inventory, sizes(lab, SHAPE), shape=SHAPE)
    assert report.shape == SHAPE
    proc = lab.run_sparkctl("provision", json_out=True, timeout=900)
    doc = json_doc(proc)
    assert proc.returncode == 0, (doc.get("failures"), proc.stderr[-3000:])
    yield lab


def test_the_patch_panel_cables_neighbours_only(ring: Lab) -> None:
    from sparkctl_lab import topology

    assert list(ring.status()) == ["spark-0", "spark-1", "spark-2", "spark-3", "lab-switch"]
    for bridge, ports in topology.segments().items():
        out = ring.exec("lab-switch", "ip", "-o", "link", "show", "master", bridge).stdout
        assert sorted(line.split(": ")[1].split("@")[0] for line in out.splitlines()) == sorted(ports), out
    # An opposite node's address answers nowhere: spark-0 has no route to spark-2's subnets.
    for a, b in OPPOSITE:
        for h in topology.fabric_ports():
            far = str(topology.fabric_ip(b, h).ip)
            ping = ring.exec(a, "ping", "-c", "1", "-W", "1", far, check=False)
            assert ping.returncode != 0, f"{a} reached {b}'s {far}: {ping.stdout}"


def test_check_fabric_proves_neighbours_and_names_the_missing_opposite_paths(ring: Lab) -> None:
    from sparkctl_lab import topology

    proc = ring.run_sparkctl("check", "fabric", json_out=True, timeout=300)
    doc = json_doc(proc)
    assert proc.returncode == 0, doc["problems"]
    nodes = ring.nodes
    neighbours = {(a, b) for a in nodes for b in topology.neighbours(a)}
    pinged = {(p["src"], p["dst"]) for p in doc["pairs"]}
    assert pinged == neighbours and all(p["ok"] for p in doc["pairs"])
    assert len(neighbours) == 8  # four cables, both directions
    for a, b in OPPOSITE:
        line = next((t for t in doc["absent"] if a in t and b in t), None)
        assert line is not None and "opposite nodes on the ring" in line, doc["absent"]
    assert len(doc["absent"]) == len(OPPOSITE)
    # Without --json the same verdict is told in words.
    words = ring.run_sparkctl("check", "fabric", timeout=300)
    assert words.returncode == 0
    assert "no direct path" in words.stdout + words.stderr
