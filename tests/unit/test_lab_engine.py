"""The lab's container runtime, without booting anything: the nspawn argv a Spark gets, the rootfs
recipe for its Docker engine, the synthetic serving kit (deterministic commit, manifest digests
that match the files) and the base engine image's tar."""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import shutil
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


# --- the kit's stage-time build inputs and lock (R4 scripts/cluster.py stage(), runtime/launch.py) --

# R4 scripts/cluster.py stage(): the compile, verbatim, with the kit mounted at /opt/sglang4.
R4_ROW_STORE_BUILD = [
    "g++", "-O2", "-Wall", "-Wextra", "-Werror", "-std=c++17", "-shared", "-fPIC", "-pthread",
    "/opt/sglang4/adapter/row_store.cpp", "-o", "/opt/sglang4/adapter/librow_store.so",
]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_b12x_archive_matches_its_manifest_as_r4_stage_checks_it(tmp_path: Path) -> None:
    repo = kit.ensure(tmp_path / "kit").path
    manifest = json.loads((repo / "vendor/b12x-source-manifest.json").read_text())
    assert manifest == kit.b12x_manifest() and len(manifest) >= 3
    with tarfile.open(repo / "vendor/b12x-source.tar.gz") as tar:
        # R4: set(tar.getnames()) == set(bundle), then each member's sha256 against its entry
        assert set(tar.getnames()) == set(manifest)
        for member in tar.getmembers():
            assert member.isfile() and (member.uid, member.gid, member.mtime) == (0, 0, kit._B12X_MTIME)
            extracted = tar.extractfile(member)
            assert extracted is not None and _sha(extracted.read()) == manifest[member.name]
    # gzip header: no file name, mtime 0
    raw = (repo / "vendor/b12x-source.tar.gz").read_bytes()
    assert raw[:4] == b"\x1f\x8b\x08\x00" and raw[4:8] == b"\0\0\0\0"
    # `tar -xzf` (what a stage of the whole kit uses) reads it too
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(repo / "vendor/b12x-source.tar.gz"), "-C", str(out)], check=True)
    assert {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} == set(manifest)


def test_the_kit_bytes_are_the_same_on_every_write(tmp_path: Path) -> None:
    a, b = kit.ensure(tmp_path / "a" / "kit"), kit.ensure(tmp_path / "b" / "kit")
    assert a.commit == b.commit
    for rel in (kit.B12X_ARCHIVE, kit.B12X_MANIFEST, kit.LOCK, kit.ROW_STORE_SOURCE,
                kit.RUNTIME_CONFIGURATION):
        assert (a.path / rel).read_bytes() == (b.path / rel).read_bytes() == kit.files()[rel]
    assert kit.b12x_archive() == kit.b12x_archive()


def test_the_lock_digests_match_the_kit_files_the_lab_checkpoint_and_the_image(tmp_path: Path) -> None:
    from support import synth_checkpoint

    repo = kit.ensure(tmp_path / "kit").path
    lock = json.loads((repo / "versions.lock.json").read_text())
    assert set(lock) == {
        "runtime_configuration_sha256", "model_config_sha256", "sglang_commit", "adapter_sha256"
    }
    assert lock["runtime_configuration_sha256"] == _sha((repo / "runtime/configuration.py").read_bytes())
    adapters = {p.name: _sha(p.read_bytes()) for p in (repo / "adapter").iterdir() if p.is_file()}
    assert lock["adapter_sha256"] == adapters and {"row_store.cpp", "sitecustomize.py"} <= set(adapters)
    # the lab checkpoint's config.json, whatever its sizes (the lab tests' and the demo's)
    written = {}
    for name, rows, shards, mib in (("small", (53, 49), 1, 0.05), ("demo-shaped", (1001, 999), 4, 0.1)):
        written[name] = synth_checkpoint.write_checkpoint(
            tmp_path / name, rows, filler_shards=shards, filler_mib=mib
        )
        config = (tmp_path / name / "config.json").read_bytes()
        assert config == kit.MODEL_CONFIG and lock["model_config_sha256"] == _sha(config)
    # the sizes moved to the index: a checkpoint asked for again with the same arguments is found as it is
    index = tmp_path / "small" / "model.safetensors.index.json"
    before = index.stat().st_mtime_ns
    again = synth_checkpoint.write_checkpoint(tmp_path / "small", (53, 49), filler_shards=1, filler_mib=0.05)
    assert again == written["small"] and index.stat().st_mtime_ns == before
    assert lock["sglang_commit"] == kit.SGLANG_COMMIT == engine.IMAGE_ENV["SGLANG_BUILD_COMMIT"]
    assert len(kit.SGLANG_COMMIT) == 40 and int(kit.SGLANG_COMMIT, 16) >= 0


