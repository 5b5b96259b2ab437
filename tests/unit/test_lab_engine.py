"""The lab's container runtime, without booting anything: the nspawn argv a Spark gets, the rootfs
recipe for its Docker engine, the synthetic serving kit (deterministic commit, manifest digests
that match the files) and the base engine image's tar."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from sparkctl_lab import engine, kit, machines, rootfs, state
from sparkctl_lab import inventory as lab_inventory
from sparkctl_lab import topology as topo

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def lab_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCTL_LAB_DIR", str(tmp_path / "lab"))
    return tmp_path / "lab"


# --- nspawn and the rootfs ----------------------------------------------------------------------


def test_a_spark_boots_with_what_a_docker_engine_needs(lab_dir: Path) -> None:
    argv = machines._nspawn_argv("spark-2", Path("/rootfs"))
    assert "--capability=all" in argv
    assert "--system-call-filter=@keyring bpf" in argv
    assert f"--bind={lab_dir}/machines/spark-2/docker:/var/lib/docker" in argv
    assert f"--bind={lab_dir}/machines/spark-2/nvme:/mnt/nvme" in argv
    assert rootfs.DOCKER_DAEMON_JSON["data-root"] == rootfs.DOCKER_DATA_ROOT == "/var/lib/docker"


def test_the_switch_keeps_only_net_admin_and_has_no_engine(lab_dir: Path) -> None:
    argv = machines._nspawn_argv(topo.SWITCH_NAME, Path("/rootfs"))
    assert "--capability=CAP_NET_ADMIN" in argv
    assert not [a for a in argv if a.startswith(("--system-call-filter", "--bind="))]
    assert "--capability=all" not in argv
    machines.prepare_machine(topo.SWITCH_NAME, "ssh-ed25519 AAAAtest controller")
    units = state.paths(topo.SWITCH_NAME).upper / "etc/systemd/system"
    for unit in ("docker.service", "docker.socket", "containerd.service"):
        assert os.readlink(units / unit) == "/dev/null"
    assert not state.paths(topo.SWITCH_NAME).docker.exists()


def test_a_spark_gets_its_own_docker_data_root_and_no_masked_engine(lab_dir: Path) -> None:
    machines.prepare_machine("spark-1", "ssh-ed25519 AAAAtest controller")
    p = state.paths("spark-1")
    assert p.docker.is_dir()
    daemon = json.loads((p.upper / "etc/docker/daemon.json").read_text())
    assert daemon == {**rootfs.DOCKER_DAEMON_JSON, "cgroup-parent": "/sparkctl-lab/spark-1"}
    assert not (p.upper / "etc/systemd/system/docker.service").is_symlink()


def test_the_rootfs_carries_the_engine_and_a_new_cache_key() -> None:
    for pkg in ("docker.io", "iptables", "zstd"):
        assert pkg in rootfs.ROOTFS_PACKAGES
    # The cgroup remount runs before the engine and in a container only.
    unit = rootfs._CGROUPS_UNIT_TEXT
    assert "Before=containerd.service docker.service" in unit
    assert "ConditionVirtualization=container" in unit
    assert f"ExecStart={rootfs._CGROUPS_SCRIPT}" in unit


def _cgroup_stand_ins(tmp_path: Path, *, remount_sticks: bool) -> tuple[Path, Path]:
    """findmnt, umount, mount and sleep stand-ins that log what they are asked. findmnt reports the
    controllers read-only until a mount was made (when ``remount_sticks``), read-only forever else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    ro = (
        "/sys/fs/cgroup/systemd ro,nosuid rw,xattr,name=systemd\n"
        "/sys/fs/cgroup/cpu,cpuacct ro,nosuid rw,cpu,cpuacct\n"
        "/sys/fs/cgroup/memory rw,nosuid rw,memory\n"
        "/sys/fs/cgroup/cpuset ro,nosuid rw,cpuset\n"
    )
    rw = ro.replace("ro,nosuid", "rw,nosuid")
    after = rw if remount_sticks else ro
    (bin_dir / "findmnt").write_text(
        f"#!/bin/sh\nif grep -q '^mount ' {calls} 2>/dev/null; then printf '{after}'\n"
        f"else printf '{ro}'; fi\n"
    )
    for tool in ("umount", "mount"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n')
    (bin_dir / "sleep").write_text("#!/bin/sh\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    script = tmp_path / "cgroups.sh"
    script.write_text(rootfs._CGROUPS_SCRIPT_TEXT)
    return script, calls


def test_the_cgroup_script_remounts_only_read_only_v1_controllers(tmp_path: Path) -> None:
    script, calls = _cgroup_stand_ins(tmp_path, remount_sticks=True)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    subprocess.run(["sh", str(script)], env=env, check=True, timeout=10)
    assert calls.read_text().splitlines() == [
        "umount -l /sys/fs/cgroup/cpu,cpuacct",
        "mount -t cgroup -o cpu,cpuacct cgroup /sys/fs/cgroup/cpu,cpuacct",
        "umount -l /sys/fs/cgroup/cpuset",
        "mount -t cgroup -o cpuset cgroup /sys/fs/cgroup/cpuset",
    ]


def test_the_cgroup_script_retries_then_fails_when_a_controller_stays_read_only(tmp_path: Path) -> None:
    script, calls = _cgroup_stand_ins(tmp_path, remount_sticks=False)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    proc = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 1
    left = "/sys/fs/cgroup/cpu,cpuacct cpu,cpuacct /sys/fs/cgroup/cpuset cpuset"
    assert f"still read-only: {left}" in proc.stderr
    assert calls.read_text().count("mount -t cgroup -o cpuset") == 10


# --- the synthetic serving kit ------------------------------------------------------------------


def test_the_kit_commit_is_the_same_everywhere_and_a_rewrite_is_a_no_op(tmp_path: Path) -> None:
    a = kit.ensure(tmp_path / "one" / "kit")
    b = kit.ensure(tmp_path / "two" / "kit")
    assert a.written and b.written
    assert a.commit == b.commit and len(a.commit) == 40
    again = kit.ensure(tmp_path / "one" / "kit")
    assert not again.written and again.commit == a.commit


def test_a_changed_kit_checkout_is_written_afresh(tmp_path: Path) -> None:
    repo = kit.ensure(tmp_path / "kit")
    (repo.path / kit.MANIFEST).write_text("{}\n")
    fixed = kit.ensure(repo.path)
    assert fixed.written and fixed.commit == repo.commit
    assert json.loads((repo.path / kit.MANIFEST).read_text()) == kit.manifest()


def test_the_manifest_digests_match_the_kit_and_the_image(tmp_path: Path) -> None:
    repo = kit.ensure(tmp_path / "kit").path
    manifest = json.loads((repo / kit.MANIFEST).read_text())
    assert sorted(manifest) == sorted(kit.overlay_rels()) and len(manifest) == 3
    image = kit.image_files()
    for rel, entry in manifest.items():
        after = (repo / kit.OVERLAY_SOURCE / rel).read_bytes()
        assert entry["after_sha256"] == hashlib.sha256(after).hexdigest() == kit.after_sha256(rel)
        before = image.get(f"{kit.OVERLAY_TARGET}/{rel}")
        if entry["before_sha256"] is None:
            assert before is None
        else:
            assert before is not None and entry["before_sha256"] == hashlib.sha256(before).hexdigest()
            assert entry["before_sha256"] != entry["after_sha256"]
    assert [rel for rel, e in manifest.items() if e["before_sha256"] is None] == [
        "python/sglang/kernels/ops/attention/dsv4/indexer_postprocess.py"
    ]
    for rel in ("adapter/sitecustomize.py", "runtime/README", "configs/cluster.example.json"):
        assert (repo / rel).is_file()
    dockerfile = (repo / kit.DOCKERFILE).read_text().splitlines()
    assert f"FROM {kit.BASE_IMAGE}" in dockerfile and "HEALTHCHECK NONE" in dockerfile
    assert not any(line.startswith(("RUN", "ADD")) for line in dockerfile)


def test_the_lab_inventory_runs_containers_of_the_kit(tmp_path: Path) -> None:
    inv = lab_inventory.LabInventory(
        inventory_dir=tmp_path / "lab",
        private_key=tmp_path / "id",
        api_key_file=tmp_path / "api",
        checkpoint_dir=tmp_path / "ck",
        host_keys={},
        nvme_gib={},
        kit_url="/var/lib/sparkctl/lab/kit",
        kit_commit="a" * 40,
    )
    doc = lab_inventory.group_vars_document(inv)
    assert doc["sparkctl_runtime"] == {
        "kind": "container", "image": "sparkctl-lab/engine:kit", "image_source": "build"
    }
    assert doc["sparkctl_kit"] == {"source": "git", "url": "/var/lib/sparkctl/lab/kit", "commit": "a" * 40}
    plain = lab_inventory.group_vars_document(dataclasses.replace(inv, kit_url=None, kit_commit=None))
    assert plain["sparkctl_runtime"]["kind"] == "lab" and "sparkctl_kit" not in plain


# --- the base engine image ----------------------------------------------------------------------


def _fake_tree(root: Path) -> Path:
    for rel in ("usr/lib/python3.11/os.py", "usr/share/doc/python3/copyright", "dev/null-ish",
                "var/lib/apt/lists/x_Packages", "etc/os-release", "usr/bin/python3"):
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(rel)
    return root


def test_the_image_tar_holds_the_simulator_sglang_and_the_stock_overlays(tmp_path: Path) -> None:
    tree = _fake_tree(tmp_path / "tree")
    added = engine.added_files(tree)
    out = tmp_path / "image.tar"
    engine.write_tar(tree, added, out)
    with tarfile.open(out) as tar:
        members = {m.name: m for m in tar.getmembers()}
        sglang = members["usr/local/bin/sglang"]
        assert sglang.mode == 0o755
        assert "usr/local/lib/python3.11/dist-packages/sparkctl_sim/rank.py" in members
        for path, data in kit.image_files().items():
            extracted = tar.extractfile(members[path.lstrip("/")])
            assert extracted is not None and extracted.read() == data
    assert "usr/share/doc" in members and "usr/share/doc/python3/copyright" not in members
    assert "dev" in members and "dev/null-ish" not in members
    assert "var/lib/apt/lists/x_Packages" not in members and "etc/os-release" in members
    # The same inputs give the same bytes, so the content label means something.
    again = tmp_path / "again.tar"
    engine.write_tar(tree, engine.added_files(tree), again)
    assert again.read_bytes() == out.read_bytes()
    assert engine.content_key(tree, added) == engine.content_key(tree, engine.added_files(tree))
    changed = dict(added, **{"usr/local/bin/sglang": (b"#!/bin/sh\n", 0o755)})
    assert engine.content_key(tree, changed) != engine.content_key(tree, added)


def test_sglang_in_the_image_runs_the_simulator_with_the_rendered_argv(tmp_path: Path) -> None:
    script = tmp_path / "sglang"
    script.write_bytes(engine.SGLANG_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(script), "--help"], env=env, capture_output=True,
                          text=True, timeout=30, check=False)
    assert proc.returncode == 0 and "sglang serve" in proc.stdout and "SPARKCTL_SIM_" in proc.stdout
