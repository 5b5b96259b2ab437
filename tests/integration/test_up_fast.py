"""The fast path of `sparkctl up` on the lab: with nothing to install the ranks start over SSH, workers
before rank 0, without the playbook; one changed environment file on one node makes `up` run the
playbook (and say why), which puts the rendered file back; a changed kit file still stops the start.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

UNIT = "sparkctl-rank.service"
ENV = "/etc/sparkctl/rank.env"


def _ok(proc: Any, what: str) -> None:
    assert proc.returncode == 0, (
        f"{what} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def _flat(text: str) -> str:
    return " ".join(" ".join(line.strip("│╭╰─ ") for line in text.splitlines()).split())


def _up(lab: Lab, *args: str) -> dict[str, Any]:
    _ok(lab.run_sparkctl("down", timeout=600), "down")
    proc = lab.run_sparkctl("up", "--yes", *args, json_out=True, timeout=900)
    _ok(proc, "up " + " ".join(args))
    doc: dict[str, Any] = json.loads(proc.stdout)
    doc["stderr"] = proc.stderr
    return doc


def _entered(lab: Lab, node: str) -> int:
    """When the node's rank unit last became active (CLOCK_MONOTONIC, shared by the lab's nodes)."""
    out = lab.ssh(node, f"systemctl show -p ActiveEnterTimestampMonotonic --value {UNIT}").stdout
    return int(out.strip())


@pytest.fixture(scope="module")
def installed(lab: Lab) -> Iterator[Lab]:
    """Provisioned and staged (kit, image, weights, shards); the rank files installed by one up (the
    playbook, unless an earlier module's up already installed exactly these files)."""
    _ok(lab.run_sparkctl("provision", "--tags", "base,fabric,qos,runtime", timeout=900), "provision")
    lab.ensure_staged()
    _up(lab)
    yield lab
    lab.run_sparkctl("down")


def test_nothing_changed_starts_over_ssh_workers_first(installed: Lab) -> None:
    doc = _up(installed)
    assert doc["start"]["path"] == "fast", doc["start"]
    assert "starting over SSH without the playbook" in _flat(doc["stderr"])
    t = doc["timeline"]
    assert t["last_start_s"] < t["ready_s"] < t["done_s"]
    nodes = installed.nodes
    head, workers = nodes[0], nodes[1:]
    entered = {n: _entered(installed, n) for n in nodes}
    assert all(entered[w] < entered[head] for w in workers), entered


def test_a_changed_env_file_runs_the_playbook_which_repairs_it(installed: Lab) -> None:
    node = installed.nodes[2]
    good = installed.ssh(node, f"sha256sum {ENV}").stdout.split()[0]
    installed.ssh(node, f"echo SPARKCTL_HAND_EDIT=1 >> {ENV}")
    doc = _up(installed)
    assert doc["start"]["path"] == "playbook"
    assert doc["start"]["reasons"] == [f"{node}: {ENV} differs from the rendered file"], doc["start"]
    assert f"running playbooks/up.yml: {node}: {ENV} differs from the rendered file" in _flat(doc["stderr"])
    assert installed.ssh(node, f"sha256sum {ENV}").stdout.split()[0] == good
    assert _up(installed)["start"]["path"] == "fast"  # repaired: the next up needs no playbook


def test_a_changed_kit_file_still_stops_the_start(installed: Lab) -> None:
    from sparkctl.model import load_inventory
    from sparkctl.render import facts

    kit = facts.cluster_facts(load_inventory(installed.inventory))["kit"]
    node = installed.nodes[1]
    rel = f"{kit['overlay_source']}/{kit['overlays'][0]}"
    path = f"{kit['store']}/{kit['commit']}/{rel}"
    _ok(installed.run_sparkctl("down", timeout=600), "down")
    installed.ssh(node, f"printf X | dd of={shlex.quote(path)} bs=1 seek=0 conv=notrunc status=none")
    try:
        proc = installed.run_sparkctl("up", "--yes", timeout=900)
        text = _flat(proc.stderr + proc.stdout)
        assert proc.returncode == 1, text[-3000:]
        assert f"running playbooks/up.yml: {node}: kit {kit['commit']} fails verification: {rel}: content " \
               f"differs" in text, text[-3000:]
        assert f"{node}: kit {kit['commit']} fails verification: {rel}" in _flat(proc.stderr), text[-3000:]
        for n in installed.nodes:  # nothing was started
            assert installed.ssh(n, "docker ps -q").stdout.strip() == "", n
    finally:
        _ok(installed.run_sparkctl("stage", "kit", timeout=900), "stage kit (repair)")
    assert _up(installed)["start"]["path"] == "fast"