def test_the_row_store_build_is_r4s_line() -> None:
    assert list(kit.ROW_STORE_BUILD) == R4_ROW_STORE_BUILD
    assert kit.ROW_STORE_SOURCE == "adapter/row_store.cpp"
    assert kit.ROW_STORE_LIBRARY == "adapter/librow_store.so"


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine to compile the row store")
def test_the_row_store_compiles_with_r4s_line_and_exports_its_version(tmp_path: Path) -> None:
    repo = kit.ensure(tmp_path / "kit").path
    argv = [a.replace(kit.KIT_MOUNT, str(repo)) for a in R4_ROW_STORE_BUILD]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr  # -Wall -Wextra -Werror: not one warning
    lib = ctypes.CDLL(str(repo / kit.ROW_STORE_LIBRARY))
    lib.row_store_version.restype = ctypes.c_char_p
    assert lib.row_store_version() == b"sparkctl-lab-row-store 1"
    lib.row_store_offset.restype = ctypes.c_int64
    lib.row_store_offset.argtypes = [ctypes.c_uint64] * 3
    assert lib.row_store_offset(100, 200, 101) == 4096 + 264 and lib.row_store_offset(100, 200, 200) == -1


def test_the_simulator_accepts_the_lab_kit_once_built_as_r4_stages_it(tmp_path: Path) -> None:
    """R4's stage() on the lab kit (extract b12x by the manifest, a library with its record) gives
    what the simulator's Engram import requires; the two sides name the same paths."""
    from sparkctl_sim import kit as sim_kit

    repo = kit.ensure(tmp_path / "kit").path
    assert sim_kit.check_build_products(str(repo))[1]  # not built yet: refused
    bundle = json.loads((repo / kit.B12X_MANIFEST).read_text())
    with tarfile.open(repo / kit.B12X_ARCHIVE) as tar:
        for name in bundle:
            member = tar.extractfile(name)
            assert member is not None
            target = repo / kit.B12X_DIR / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(member.read())
    library = b"compiled row store\n"
    (repo / kit.ROW_STORE_LIBRARY).write_bytes(library)
    record = {"row_store_library_sha256": _sha(library), "image": "x"}
    (repo / kit.ROW_STORE_RECORD).write_text(json.dumps(record))
    summary, problems = sim_kit.check_build_products(str(repo))
    assert problems == [] and f"{len(bundle)} b12x sources" in summary
    assert (sim_kit.ROW_STORE_LIBRARY, sim_kit.ROW_STORE_RECORD, sim_kit.B12X_MANIFEST, sim_kit.B12X_DIR) == (
        kit.ROW_STORE_LIBRARY, kit.ROW_STORE_RECORD, kit.B12X_MANIFEST, kit.B12X_DIR
    )


# --- the engine image's compiler and SGLang commit ------------------------------------------------


