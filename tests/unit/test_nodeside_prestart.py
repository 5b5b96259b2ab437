"""The kit's pre-start checks (sparkctl.nodeside.prestart) on a synthetic kit tree laid out as R4's:
each of the launcher's checks failing alone is named with its file and both digests, every failure is
reported at once, and when everything matches the command after ``--`` replaces the process."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkctl.nodeside import prestart

SCRIPT = Path(prestart.__file__)
COMMIT = "0f1e2d3c4b5a69788796a5b4c3d2e1f0a1b2c3d4"
OVERLAYS = ["python/sglang/srt/models/deepseek_v4.py", "python/sglang/srt/distributed/parallel_state.py"]
ADAPTERS = ["sitecustomize.py", "engram_backend.py"]
B12X = ["b12x/__init__.py", "b12x/gemm/dense.py"]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Tree:
    kit: Path
    target: Path
    model_config: Path

    def args(self, lock: bool = True, build: bool = True) -> list[str]:
        out = ["--kit", str(self.kit), "--manifest", "patches/manifest.json",
               "--overlay-target", str(self.target)]
        if lock:
            out += ["--lock", "versions.lock.json", "--model-config", str(self.model_config)]
        if build:
            out += ["--build-record", "row-store-build.json", "row_store_library_sha256",
                    "adapter/librow_store.so",
                    "--source-manifest", "vendor/b12x-source-manifest.json", "b12x"]
        return out


def write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return sha(data)


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    """A kit whose every pinned digest matches: the state the publisher's launcher starts from."""
    kit, target = tmp_path / "opt/sglang4", tmp_path / "sgl-workspace/sglang"
    model_config = tmp_path / "models/DeepSeek-V4.1-Flash/config.json"
    manifest = {}
    for rel in OVERLAYS:
        after = write(target / rel, f"# patched {rel}\n".encode())
        manifest[rel] = {"before_sha256": sha(b"stock"), "after_sha256": after}
    write(kit / "patches/manifest.json", json.dumps(manifest).encode())
    lock = {
        "runtime_configuration_sha256": write(kit / "runtime/configuration.py", b"def load(p): ...\n"),
        "model_config_sha256": write(model_config, b'{"model_type": "deepseek_v4"}\n'),
        "sglang_commit": COMMIT,
        "adapter_sha256": {n: write(kit / "adapter" / n, f"# {n}\n".encode()) for n in ADAPTERS},
    }
    write(kit / "versions.lock.json", json.dumps(lock).encode())
    write(kit / "row-store-build.json", json.dumps({
        "row_store_library_sha256": write(kit / "adapter/librow_store.so", b"\x7fELF row store"),
        "image": "sha256:" + "1" * 64}).encode())
    names = {rel.split("/", 1)[1]: write(kit / rel, f"# {rel}\n".encode()) for rel in B12X}
    write(kit / "vendor/b12x-source-manifest.json", json.dumps(names).encode())
    return Tree(kit, target, model_config)


def run(args: list[str], command: list[str],
        env_commit: str | None = COMMIT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != prestart.COMMIT_ENV}
    if env_commit is not None:
        env[prestart.COMMIT_ENV] = env_commit
    return subprocess.run([sys.executable, str(SCRIPT), *args, "--", *command], capture_output=True,
                          text=True, env=env, timeout=60, check=False)


def fail_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith(prestart.FAIL + " ")]


