"""The fast path of `sparkctl up` on the lab: with nothing to install the ranks start over SSH, workers
before rank 0, without the playbook; one changed environment file on one node makes `up` run the
playbook (and say why), which puts the rendered file back; a changed kit file still stops the start;
a checkpoint config or image commit other than the kit's lock stops the ranks in their pre-start.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from support.text import flat

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
UNIT = "sparkctl-rank.service"
ENV = "/etc/sparkctl/rank.env"


def _ok(proc: Any, what: str) -> None:
    assert proc.returncode == 0, (
        f"{what} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


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
    lab.prepare_serving()
    _up(lab)
    yield lab
    lab.run_sparkctl("down")


def test_nothing_changed_starts_over_ssh_workers_first(installed: Lab) -> None:
    doc = _up(installed)
    assert doc["start"]["path"] == "fast", doc["start"]
    assert "starting over SSH without the playbook" in flat(doc["stderr"])
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
    assert f"running playbooks/up.yml: {node}: {ENV} differs from the rendered file" in flat(doc["stderr"])
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
        text = flat(proc.stderr + proc.stdout)
        assert proc.returncode == 1, text[-3000:]
        assert f"running playbooks/up.yml: {node}: kit {kit['commit']} fails verification: {rel}: content " \
               f"differs" in text, text[-3000:]
        assert f"{node}: kit {kit['commit']} fails verification: {rel}" in flat(proc.stderr), text[-3000:]
        for n in installed.nodes:  # nothing was started
            assert installed.ssh(n, "docker ps -q").stdout.strip() == "", n
    finally:
        _ok(installed.run_sparkctl("stage", "kit", timeout=900), "stage kit (repair)")
    assert _up(installed)["start"]["path"] == "fast"


# --- the kit's pre-start checks in the rank's container (sparkctl.nodeside.prestart) -------------


def _fails_in_prestart(lab: Lab, proc: Any, node: str | None, check: str) -> str:
    """`up` exited 1 at the pre-start gate naming ``node`` (any node when None) and a failed
    ``check`` line; no rank container is left on any node. Returns the node named."""
    text = flat(proc.stderr + proc.stdout)
    assert proc.returncode == 1, text[-3000:]
    assert "failed at the gate 'kit pre-start checks' on " in text, text[-3000:]
    named = text.split("failed at the gate 'kit pre-start checks' on ", 1)[1].split(":", 1)[0]
    assert named in lab.nodes, text[-3000:]
    if node is not None:
        assert named == node, text[-3000:]
    assert f"SPARKCTL_PRESTART FAIL {check} " in text, text[-3000:]
    for n in lab.nodes:  # the failed boot stopped everything
        assert lab.ssh(n, "docker ps -q").stdout.strip() == "", n
    return named


def test_a_drifted_checkpoint_config_on_one_node_stops_up_in_its_prestart(installed: Lab) -> None:
    """The kit's lock pins the checkpoint's config.json (model_config_sha256): the staged kit and
    image are as pinned, so the fast path starts the ranks, and the one node whose config.json
    differs stops in its container's pre-start, named with the check, before any engine starts."""
    from sparkctl.model import load_inventory

    cluster = load_inventory(installed.inventory)
    node = installed.nodes[2]
    config = f"{cluster.paths.model_dir}/config.json"
    saved = installed.ssh(node, f"base64 -w0 {shlex.quote(config)}").stdout.strip()
    _ok(installed.run_sparkctl("down", timeout=600), "down")
    installed.ssh(node, f"printf ' ' >> {shlex.quote(config)}")  # still JSON, other bytes
    try:
        proc = installed.run_sparkctl("up", "--yes", timeout=900)
        _fails_in_prestart(installed, proc, node, "model-config")
        sub = PurePosixPath(str(cluster.paths.model_dir)).name
        assert f"model-config /models/{sub}/config.json expected" in flat(proc.stderr)
    finally:
        installed.ssh(node, f"echo {saved} | base64 -d > {shlex.quote(config)}")
    assert _up(installed)["start"]["path"] == "fast"


def test_an_image_commit_other_than_the_locks_stops_up_in_the_prestart(
        installed: Lab, tmp_path: Path) -> None:
    """SGLANG_BUILD_COMMIT in the rank's environment (here a profile override in a copy of the lab
    inventory) other than the lock's sglang_commit: every rank's pre-start refuses, and `up` names a
    node and the sglang-commit check."""
    site = tmp_path / "lab-commit"
    shutil.copytree(installed.inventory, site)
    group_vars = site / "group_vars" / "all" / "sparkctl.yml"
    doc = yaml.safe_load(group_vars.read_text())
    doc.setdefault("sparkctl_profile_overrides", {}).setdefault("env", {})["SGLANG_BUILD_COMMIT"] = "0" * 40
    group_vars.write_text(yaml.safe_dump(doc, sort_keys=False))
    _ok(installed.run_sparkctl("down", timeout=600), "down")
    proc = subprocess.run([sys.executable, "-m", "sparkctl", "-i", str(site), "up", "--yes"],
                          capture_output=True, text=True, timeout=900, cwd=REPO)
    _fails_in_prestart(installed, proc, None, "sglang-commit")
    assert f"expected {'0' * 40}" not in flat(proc.stderr)  # the lock's commit is expected, not ours
    assert f"actual {'0' * 40}" in flat(proc.stderr)
    up = _up(installed)  # the lab inventory again: its env file is put back by the playbook
    assert up["start"]["path"] == "playbook"