def test_the_engine_image_has_gxx_and_a_new_tree_key(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "g++" in engine.PACKAGES
    with_gxx = engine.tree_key()
    monkeypatch.setattr(engine, "PACKAGES", tuple(p for p in engine.PACKAGES if p != "g++"))
    assert engine.tree_key() != with_gxx  # a cached tree without g++ is never reused


def test_the_engine_image_sets_the_sglang_commit_and_the_label_follows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    changes = engine.import_changes()
    assert f"ENV SGLANG_BUILD_COMMIT={kit.SGLANG_COMMIT}" in changes
    assert f"ENV PATH={engine._IMAGE_PATH}" in changes and 'CMD ["sglang", "--help"]' in changes
    tree = _fake_tree(tmp_path / "tree")
    added = engine.added_files(tree)
    key = engine.content_key(tree, added)
    monkeypatch.setitem(engine.IMAGE_ENV, "SGLANG_BUILD_COMMIT", "0" * 40)
    assert engine.content_key(tree, added) != key  # another commit is another image


def test_the_image_tar_leaves_out_compiler_parts_a_build_never_runs(tmp_path: Path) -> None:
    tree = _fake_tree(tmp_path / "tree")
    kept = ("usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", "usr/lib/gcc/x86_64-linux-gnu/12/libgcc.a",
            "usr/lib/gcc/x86_64-linux-gnu/12/liblto_plugin.so", "usr/bin/x86_64-linux-gnu-g++-12",
            "usr/bin/x86_64-linux-gnu-ld.bfd", "usr/lib/x86_64-linux-gnu/libstdc++.so.6",
            "usr/include/c++/12/vector", "usr/bin/gpgv", "usr/lib/x86_64-linux-gnu/libc.so",
            "usr/lib/x86_64-linux-gnu/libc_nonshared.a", "usr/lib/x86_64-linux-gnu/libm.so",
            "usr/lib/x86_64-linux-gnu/libmvec.so", "usr/bin/x86_64-linux-gnu-ld")
    dropped = ("usr/lib/gcc/x86_64-linux-gnu/12/lto1", "usr/bin/x86_64-linux-gnu-lto-dump-12",
               "usr/lib/gcc/x86_64-linux-gnu/12/libasan.a",
               "usr/lib/gcc/x86_64-linux-gnu/12/libtsan_preinit.o",
               "usr/lib/x86_64-linux-gnu/libubsan.so.1.0.0",
               "usr/lib/x86_64-linux-gnu/gprofng/libgp-collector.so",
               "usr/bin/gcov-12", "usr/bin/x86_64-linux-gnu-gp-display-html",
               "usr/lib/gcc/x86_64-linux-gnu/12/cc1", "usr/lib/gcc/x86_64-linux-gnu/12/libstdc++.a",
               "usr/lib/x86_64-linux-gnu/libc.a", "usr/lib/x86_64-linux-gnu/libm-2.36.a",
               "usr/lib/x86_64-linux-gnu/libmvec.a", "usr/bin/x86_64-linux-gnu-ld.gold",
               "usr/bin/x86_64-linux-gnu-dwp", "usr/lib/x86_64-linux-gnu/gconv/UTF-16.so")
    for rel in kept + dropped:
        f = tree / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(rel)
    out = tmp_path / "image.tar"
    engine.write_tar(tree, engine.added_files(tree), out)
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
    assert set(kept) <= names
    assert not names & set(dropped) and "usr/lib/x86_64-linux-gnu/gprofng" not in names
    assert "usr/lib/x86_64-linux-gnu/gconv" not in names


def test_the_image_carries_the_probe_file_where_the_simulator_looks(tmp_path: Path) -> None:
    """The simulator recognises R4's probe images from sparkctl/qa/probes/r4.json, found beside its own
    package; the image holds that file (data only) at the same place relative to sparkctl_sim."""
    import sparkctl_sim
    from sparkctl_sim import probes

    added = engine.added_files(_fake_tree(tmp_path / "tree"))
    sim_parent = Path(sparkctl_sim.__file__).resolve().parent.parent
    rel = probes.PATH.relative_to(sim_parent).as_posix()
    site = "usr/local/lib/python3.11/dist-packages"
    assert added[f"{site}/{rel}"] == (probes.PATH.read_bytes(), 0o644)
    assert f"{site}/sparkctl_sim/probes.py" in added
    assert not [p for p in added if p.startswith(f"{site}/sparkctl/") and p.endswith(".py")]
