"""`sparkctl stage` across the lab: exact bytes everywhere, resume after kill -9, corruption, no space.

The checkpoint is generated here (tests/support/synth_checkpoint.py) into the lab's controller
checkpoint directory; ``SPARKCTL_STAGE_TEST_MIB`` scales it (default about 160 MiB; the lab's
NVMe loop filesystems are 4 GiB, so stay under ~1,500 MiB there). The packed files are compared
with digests computed in this file from the generator's own offsets, not with sparkctl's packer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import synth_checkpoint

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = "/mnt/nvme/models/DeepSeek-V4.1-Flash"
ENGRAM_DIR = "/mnt/nvme/engram-tp4"
PROGRESS = "/srv/sparkctl/run/stage-progress.json"
TP = 4
BIG = "model-00001-of-00004.safetensors"

# Prints {relative path: [size, sha256, mtime_ns]} of every file under the given directories.
DIGESTS = r"""
import hashlib, json, os, sys
out = {}
for root in sys.argv[1:]:
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for b in iter(lambda: f.read(1 << 22), b""):
                    h.update(b)
            st = os.stat(p)
            out[p] = [st.st_size, h.hexdigest(), st.st_mtime_ns]
print(json.dumps(out))
"""


def reference_packed_sha256(
    ckdir: Path, info: dict[str, Any], layer: int, rank: int, tp: int
) -> tuple[int, str]:
    """Size and SHA-256 of the expected packed file, computed row by row from the source shard."""
    rows = info["rows"]
    lo, hi = rows * rank // tp, rows * (rank + 1) // tp
    h = hashlib.sha256(struct.pack("<6Q", 0x31344E4531565344, layer, lo, hi, rows, 264).ljust(4096, b"\0"))
    with (ckdir / info["file"]).open("rb") as f:
        for start in range(lo, hi, 4096):
            n = min(4096, hi - start)
            f.seek(info["weight_offset"] + start * 256)
            w = f.read(n * 256)
            f.seek(info["scale_offset"] + start * 8)
            s = f.read(n * 8)
            for i in range(n):
                h.update(w[i * 256 : (i + 1) * 256])
                h.update(s[i * 8 : (i + 1) * 8])
    return 4096 + (hi - lo) * 264, h.hexdigest()


def node_files(lab: Any, node: str) -> dict[str, list[Any]]:
    cmd = f"python3 -c {shlex.quote(DIGESTS)} {MODEL_DIR} {ENGRAM_DIR}"
    return json.loads(lab.ssh(node, f"mkdir -p {MODEL_DIR} {ENGRAM_DIR}; {cmd}", timeout=300).stdout)


def stage(lab: Any, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return lab.run_sparkctl("stage", *args, json_out=True, timeout=timeout)


@pytest.fixture(scope="module")
def ckpt(lab: Any) -> dict[str, Any]:
    """A fresh synthetic checkpoint on the controller, fabric addresses up, empty NVMe on every node."""
    from sparkctl.model import load_inventory

    mib = float(os.environ.get("SPARKCTL_STAGE_TEST_MIB", "160"))
    # Engram tables take about 2/3 of the bytes, two filler shards the rest.
    rows = int(mib * (1 << 20) * 2 / 3 / 2 / 264)
    ckdir = Path(lab.checkpoint_dir)
    info = synth_checkpoint.write_checkpoint(ckdir, (rows, rows - 7), filler_shards=2, filler_mib=mib / 6)
    cluster = load_inventory(lab.inventory)
    for node in cluster.nodes:
        # The fabric addresses come from `sparkctl provision`; add them when that has not run yet.
        for port in node.fabric_ports:
            have = lab.exec(node.name, "ip", "-4", "-o", "addr", "show", "dev", port.netdev).stdout
            if str(port.ip) not in have:
                lab.exec(node.name, "ip", "addr", "add", str(port.address), "dev", port.netdev)
        lab.ssh(node.name, f"rm -rf {MODEL_DIR} {ENGRAM_DIR} {PROGRESS}")
    files = {}
    for p in sorted(ckdir.iterdir()):
        if p.name.startswith("."):
            continue
        files[p.name] = (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
    packed = {}
    for rank in range(TP):
        for layer in (1, 14):
            packed[(rank, layer)] = reference_packed_sha256(
                ckdir, info["engram"][str(layer)], layer, rank, TP
            )
    return {"info": info, "files": files, "packed": packed, "cluster": cluster}


def assert_exact(lab: Any, ckpt: dict[str, Any]) -> None:
    for node in ckpt["cluster"].nodes:
        got = node_files(lab, node.name)
        partials = [p for p in got if p.endswith(".partial")]
        assert not partials, f"{node.name}: partial files left: {partials}"
        for name, (size, digest) in ckpt["files"].items():
            entry = got.get(f"{MODEL_DIR}/{name}")
            assert entry is not None, f"{node.name}: {name} missing"
            assert (entry[0], entry[1]) == (size, digest), f"{node.name}: {name} differs"
        for layer in (1, 14):
            size, digest = ckpt["packed"][(node.rank, layer)]
            entry = got.get(f"{ENGRAM_DIR}/engram-l{layer}-r{node.rank}of{TP}.bin")
            assert entry is not None, f"{node.name}: engram-l{layer}-r{node.rank}of{TP}.bin missing"
            assert (entry[0], entry[1]) == (size, digest), (
                f"{node.name}: packed layer {layer} differs from reference"
            )
        assert f"{ENGRAM_DIR}/manifest-r{node.rank}of{TP}.json" in got


def assert_progress(lab: Any, ckpt: dict[str, Any], stderr: str) -> None:
    """Without a terminal, under --json: a line per node and step on stderr (no bars), and each node's
    progress document left by its last step, packing, with every row of its rank counted."""
    assert "\x1b[" not in stderr and "\r" not in stderr, "bars drawn without a terminal"
    for node in ckpt["cluster"].nodes:
        assert f"{node.name}: Engram packing done" in stderr, stderr[-3000:]
        if node.rank > 0:
            assert f"{node.name}: fan-out" in stderr, stderr[-3000:]
        doc = json.loads(lab.ssh(node.name, f"cat {PROGRESS}").stdout)
        rows = 0
        for layer in (1, 14):
            total = ckpt["info"]["engram"][str(layer)]["rows"]
            rows += total * (node.rank + 1) // TP - total * node.rank // TP
        assert (doc["step"], doc["state"], doc["count_unit"]) == ("pack", "done", "rows"), doc
        assert doc["count_done"] == doc["count_total"] == rows, doc
        assert doc["bytes_done"] == doc["bytes_total"] == rows * 264, doc  # the packed rows, headers apart


def test_stage_all_leaves_exact_bytes_and_a_rerun_moves_nothing(lab: Any, ckpt: dict[str, Any]) -> None:
    first = stage(lab, "all")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert_exact(lab, ckpt)
    report = json.loads(first.stdout)  # stdout holds the final document alone: progress went to stderr
    assert report["ok"] and all(
        n["weights"]["verified"] and n["engram"]["verified"] for n in report["nodes"].values()
    )
    assert_progress(lab, ckpt, first.stderr)
    # A re-run finds nothing to stage in one SSH check round: no playbook.
    again = stage(lab, "all")
    assert again.returncode == 0, again.stderr[-3000:]
    fast = json.loads(again.stdout)
    assert fast["path"]["path"] == "fast" and fast["run"] is None, fast["path"]
    assert all(n["weights"]["verified"] and n["engram"]["verified"] for n in fast["nodes"].values())
    # The playbook (--full) agrees: it moves and packs nothing.
    t0 = time.monotonic()
    full = stage(lab, "all", "--full")
    took = time.monotonic() - t0
    assert full.returncode == 0, full.stderr[-3000:]
    report = json.loads(full.stdout)
    assert report["path"] == {"path": "playbook", "reasons": ["--full"], "check_seconds": 0.0}
    for name, n in report["nodes"].items():
        assert n["transfer"]["bytes_moved"] == 0, f"{name} moved data on a re-run"
        assert not n["pack"]["changed"], f"{name} re-packed on a re-run"
    assert took < 90, f"idempotent re-run took {took:.0f} s"


def test_kill_9_mid_file_then_rerun_resumes_bit_exact(lab: Any, ckpt: dict[str, Any]) -> None:
    victim = "spark-2"
    assert stage(lab, "weights").returncode == 0  # everything in place (a no-op after the first test)
    for node in ("spark-1", "spark-2", "spark-3"):
        lab.ssh(node, f"rm -f {MODEL_DIR}/{BIG}")
    size = ckpt["files"][BIG][0]
    argv = [
        sys.executable,
        "-m",
        "sparkctl",
        "-i",
        str(lab.inventory),
        "--json",
        "stage",
        "weights",
        "--bwlimit",
        str(max(1, size / (1 << 20) / 8)),
        "--stall-timeout",
        "15",
    ]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = None
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        probe = f"cat {PROGRESS} 2>/dev/null; echo; ls -l {MODEL_DIR}/{BIG}.partial 2>/dev/null"
        out = lab.ssh(victim, probe, check=False)
        lines = out.stdout.splitlines()
        if lines and lines[0].startswith("{"):
            doc = json.loads(lines[0])
            if doc.get("current") == BIG and doc.get("state") == "receiving" and len(lines) > 1:
                have = int(lines[1].split()[4])
                if size // 4 < have < size * 3 // 4:
                    pid = doc["pid"]
                    break
        time.sleep(0.2)
    assert pid, "the transfer to spark-2 never reached the middle of the file"
    lab.ssh(victim, f"kill -9 {pid}")
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stdout[-2000:] + stderr[-2000:]
    left = lab.ssh(victim, f"stat -c %s {MODEL_DIR}/{BIG}.partial; test ! -e {MODEL_DIR}/{BIG}", check=False)
    assert left.returncode == 0 and 0 < int(left.stdout.split()[0]) < size
    again = stage(lab, "weights")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    moved = json.loads(again.stdout)["nodes"][victim]["transfer"]
    assert moved["counts"].get("resumed") == 1, moved
    assert moved["bytes_moved"] < size
    assert_exact(lab, ckpt)


def test_flipped_byte_is_named_by_verify_only(lab: Any, ckpt: dict[str, Any]) -> None:
    assert stage(lab, "all").returncode == 0  # everything in place (a no-op after the first test)
    target = f"{MODEL_DIR}/model-00002-of-00004.safetensors"
    flip = f"f=open('{target}','r+b'); f.seek(4097); b=f.read(1); f.seek(4097); f.write(bytes([b[0] ^ 1]))"
    lab.ssh("spark-1", f"python3 -c {shlex.quote(flip)}")
    bad = stage(lab, "--verify-only")
    assert bad.returncode == 1
    text = bad.stdout + bad.stderr
    assert "spark-1" in text and "model-00002-of-00004.safetensors" in text
    failures = json.loads(bad.stdout)["run"]["failures"]
    assert [f["host"] for f in failures] == ["spark-1"]
    fixed = stage(lab, "weights")  # a normal run repairs the file from the chain
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    # The write changed the file's modification time: the fast path's check names it, the playbook runs.
    assert json.loads(fixed.stdout)["path"]["reasons"] == [
        "spark-1: checkpoint: model-00002-of-00004.safetensors: not confirmed by this node's manifest "
        "(changed since staging?)"]
    assert stage(lab, "--verify-only").returncode == 0
    assert_exact(lab, ckpt)


def test_a_node_without_space_is_refused_before_any_copy(lab: Any, ckpt: dict[str, Any]) -> None:
    if not lab.nvme_gib:
        pytest.skip("needs the lab's NVMe loop filesystems (SPARKCTL_LAB_NVME_GIB > 0)")
    for node in ("spark-1", "spark-3"):
        lab.ssh(node, f"rm -f {MODEL_DIR}/{BIG}")
    before = node_files(lab, "spark-1")
    with lab.nvme_filled("spark-3", free_mib=16):
        res = stage(lab, "weights")
    assert res.returncode == 1
    text = res.stdout + res.stderr
    assert "spark-3" in text and "not enough space" in text
    after = node_files(lab, "spark-1")
    assert after == before, "spark-1 received bytes although spark-3 was refused"
    assert not lab.ssh("spark-3", f"ls {MODEL_DIR}/{BIG}* 2>/dev/null", check=False).stdout.strip()
    ok = stage(lab, "weights")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert_exact(lab, ckpt)
