"""The fabric chain agent on loopback: exact bytes, resume, digest refusal, reuse, kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.ports import free_port

from sparkctl.stage import fanout
from sparkctl.stage import manifest as mf
from sparkctl.stage import transfer as tx

REPO = Path(__file__).resolve().parents[2]


def make_source(root: Path, sizes: dict[str, int]) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    for i, (name, size) in enumerate(sizes.items()):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            bytes([(i * 31 + j) % 251 for j in range(251)]) * (size // 251) + os.urandom(size % 251)
        )
    m = mf.build(str(root))
    mf.save(str(root), m)
    return m


def run_chain(base: Path, m: dict[str, Any], n: int, **kw: Any) -> dict[str, Any]:
    """Node i keeps its checkpoint in base/n<i>/model (n0 is the source)."""
    peers = [{"name": f"n{i}", "rank": i, "address": f"127.0.0.{i + 1}"} for i in range(n)]
    routes = fanout.chain(peers, free_port())
    out: dict[str, Any] = {}

    def one(r: fanout.Route) -> None:
        try:
            out[r.node] = tx.run_node(
                r.node,
                str(base / r.node / "model"),
                m,
                r.listen,
                r.upstream,
                str(base / f"{r.node}.progress.json"),
                stall_s=10,
                connect_wait_s=10,
                **kw,
            )
        except Exception as exc:
            out[r.node] = exc

    threads = [threading.Thread(target=one, args=(r,)) for r in routes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


SIZES = {
    "config.json": 300,
    "model-00001-of-00002.safetensors": 5 << 20,
    "sub/model-00002-of-00002.safetensors": 3 << 20,
}


def test_chain_routes_are_rank_ordered() -> None:
    peers = [
        {"name": "b", "rank": 1, "address": "10.0.0.2"},
        {"name": "a", "rank": 0, "address": "10.0.0.1"},
        {"name": "c", "rank": 2, "address": "10.0.0.3"},
    ]
    routes = fanout.chain(peers, 29700)
    assert [(r.node, r.upstream, r.listen, r.downstream) for r in routes] == [
        ("a", None, ("10.0.0.1", 29700), "b"),
        ("b", ("10.0.0.1", 29700), ("10.0.0.2", 29700), "c"),
        ("c", ("10.0.0.2", 29700), None, None),
    ]
    with pytest.raises(ValueError, match="duplicate"):
        fanout.chain([*peers, {"name": "d", "rank": 2, "address": "x"}], 1)


def test_every_node_ends_with_the_exact_bytes_and_a_rerun_moves_nothing(tmp_path: Path) -> None:
    m = make_source(tmp_path / "n0" / "model", SIZES)
    res = run_chain(tmp_path, m, 4)
    assert all(isinstance(r, tx.NodeResult) for r in res.values()), res
    for i in (1, 2, 3):
        for name in SIZES:
            assert (tmp_path / f"n{i}" / "model" / name).read_bytes() == (
                tmp_path / "n0" / "model" / name
            ).read_bytes()
        assert res[f"n{i}"].counts == {"transferred": 3}
        assert not list((tmp_path / f"n{i}" / "model").rglob("*.partial"))
    prog = json.loads((tmp_path / "n3.progress.json").read_text())
    assert prog["state"] == "done" and prog["bytes_done"] == prog["bytes_total"] == sum(SIZES.values())
    again = run_chain(tmp_path, m, 4)
    assert all(r.counts == {"keep": 3} and r.bytes_moved == 0 for r in again.values())  # type: ignore[union-attr]


def test_a_partial_with_the_right_prefix_resumes(tmp_path: Path) -> None:
    m = make_source(tmp_path / "n0" / "model", SIZES)
    name = "model-00001-of-00002.safetensors"
    (tmp_path / "n1" / "model").mkdir(parents=True)
    src = (tmp_path / "n0" / "model" / name).read_bytes()
    (tmp_path / "n1" / "model" / (name + ".partial")).write_bytes(src[: (3 << 20) + 12345])
    res = run_chain(tmp_path, m, 2)
    n1 = res["n1"]
    assert isinstance(n1, tx.NodeResult), n1
    assert n1.files[name] == "resumed"
    assert n1.bytes_moved == sum(SIZES.values()) - (3 << 20)  # resumed at the 1 MiB boundary below
    assert (tmp_path / "n1" / "model" / name).read_bytes() == src


def test_a_partial_with_a_wrong_prefix_starts_over(tmp_path: Path) -> None:
    m = make_source(tmp_path / "n0" / "model", SIZES)
    name = "model-00001-of-00002.safetensors"
    (tmp_path / "n1" / "model").mkdir(parents=True)
    (tmp_path / "n1" / "model" / (name + ".partial")).write_bytes(b"\x55" * (2 << 20))
    res = run_chain(tmp_path, m, 2)
    assert res["n1"].files[name] == "transferred"  # type: ignore[union-attr]
    assert (tmp_path / "n1" / "model" / name).read_bytes() == (tmp_path / "n0" / "model" / name).read_bytes()


def test_a_digest_mismatch_is_never_renamed_into_place(tmp_path: Path) -> None:
    m = make_source(tmp_path / "n0" / "model", SIZES)
    name = "sub/model-00002-of-00002.safetensors"
    bad = dict(m, files=[dict(e, sha256="0" * 64) if e["path"] == name else e for e in m["files"]])
    # the head serves the bad manifest's files; its own copy is trusted (keep) via its local manifest
    src = tmp_path / "n0" / "model"
    mf.save(
        str(src),
        dict(bad, files=[dict(e, mtime_ns=(src / e["path"]).stat().st_mtime_ns) for e in bad["files"]]),
    )
    res = run_chain(tmp_path, bad, 2, retries=2)
    assert isinstance(res["n1"], tx.TransferError)
    assert "sub/model-00002-of-00002.safetensors: SHA-256" in str(res["n1"])
    assert not (tmp_path / "n1" / "model" / name).exists()
    assert not (tmp_path / "n1" / "model" / (name + ".partial")).exists()


def test_identical_files_in_a_sibling_checkpoint_are_hard_linked(tmp_path: Path) -> None:
    m = make_source(tmp_path / "n0" / "rev-a", SIZES)
    # node 1 already holds the same files under another revision's directory
    run_chain_dirs = tmp_path / "n1"
    run_chain_dirs.mkdir()
    old = run_chain_dirs / "rev-old"
    for e in m["files"]:
        (old / e["path"]).parent.mkdir(parents=True, exist_ok=True)
        (old / e["path"]).write_bytes((tmp_path / "n0" / "rev-a" / e["path"]).read_bytes())
    mf.save(str(old), mf.build(str(old)))
    plan = tx.plan_local(str(run_chain_dirs / "rev-a"), m)
    assert set(plan.values()) == {"link"}
    res = tx.run_node("n1", str(run_chain_dirs / "rev-a"), m, None, None, stall_s=2, connect_wait_s=1)
    assert set(res.files.values()) == {"linked"} and res.bytes_moved == 0
    for e in m["files"]:
        assert (run_chain_dirs / "rev-a" / e["path"]).stat().st_ino == (old / e["path"]).stat().st_ino


def test_manifest_reuses_digests_of_unchanged_files_and_detects_changes(tmp_path: Path) -> None:
    m = make_source(tmp_path, {"a.bin": 1000, "b.bin": 2000})
    again = mf.build(str(tmp_path), m)
    assert mf.content_key(again) == mf.content_key(m)
    assert mf.verify(str(tmp_path), m, full=True) == []
    with (tmp_path / "b.bin").open("r+b") as f:
        f.seek(7)
        f.write(b"\x00" if f.read(1) != b"\x00" else b"\x01")
    assert mf.verify(str(tmp_path), m, full=True)[0].startswith("b.bin: SHA-256")
    assert mf.verify(str(tmp_path), m, full=False, local=mf.load(str(tmp_path)))[0].startswith(
        "b.bin: not confirmed"
    )
    assert mf.content_key(mf.build(str(tmp_path), m)) != mf.content_key(m)
    with pytest.raises(mf.ManifestError):
        mf.safe_relpath("../etc/passwd")


AGENT = """
import json, sys
from sparkctl.stage import transfer as tx
m = json.load(open(sys.argv[1]))
tx.run_node("n1", sys.argv[2], m, None, ("127.0.0.1", int(sys.argv[3])), sys.argv[4],
            bwlimit=float(sys.argv[5]), stall_s=10, connect_wait_s=10)