def test_every_check_passing_execs_the_command_unchanged(tree: Tree) -> None:
    proc = run(tree.args(), [sys.executable, "-c", "print(42)"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "42\n"
    # 2 overlays + runtime configuration, row store, model config, commit, 2 adapters, 2 b12x files.
    assert f"{prestart.PASS} 10 checks passed" in proc.stderr
    assert fail_lines(proc.stderr) == []


def test_the_command_replaces_the_process(tree: Tree) -> None:
    """os.execvp, not a child: the engine keeps the container's PID (and its signals)."""
    cmd = [sys.executable, str(SCRIPT), *tree.args(), "--",
           sys.executable, "-c", "import os; print(os.getpid())"]
    env = {**os.environ, prestart.COMMIT_ENV: COMMIT}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as p:
        out, _ = p.communicate(timeout=60)
    assert p.returncode == 0
    assert int(out) == p.pid


def _digest_of(path: Path) -> str:
    return sha(path.read_bytes())


@pytest.mark.parametrize(("check", "rel"), [
    ("runtime-configuration", "kit:runtime/configuration.py"),
    ("build-product", "kit:adapter/librow_store.so"),
    ("model-config", "model"),
    ("overlay", f"target:{OVERLAYS[1]}"),
    ("adapter", f"kit:adapter/{ADAPTERS[1]}"),
    ("source", f"kit:{B12X[1]}"),
])
def test_each_check_failing_alone_names_its_file_and_both_digests(tree: Tree, check: str, rel: str) -> None:
    where, _, sub = rel.partition(":")
    path = tree.model_config if where == "model" else (tree.kit if where == "kit" else tree.target) / sub
    expected = _digest_of(path)
    path.write_bytes(path.read_bytes() + b"# drifted\n")
    proc = run(tree.args(), [sys.executable, "-c", "print(42)"])
    assert proc.returncode == prestart.EXIT_FAILED
    assert proc.stdout == ""  # the command never ran
    assert fail_lines(proc.stderr) == [
        f"{prestart.FAIL} {check} {path} expected {expected} actual {_digest_of(path)}"]
    assert f"{prestart.STOPPED} 1 of 10 checks failed" in proc.stderr


@pytest.mark.parametrize(("value", "shown"), [("f" * 40, "f" * 40), (None, "unset")])
def test_the_images_sglang_commit_is_checked(tree: Tree, value: str | None, shown: str) -> None:
    proc = run(tree.args(), [sys.executable, "-c", "print(42)"], env_commit=value)
    assert proc.returncode == prestart.EXIT_FAILED
    assert fail_lines(proc.stderr) == [
        f"{prestart.FAIL} sglang-commit env:{prestart.COMMIT_ENV} expected {COMMIT} actual {shown}"]


def test_every_mismatch_is_reported_not_only_the_first(tree: Tree) -> None:
    (tree.kit / "runtime/configuration.py").write_text("edited on the node\n")
    (tree.target / OVERLAYS[0]).unlink()
    for rel in B12X:
        (tree.kit / rel).write_text("stale\n")
    proc = run(tree.args(), [sys.executable, "-c", "print(42)"], env_commit=None)
    lines = fail_lines(proc.stderr)
    assert [ln.split()[2] for ln in lines] == [
        "runtime-configuration", "sglang-commit", "overlay", "source", "source"]
    assert f"{prestart.FAIL} overlay {tree.target / OVERLAYS[0]} expected" in lines[2]
    assert lines[2].endswith(" actual missing")
    assert f"{prestart.STOPPED} 5 of 10 checks failed" in proc.stderr


def test_a_missing_lock_or_record_is_named(tree: Tree) -> None:
    (tree.kit / "versions.lock.json").unlink()
    (tree.kit / "row-store-build.json").write_text("[]")
    proc = run(tree.args(), [sys.executable, "-c", "print(42)"])
    assert proc.returncode == prestart.EXIT_FAILED
    assert fail_lines(proc.stderr) == [
        f"{prestart.FAIL} lock {tree.kit / 'versions.lock.json'} expected present actual missing",
        f"{prestart.FAIL} build-record {tree.kit / 'row-store-build.json'} expected json-object actual list",
    ]


def test_a_kit_without_a_lock_gets_only_the_overlay_check(tree: Tree) -> None:
    (tree.kit / "runtime/configuration.py").write_text("not pinned without a lock\n")
    (tree.kit / "versions.lock.json").unlink()
    proc = run(tree.args(lock=False, build=False), [sys.executable, "-c", "print(42)"], env_commit=None)
    assert proc.returncode == 0, proc.stderr
    assert f"{prestart.PASS} 2 checks passed" in proc.stderr
    (tree.target / OVERLAYS[1]).write_text("stock\n")
    proc = run(tree.args(lock=False, build=False), [sys.executable, "-c", "print(42)"], env_commit=None)
    assert [ln.split()[2] for ln in fail_lines(proc.stderr)] == ["overlay"]


def test_nothing_to_start_is_a_usage_error(tree: Tree) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), *tree.args()], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == prestart.EXIT_USAGE
    assert "no command after --" in proc.stderr


