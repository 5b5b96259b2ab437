"""Eight Sparks as one TP8 group on the lab (`lab up --shape switch8`): rhys101's SG17 shape (profile
sg17-tp8, resident Engram: nothing packed on the NVMe), eight nodes on the lab switch.

The module brings its stream's lab up with eight nodes (a new lab: the one before is taken down),
provisions what serving needs, stages, and serves TP8 through `up` and `status`. Eight nodes are
the heaviest lab there is (each a systemd machine with sshd and a Docker engine): it records the
controller's available memory while the group serves. At its end the lab stays in its shape
(a later test that needs the four-node lab gets it back first: conftest's _reshape). Left out of
`make test` for its cost (conftest's HEAVY): `make integration-heavy` runs it.

Resident Engram end to end: staging packs no shard (and makes no Engram directory), the rank's
container binds none, and the simulated launcher checks the rank as SG17's does (no packed directory,
TP8, no host table) and logs SG17's RoCE markers, which the profile's gates require on all eight ranks.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from support.shape_lab import available_gib, json_doc, ok, sizes

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

SHAPE = "switch8"
TP = 8


@pytest.fixture(scope="module")
def eight(lab: Lab) -> Iterator[Lab]:
    """The stream's lab brought up with eight nodes on the switch; left so at the end (conftest: _reshape)."""
    from sparkctl_lab import control, topology

    report = control.up(lab.inventory, sizes(lab, SHAPE), shape=SHAPE)
    assert report.shape == SHAPE and len(topology.node_names()) == TP
    sys.stderr.write(f"\nswitch8 lab up in {report.seconds:.0f}s; {available_gib():.1f} GiB available\n")
    try:
        yield lab
    finally:
        lab.run_sparkctl("down")


def test_eight_nodes_serve_one_tp8_group(eight: Lab) -> None:
    eight.prepare_serving()
    # Resident Engram: staging packs no shard on any node.
    for node in eight.nodes:
        packed = eight.ssh(node, "ls /mnt/nvme/engram-tp8 2>/dev/null | grep -c '\\.bin$' || true").stdout
        assert packed.strip() in ("", "0"), f"{node}: {packed}"
    up = eight.run_sparkctl("up", "--yes", json_out=True, timeout=900)
    ok(up, "up")
    assert json_doc(up)["result"] == "ready"
    status = eight.run_sparkctl("status", json_out=True)
    ok(status, "status")
    snap = json_doc(status)
    assert snap["verdict"] == "ready" and snap["reasons"] == []
    assert [n["unit"]["active"] for n in snap["nodes"]] == ["active"] * TP
    argv = eight.ssh("spark-7", "pgrep -af 'sglang serve' || true").stdout
    assert re.search(r"--tp-size[= ]8\b", argv) and re.search(r"--node-rank[= ]7\b", argv), argv
    sys.stderr.write(f"\nTP8 serving: {available_gib():.1f} GiB available on the controller\n")
    ok(eight.run_sparkctl("down"), "down")