"""


def test_kill_9_mid_file_then_rerun_resumes_bit_exact(tmp_path: Path) -> None:
    m = make_source(tmp_path / "n0" / "model", {"big.safetensors": 24 << 20})
    (tmp_path / "m.json").write_text(json.dumps(m))
    port = free_port()
    server = tx.Server(
        str(tmp_path / "n0" / "model"),
        {e["path"]: e for e in m["files"]},
        "127.0.0.1",
        port,
        expect_done=2,
        stall_s=10,
    ).start()
    server.mark_ready("big.safetensors")
    prog = tmp_path / "n1.progress.json"
    argv = [
        sys.executable,
        "-c",
        AGENT,
        str(tmp_path / "m.json"),
        str(tmp_path / "n1" / "model"),
        str(port),
        str(prog),
    ]
    proc = subprocess.Popen([*argv, str(4 << 20)], cwd=REPO)  # 4 MiB/s: ~6 s for the file
    part = tmp_path / "n1" / "model" / "big.safetensors.partial"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not part.exists() or part.stat().st_size < (9 << 20)):
        time.sleep(0.05)
    pid = json.loads(prog.read_text())["pid"]
    assert pid == proc.pid
    os.kill(pid, signal.SIGKILL)
    proc.wait(10)
    cut = part.stat().st_size
    assert 0 < cut < (24 << 20) and not (tmp_path / "n1" / "model" / "big.safetensors").exists()
    subprocess.run([*argv, "0"], cwd=REPO, check=True, timeout=60)
    server.close()
    final = tmp_path / "n1" / "model" / "big.safetensors"
    assert final.read_bytes() == (tmp_path / "n0" / "model" / "big.safetensors").read_bytes()
    assert not part.exists()
    done = json.loads(prog.read_text())
    assert done["state"] == "done" and done["bytes_moved"] <= (24 << 20) - (cut // (1 << 20)) * (1 << 20)


def test_a_second_run_waits_for_a_live_first_run_and_never_stops_it(tmp_path: Path) -> None:
    """Two stage runs at once on one node: the newer one waits while the older agent (alive, its
    lock beating) finishes the shared .partial, instead of stopping it; both succeed and the file
    is exact."""
    m = make_source(tmp_path / "n0" / "model", {"big.safetensors": 24 << 20})
    (tmp_path / "m.json").write_text(json.dumps(m))
    port = free_port()
    server = tx.Server(str(tmp_path / "n0" / "model"), {e["path"]: e for e in m["files"]},
                       "127.0.0.1", port, expect_done=3, stall_s=10).start()
    server.mark_ready("big.safetensors")
    argv = [sys.executable, "-c", AGENT, str(tmp_path / "m.json"), str(tmp_path / "n1" / "model"), str(port)]
    first = subprocess.Popen([*argv, str(tmp_path / "a.json"), str(4 << 20)], cwd=REPO)  # slow
    part = tmp_path / "n1" / "model" / "big.safetensors.partial"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not part.exists() or part.stat().st_size < (3 << 20)):
        time.sleep(0.05)
    assert first.poll() is None, "the first run should still be writing"
    second = subprocess.run([*argv, str(tmp_path / "b.json"), "0"], cwd=REPO, timeout=60,
                            capture_output=True, text=True)
    server.close()
    assert first.wait(30) == 0, "the first agent ran to its end: nobody stopped it"
    assert second.returncode == 0, second.stderr
    final = tmp_path / "n1" / "model" / "big.safetensors"
    assert final.read_bytes() == (tmp_path / "n0" / "model" / "big.safetensors").read_bytes()
    assert not part.exists()


HOLDER = """
import sys, time
from sparkctl.stage import transfer as tx
fd = tx.fence(sys.argv[1], node="spark-1")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _holder(root: Path, hold_s: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), str(hold_s)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_live_holder_is_waited_for_then_refused_by_pid_and_never_stopped(tmp_path: Path) -> None:
    root = tmp_path / "model"
    holder = _holder(root, 900)
    logs: list[str] = []
    try:
        started = time.monotonic()
        with pytest.raises(
            tx.TransferError,
            match=rf"^spark-1: another stage run holds {root} \(pid {holder.pid} on spark-1, running, "
                  rf"last beat \d+ s ago\); waited 1 s and left it alone .*kill {holder.pid}\)",
        ):
            tx.fence(str(root), wait_s=1, node="spark-1", log=logs.append)
        assert 1 <= time.monotonic() - started < 450  # waited its 1 s, then gave up (not for the holder)
        assert holder.poll() is None, "a live concurrent run is never stopped"
        assert logs == [f"spark-1: waiting up to 1 s for the run (pid {holder.pid}) holding {root}"]
    finally:
        holder.kill()
        holder.wait()
    # Its lock died with it: taken at once, and the stale words are overwritten.
    fd = tx.fence(str(root), wait_s=0.3, node="spark-1", log=logs.append)
    try:
        assert logs[-1] == (f"spark-1: cleared the stale lock of {root} left by pid {holder.pid} "
                            "(no longer running)")
        assert (root / tx.LOCK_NAME).read_text().split()[::2] == [str(os.getpid()), "spark-1"]
    finally:
        os.close(fd)


def test_a_holder_that_finishes_while_waited_for_hands_over_the_lock(tmp_path: Path) -> None:
    root = tmp_path / "model"
    holder = _holder(root, 1.0)
    fd = tx.fence(str(root), wait_s=30, node="spark-1")
    os.close(fd)
    assert holder.wait(10) == 0, "the holder ended by itself"


def test_a_hung_holder_that_stopped_beating_is_stopped(tmp_path: Path) -> None:
    root = tmp_path / "model"
    holder = _holder(root, 60)
    os.kill(holder.pid, signal.SIGSTOP)  # suspended: alive, holding the lock, beating no more
    old = time.time() - 600
    os.utime(root / tx.LOCK_NAME, (old, old))
    logs: list[str] = []
    try:
        fd = tx.fence(str(root), wait_s=10, node="spark-1", stale_s=60, log=logs.append)
        os.close(fd)
        assert holder.wait(10) == -signal.SIGTERM
        assert logs[0].startswith(f"spark-1: stopping the stage agent pid {holder.pid} that holds {root} "
                                  "but has not beaten for 6")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