def test_the_script_runs_alone_with_the_standard_library(tree: Tree, tmp_path: Path) -> None:
    """The role copies the one file into the container: it must run outside the package."""
    alone = tmp_path / "elsewhere" / "prestart.py"
    alone.parent.mkdir()
    alone.write_bytes(SCRIPT.read_bytes())
    argv = [sys.executable, "-I", str(alone), *tree.args(), "--", sys.executable, "-c", "print(7)"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": os.environ.get("PATH", ""), prestart.COMMIT_ENV: COMMIT})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "7\n"


def test_the_lab_kit_as_staged_passes_the_prestart_rendered_for_the_lab(tmp_path: Path) -> None:
    """End to end without the lab: the lab's synthetic kit (R4's paths and lock keys), built as
    `stage kit` builds it (nodeside.kitbuild: b12x extracted, the row store's compile standing in
    for g++), its overlays where the container binds them, the lab checkpoint's config.json; the
    pre-start as sparkctl renders it for the lab (container paths mapped into tmp) passes, and a
    changed runtime configuration is named."""
    from support.gates_fakes import container_site

    from sparkctl.nodeside import kitbuild
    from sparkctl.render import rank
    from sparkctl_lab import kit as labkit

    (tmp_path / "site").mkdir()
    cluster, _doc = container_site(tmp_path / "site")
    pk = cluster.profile.kit
    root, target = tmp_path / "kit", tmp_path / "sglang"
    for rel, data in labkit.files().items():
        write(root / rel, data)
    for rel in pk.overlays:
        write(target / rel, (root / pk.overlay_source / rel).read_bytes())

    def compiled(argv: list[str]) -> tuple[int, str]:  # g++ in the image: writes the product
        out = argv[argv.index("-o") + 1].replace(pk.mount, str(root))
        write(Path(out), b"\x7fELF compiled row store")
        return 0, ""

    steps = [s.as_fact() for s in pk.build]
    kitbuild.build(str(root), "a" * 40, steps, pk.mount, "engine", "sha256:" + "1" * 64, run=compiled)
    argv = rank.rank_argv(cluster, cluster.head)
    model_config = tmp_path / "models" / "config.json"
    write(model_config, labkit.MODEL_CONFIG)
    mapped = {pk.mount: str(root), pk.overlay_target: str(target),
              f"{argv[argv.index('--model-path') + 1]}/config.json": str(model_config)}
    rendered = rank.prestart_command(cluster, argv)
    assert rendered[:2] == ["python3", rank.CONTAINER_PRESTART] and rendered[-1] == "--"
    args = [mapped.get(a, a) for a in rendered[2:-1]]
    assert "--lock" in args and "--build-record" in args and "--source-manifest" in args
    proc = run(args, [sys.executable, "-c", "print(42)"], env_commit=labkit.SGLANG_COMMIT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "42\n"
    (root / labkit.RUNTIME_CONFIGURATION).write_text("# edited on the node\n")
    proc = run(args, [sys.executable, "-c", "print(42)"], env_commit=labkit.SGLANG_COMMIT)
    assert [ln.split()[2:4] for ln in fail_lines(proc.stderr)] == [
        ["runtime-configuration", str(root / labkit.RUNTIME_CONFIGURATION)]]


def test_the_rank_role_installs_this_file_where_the_container_binds_it(tmp_path: Path) -> None:
    """roles/spark_rank copies files/nodeside/prestart.py (this module) to ``rank_launch.prestart``,
    the host side of the container's read-only bind at CONTAINER_PRESTART."""
    import yaml
    from support.gates_fakes import container_site

    from sparkctl.render import rank

    role = Path(__file__).resolve().parents[2] / "roles" / "spark_rank"
    tasks = yaml.safe_load((role / "tasks" / "install.yml").read_text())
    copies = [t["ansible.builtin.copy"] for t in tasks if "ansible.builtin.copy" in t]
    task = next(c for c in copies if c.get("src") == "nodeside/prestart.py")
    assert (role / "files" / task["src"]).resolve() == SCRIPT.resolve()
    assert task["dest"] == "{{ spark_rank_launch.prestart }}" and task["mode"] == "0644"
    _cluster, doc = container_site(tmp_path)
    entry = doc["nodes"][1]
    assert entry["rank_launch"]["prestart"] == rank.PRESTART_SCRIPT
    bind = f"type=bind,src={rank.PRESTART_SCRIPT},dst={rank.CONTAINER_PRESTART},readonly"
    assert bind in entry["rank_launch"]["command"]
