"""`sparkctl stage kit` on the lab: the synthetic serving kit (a git repository on the controller at
a pinned commit) fetched once, copied to the head, fanned out over the fabric, verified on every
node and made current; a re-run moves nothing; one changed byte of one overlay on spark-1 is named
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


def _flat(text: str) -> str:
    """A rich error box as one line (borders dropped, wrapped lines joined at their spaces)."""
    return " ".join(" ".join(line.strip("│╭╰─ ") for line in text.splitlines()).split())


def _sha(lab: Any, node: str, path: str) -> str:
    return str(lab.ssh(node, f"sha256sum {shlex.quote(path)}").stdout.split()[0])


@pytest.fixture(scope="module")
def staged(lab: Any) -> dict[str, Any]:
    """The fabric up (the chain runs over it), no rank running (nothing mounts the kit while the
    tests change it), two workers without any kit: then one timed `stage kit`."""
    proc = lab.run_sparkctl("provision", "--tags", "fabric", timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = lab.run_sparkctl("down", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
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
    t0 = time.monotonic()
    rc, doc, err = _stage(lab, "--full")  # the playbook agrees: nothing to move, nothing to switch
    assert rc == 0, err
    sys.stderr.write(f"stage kit again (--full): {time.monotonic() - t0:.1f} s\n")
    again = {n: doc["nodes"][n]["kit"] for n in lab.nodes}
    assert sum(int(k["transfer"]["bytes_moved"] or 0) for k in again.values()) == 0, again
    assert not any(k["switched"] for k in again.values())
    assert all(set(k["transfer"]["counts"]) == {"keep"} for k in again.values()), again


def test_one_changed_byte_on_spark_1_is_named_and_up_refuses(lab: Any, staged: dict[str, Any]) -> None:
    kit = staged["kit"]
    node = lab.nodes[1]
    # Everything else `up` needs is in place (image, checkpoint, shards), so only the kit can stop it.
    proc = lab.run_sparkctl("stage", "all", timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rel = f"{kit['overlay_source']}/{kit['overlays'][0]}"
    path = f"{kit['store']}/{kit['commit']}/{rel}"
    good = _sha(lab, node, path)
    lab.ssh(node, f"printf X | dd of={shlex.quote(path)} bs=1 seek=0 conv=notrunc status=none")
    bad = _sha(lab, node, path)
    assert bad != good
    try:
        rc, _, err = _stage(lab, "--verify-only")
        text = _flat(err)
        assert rc == 1, err
        assert f"{node}: kit {kit['commit']} fails verification: {rel}: content differs" in text, err
        assert f"(expected {good}, actual {bad})" in text, err
        assert not any(f"{other}: kit" in text for other in lab.nodes if other != node), err

        proc = lab.run_sparkctl("up", "--yes", timeout=900)
        text = _flat(proc.stderr)
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert f"{node}: kit {kit['commit']} fails verification: {rel}" in text, proc.stderr[-3000:]
        for n in lab.nodes:  # nothing was started
            assert lab.ssh(n, "docker ps -q").stdout.strip() == "", n
    finally:
        rc, doc, err = _stage(lab)  # the next stage brings spark-1 the kit's bytes again
    assert rc == 0, err
    assert _sha(lab, node, path) == good
    assert doc["nodes"][node]["kit"]["transfer"]["bytes_moved"] > 0
    rc, _, err = _stage(lab, "--verify-only")
    assert rc == 0, err
