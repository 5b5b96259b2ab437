"""`sparkctl stage kit` on the lab: the synthetic serving kit (a git repository on the controller at
a pinned commit) fetched once, copied to the head, fanned out over the fabric, verified on every
node and made current; a re-run moves nothing (the fast path, and once the build products are in
place the playbook too); one changed byte of one overlay on spark-1 is named
by `stage kit --verify-only` (node, path, both digests) and `up` refuses to start; `stage kit`
repairs it.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from typing import Any

import pytest
from support.text import flat

pytestmark = pytest.mark.integration


def _kit(lab: Any) -> Any:
    from sparkctl.model import load_inventory
    from sparkctl.render import facts

    kit = facts.cluster_facts(load_inventory(lab.inventory))["kit"]
    assert kit and kit["source"] == "git", "the lab inventory has no synthetic kit"
    return kit


def _stage(lab: Any, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = lab.run_sparkctl("stage", "kit", *args, json_out=True, timeout=900)
    doc = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, doc, proc.stderr


def _sha(lab: Any, node: str, path: str) -> str:
    return str(lab.ssh(node, f"sha256sum {shlex.quote(path)}").stdout.split()[0])


@pytest.fixture(scope="module")
def staged(lab: Any) -> dict[str, Any]:
    """The lab provisioned (the chain runs over the fabric; a lab already provisioned takes the
    fast path, no playbook), no rank running (nothing mounts the kit while the tests change it), the
    engine image staged, two workers without any kit: then one timed `stage kit`."""
    proc = lab.run_sparkctl("provision", timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = lab.run_sparkctl("down", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The engine image on every node (where the kit's build steps run): the workers' fresh kit is
    # then built as it arrives, and the re-run below finds nothing to do. After test_image.py in the
    # stream both stages are fast no-ops.
    lab.stage_runtime()
    kit = _kit(lab)
    for node in lab.nodes[2:]:
        lab.ssh(node, f"rm -rf {shlex.quote(kit['store'])}")
    t0 = time.monotonic()
    rc, doc, err = _stage(lab)
    seconds = time.monotonic() - t0
    assert rc == 0, err
    sys.stderr.write(f"\nstage kit (two fresh workers): {seconds:.1f} s\n")
    return {"kit": kit, "doc": doc, "seconds": seconds}


def test_stage_kit_fans_out_then_moves_nothing(lab: Any, staged: dict[str, Any]) -> None:
    kit, nodes = staged["kit"], staged["doc"]["nodes"]
    commit = kit["commit"]
    for node in lab.nodes:
        got = nodes[node]["kit"]
        assert (got["version"], got["verified"], got["current"]) == (commit, True, commit), got
        assert lab.ssh(node, f"readlink {shlex.quote(kit['current'])}").stdout.strip() == commit
    for node in lab.nodes[2:]:  # the fresh workers received every byte over the chain
        moved = nodes[node]["kit"]["transfer"]
        assert moved["bytes_moved"] == moved["bytes_total"] > 0, moved
    t0 = time.monotonic()
    rc, doc, err = _stage(lab)
    assert rc == 0, err
    sys.stderr.write(f"\nstage kit again (fast path): {time.monotonic() - t0:.1f} s\n")
    assert doc["path"]["path"] == "fast", doc["path"]
    for node in lab.nodes:
        got = doc["nodes"][node]["kit"]
        assert (got["version"], got["verified"], got["current"]) == (commit, True, commit), got
    # That the playbook agrees (`stage kit --full`: nothing to move, build or switch) is held once the
    # kit's build products are in place too: test_stage_kit_builds_the_same_library_on_every_node…


def _damage_named_and_refused(
    lab: Any, node: str, path: str, damage: str, refused: str, detail: str
) -> tuple[str, dict[str, Any]]:
    """With everything `up` needs staged, `damage` (a shell command) alters `path` on `node`: then
    `stage kit --verify-only` names exactly that node with `refused` (node, kit, file) and `detail`
    (what differs, both digests), `up` refuses naming `refused` and starts nothing, and the next
    `stage kit` repairs it, re-hashing the kit on every node. Returns the good digest and that last
    stage's document."""
    proc = lab.run_sparkctl("stage", "all", timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    good = _sha(lab, node, path)
    lab.ssh(node, damage)
    bad = _sha(lab, node, path)
    assert bad != good
    named = refused + detail.format(good=good, bad=bad)
    try:
        rc, _, err = _stage(lab, "--verify-only")
        text = flat(err)
        assert rc == 1, err
        assert named in text, err
        assert not any(f"{other}: kit" in text for other in lab.nodes if other != node), err

        proc = lab.run_sparkctl("up", "--yes", timeout=900)
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert refused in flat(proc.stderr), proc.stderr[-3000:]
        for n in lab.nodes:  # nothing was started
            assert lab.ssh(n, "docker ps -q").stdout.strip() == "", n
    finally:
        rc, doc, err = _stage(lab)  # the next stage repairs that node
    assert rc == 0, err
    assert _sha(lab, node, path) == good
    # That run ended by re-hashing every kit file on every node (a failure there fails the run).
    assert doc["path"]["path"] == "playbook", doc["path"]
    assert all(doc["nodes"][n]["kit"]["verified"] for n in lab.nodes), doc["nodes"]
    return good, doc


def test_one_changed_byte_on_spark_1_is_named_and_up_refuses(lab: Any, staged: dict[str, Any]) -> None:
    kit = staged["kit"]
    node = lab.nodes[1]
    # Everything else `up` needs is in place (image, checkpoint, shards), so only the kit can stop it.
    rel = f"{kit['overlay_source']}/{kit['overlays'][0]}"
    path = f"{kit['store']}/{kit['commit']}/{rel}"
    _, doc = _damage_named_and_refused(
        lab, node, path, f"printf X | dd of={shlex.quote(path)} bs=1 seek=0 conv=notrunc status=none",
        f"{node}: kit {kit['commit']} fails verification: {rel}",
        ": content differs (expected {good}, actual {bad})",
    )
    assert doc["nodes"][node]["kit"]["transfer"]["bytes_moved"] > 0  # the kit's bytes came again


# --- the kit's build steps (the lab profile declares R4's two: b12x extracted, row store compiled) ---


def _compile_step(kit: dict[str, Any]) -> dict[str, Any]:
    steps = [s["compile"] for s in kit.get("build") or [] if "compile" in s]
    assert steps, "the lab profile declares no compile step in kit.build"
    return dict(steps[0])


def _mtime(lab: Any, node: str, path: str) -> str:
    return str(lab.ssh(node, f"stat -c %Y.%y {shlex.quote(path)}").stdout.strip())


def test_stage_kit_builds_the_same_library_on_every_node_then_builds_nothing(
    lab: Any, staged: dict[str, Any]
) -> None:
    kit = staged["kit"]
    step = _compile_step(kit)
    root = f"{kit['store']}/{kit['commit']}"
    # The compile runs in the engine image: `stage all` brings it, then builds and switches current.
    proc = lab.run_sparkctl("stage", "all", timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lib = f"{root}/{step['product']}"
    hashes = {n: _sha(lab, n, lib) for n in lab.nodes}
    assert len(set(hashes.values())) == 1, hashes
    (digest,) = set(hashes.values())
    for n in lab.nodes:
        record = json.loads(lab.ssh(n, f"cat {shlex.quote(root + '/' + step['record']['path'])}").stdout)
        assert record[step["record"]["key"]] == digest, (n, record)
        own = json.loads(lab.ssh(n, f"cat {shlex.quote(root + '/.sparkctl-build.json')}").stdout)
        assert own["version"] == kit["commit"] and own["products"][step["product"]] == digest, (n, own)
        assert lab.ssh(n, f"test -d {shlex.quote(root + '/b12x')}").returncode == 0, n
    before = {n: _mtime(lab, n, lib) for n in lab.nodes}

    t0 = time.monotonic()
    rc, doc, err = _stage(lab, "--full")  # the playbook: nothing moved, built, switched or changed
    assert rc == 0, err
    sys.stderr.write(f"stage kit again (--full): {time.monotonic() - t0:.1f} s\n")
    changed = {h: s["changed"] for h, s in doc["run"]["hosts"].items()}
    assert set(changed.values()) == {0}, changed
    for n in lab.nodes:
        got = doc["nodes"][n]["kit"]
        assert got.get("build", {}).get("built") is False, got
        assert int(got["transfer"]["bytes_moved"] or 0) == 0, got
        assert not got["switched"] and set(got["transfer"]["counts"]) == {"keep"}, got
    assert {n: _mtime(lab, n, lib) for n in lab.nodes} == before
    rc, doc, err = _stage(lab)  # and the fast path agrees
    assert rc == 0, err
    assert doc["path"]["path"] == "fast", doc["path"]


def test_an_altered_library_on_one_node_is_named_and_up_refuses(lab: Any, staged: dict[str, Any]) -> None:
    kit = staged["kit"]
    step = _compile_step(kit)
    node = lab.nodes[2]
    lib = f"{kit['store']}/{kit['commit']}/{step['product']}"
    _, doc = _damage_named_and_refused(
        lab, node, lib, f"printf X >> {shlex.quote(lib)}",
        f"{node}: kit {kit['commit']} fails verification: {step['product']}",
        ": build product differs from the build record (expected {good}, actual {bad})",
    )
    assert doc["nodes"][node]["kit"]["build"]["built"] is True  # that node's library rebuilt, no other
    assert not any(doc["nodes"][n]["kit"]["build"]["built"] for n in lab.nodes if n != node)
