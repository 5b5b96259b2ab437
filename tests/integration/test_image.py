"""`sparkctl stage image` across the lab: built once on the head from the kit, fanned out, one image ID.

The lab inventory builds ``sparkctl_runtime.image`` from the synthetic kit's docker/Dockerfile on
the head (``image_source: build``; the base image exists only there). Each test leaves every node
with the head's image again.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

pytestmark = pytest.mark.integration


def _ref(lab: Any) -> str:
    from sparkctl.model import load_inventory

    return str(load_inventory(lab.inventory).runtime.image)


def _ids(lab: Any, ref: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for node in lab.nodes:
        proc = lab.ssh(node, f"docker image inspect --format '{{{{.Id}}}}' {shlex.quote(ref)}", check=False)
        out[node] = proc.stdout.strip() if proc.returncode == 0 else None
    return out


def _stage(lab: Any, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = lab.run_sparkctl("stage", *args, json_out=True, timeout=1800)
    doc = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, doc, proc.stderr


@pytest.fixture(scope="module")
def kit_staged(lab: Any) -> str:
    """The lab provisioned (the staging chain runs over the fabric, also on a freshly started lab;
    a lab already provisioned takes the fast path, no playbook), then the kit."""
    proc = lab.run_sparkctl("provision", timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rc, _, err = _stage(lab, "kit")
    assert rc == 0, err
    return _ref(lab)


def test_stage_image_moves_once_then_nothing_and_ids_match(lab: Any, kit_staged: str) -> None:
    ref = kit_staged
    workers = lab.nodes[1:]
    for node in workers:  # a fresh start: no image, no archive on the workers
        lab.ssh(
            node,
            f"docker image rm -f {shlex.quote(ref)} >/dev/null 2>&1 || true; rm -rf /srv/sparkctl/run/images",
        )
    rc, doc, err = _stage(lab, "image")
    assert rc == 0, err
    nodes = doc["nodes"]
    head_id = nodes[lab.nodes[0]]["image"]["id"]
    assert head_id and head_id.startswith("sha256:")
    for node in workers:
        assert nodes[node]["image"]["received"] is True and nodes[node]["image"]["bytes_moved"] > 0, nodes[
            node
        ]
    assert set(_ids(lab, ref).values()) == {head_id}

    rc, doc, err = _stage(lab, "image")
    assert rc == 0, err
    # The same ID everywhere and the head's image labelled as the build of the staged kit: no playbook.
    assert doc["path"]["path"] == "fast", doc["path"]
    assert sum(int(n["image"].get("bytes_moved") or 0) for n in doc["nodes"].values()) == 0
    assert not any(n["image"].get("received") for n in doc["nodes"].values())
    assert {n["image"]["id"] for n in doc["nodes"].values()} == {head_id}


def test_an_odd_image_is_named_and_up_refuses(lab: Any, kit_staged: str) -> None:
    ref = kit_staged
    rc, _, err = _stage(lab, "image")
    assert rc == 0, err
    odd = lab.nodes[2]
    # Another image under the same reference on one node (an empty filesystem, imported offline).
    lab.ssh(odd, f"tar cf - --files-from /dev/null | docker import - {shlex.quote(ref)} >/dev/null")
    try:
        ids = _ids(lab, ref)
        assert len(set(ids.values())) == 2

        rc, _, err = _stage(lab, "image", "--verify-only")
        flat = " ".join(err.replace("│", " ").split())
        assert rc == 1 and odd in flat and "not the head's" in flat, err

        up = lab.run_sparkctl("up", "--yes", timeout=900)
        flat = " ".join((up.stdout + up.stderr).replace("│", " ").split())
        assert up.returncode == 1 and odd in flat, flat[-2000:]
        for node in lab.nodes:  # nothing was started anywhere
            assert lab.ssh(node, "docker ps -q").stdout.strip() == "", node
    finally:
        rc, doc, err = _stage(lab, "image")  # restore: the odd node gets the head's image back
    assert rc == 0, err
    assert doc["nodes"][odd]["image"]["received"] is True
    assert len(set(_ids(lab, ref).values())) == 1
