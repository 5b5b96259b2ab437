"""The spark_kit build modules run through Ansible itself (AnsiballZ packing nodeside/kitbuild.py):
the build in the engine image with a stand-in docker, nothing changed on a re-run, check mode, the
products spared by the head's prune and checked by the verification, and the comparison across
nodes naming the odd node."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.modrun import LOCAL_RUN_ENV, REPO, needs_ansible, run_module

from sparkctl.nodeside import kit as nk
from sparkctl.nodeside import kitbuild

pytestmark = needs_ansible

VERSION = "c" * 40
MOUNT = "/opt/sglang4"
IMAGE = "engine:pinned"
ARGV = ["g++", "-O2", "-shared", "-fPIC", f"{MOUNT}/adapter/row_store.cpp", "-o",
        f"{MOUNT}/adapter/librow_store.so"]
STEPS = [{"compile": {"argv": ARGV, "product": "adapter/librow_store.so",
                      "record": {"path": "row-store-build.json", "key": "row_store_library_sha256"}}}]

# `docker image inspect --format {{.Id}} REF` prints the ID in $IMAGE_ID_FILE; `docker run … --mount
# type=bind,src=S,dst=D … -o D/<rel>` writes S/<rel> naming the image ID; every run is logged.
DOCKER = r"""#!/usr/bin/env python3
import os, sys
a = sys.argv[1:]
image_id = open(os.environ["IMAGE_ID_FILE"]).read().strip()
if a[:2] == ["image", "inspect"]:
    print(image_id)
    sys.exit(0)
with open(os.environ["DOCKER_LOG"], "a") as log:
    log.write(" ".join(a) + "\n")
src, dst = [kv.split("=", 1)[1] for kv in a[a.index("--mount") + 1].split(",")][1:3]
out = a[a.index("-o") + 1]
with open(os.path.join(src, os.path.relpath(out, dst)), "w") as f:
    f.write("ELF built in " + image_id + "\n")
"""


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Any]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(DOCKER)
    (bin_dir / "docker").chmod(0o755)
    id_file = tmp_path / "image-id"
    id_file.write_text("sha256:" + "a" * 64)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "IMAGE_ID_FILE": str(id_file),
           "DOCKER_LOG": str(tmp_path / "docker.log")}
    store = tmp_path / "store"
    root = store / VERSION
    (root / "adapter").mkdir(parents=True)
    (root / "adapter" / "row_store.cpp").write_text("int f() { return 1; }\n")
    digest, files = nk.tree(str(root))
    return {"env": env, "store": store, "root": root, "id_file": id_file, "log": tmp_path / "docker.log",
            "expected": nk.file_manifest(digest, files, {"source": "git"})}


def _module(name: str, args: dict[str, Any], node: dict[str, Any],
            check: bool = False) -> tuple[bool, dict[str, Any]]:
    return run_module("spark_kit", name, args, check, env=node["env"])


def _build_args(node: dict[str, Any]) -> dict[str, Any]:
    return {"node": "spark-1", "store": str(node["store"]), "version": VERSION, "steps": STEPS,
            "mount": MOUNT, "image": IMAGE, "expected": node["expected"]}


def _runs(node: dict[str, Any]) -> int:
    return len(node["log"].read_text().splitlines()) if node["log"].exists() else 0


def test_build_then_nothing_changed_then_a_new_image_rebuilds(node: dict[str, Any]) -> None:
    failed, res = _module("spark_kit_build", _build_args(node), node, check=True)
    assert not failed and res["changed"] and res["would_build"] and _runs(node) == 0
    failed, res = _module("spark_kit_build", _build_args(node), node)
    assert not failed and res["changed"] and res["built"] and _runs(node) == 1
    assert "--network none" in node["log"].read_text()
    lib = nk.file_sha256(str(node["root"] / "adapter" / "librow_store.so"))
    assert res["products"]["adapter/librow_store.so"] == lib
    assert json.loads((node["root"] / "row-store-build.json").read_text()) == {
        "row_store_library_sha256": lib, "image": "sha256:" + "a" * 64}
    failed, res = _module("spark_kit_build", _build_args(node), node)
    assert not failed and res["changed"] is False and _runs(node) == 1
    node["id_file"].write_text("sha256:" + "b" * 64)
    failed, res = _module("spark_kit_build", _build_args(node), node)
    assert not failed and res["changed"] and _runs(node) == 2
    assert res["record"]["image_id"] == "sha256:" + "b" * 64


def test_without_the_engine_image_the_build_is_pending_only_when_allowed(node: dict[str, Any]) -> None:
    """`stage kit` before `stage image`: a node without the image reports its build pending (the
    image stage builds it) rather than failing; anywhere else it is a failure naming the node."""
    node["id_file"].write_text("")  # `docker image inspect` finds no image
    failed, res = _module("spark_kit_build", _build_args(node), node)
    assert failed and "spark-1: the engine image engine:pinned is not on this node" in res["msg"]
    failed, res = _module("spark_kit_build", {**_build_args(node), "pending_ok": True}, node)
    assert not failed and res["pending"] is True and res["changed"] is False and res["products"] == {}
    assert "sparkctl stage image" in res["msg"] and _runs(node) == 0


def test_products_survive_the_prune_and_are_verified_against_the_record(node: dict[str, Any]) -> None:
    assert not _module("spark_kit_build", _build_args(node), node)[0]
    store_args = {"store": str(node["store"]), "version": VERSION, "expected": node["expected"],
                  "prune": True, "build": STEPS}
    failed, res = _module("spark_kit_store", store_args, node)
    assert not failed and res["foreign"] == [] and res["changed"] is False
    verify = {"node": "spark-1", "store": str(node["store"]), "version": VERSION,
              "expected": node["expected"], "build": STEPS, "products": True, "image": IMAGE}
    failed, res = _module("spark_kit_verify", verify, node)
    assert not failed and res["kit"]["verified"]
    lib_path = node["root"] / "adapter" / "librow_store.so"
    lib = nk.file_sha256(str(lib_path))
    lib_path.write_text("altered\n")
    failed, res = _module("spark_kit_verify", verify, node)
    assert failed and res["msg"] == (
        f"spark-1: kit {VERSION} fails verification: adapter/librow_store.so: build product differs from "
        f"the build record (expected {lib}, actual {nk.file_sha256(str(lib_path))})")
    # Rebuilt, then the node's image changes: the record names another image.
    lib_path.unlink()
    _module("spark_kit_build", _build_args(node), node)
    node["id_file"].write_text("sha256:" + "b" * 64)
    failed, res = _module("spark_kit_verify", verify, node)
    assert failed and f"{kitbuild.RECORD}: built in another engine image" in res["msg"]


def test_compare_names_the_odd_node_and_the_product(node: dict[str, Any]) -> None:
    same = {"adapter/librow_store.so": "1" * 64}
    odd = {"adapter/librow_store.so": "9" * 64}
    reports = {"spark-0": same, "spark-1": same, "spark-2": odd, "spark-3": same}
    failed, res = _module("spark_kit_build", {"action": "compare", "reports": reports}, node)
    assert failed and res["msg"] == (
        "the kit's build products differ across nodes (odd: spark-2): spark-2: adapter/librow_store.so: "
        f"build product differs across nodes (expected {'1' * 64}, actual {'9' * 64})")
    reports = {"spark-0": same, "spark-1": same}
    failed, res = _module("spark_kit_build", {"action": "compare", "reports": reports}, node)
    assert not failed and res["changed"] is False


# --- the role's tasks on two local "nodes" --------------------------------------------------------


PLAY = """
- hosts: sparks
  gather_facts: false
  tasks:
    - name: The kit's reference and verification, as the kit play leaves them
      ansible.builtin.set_fact:
        spark_kit_src: {version: "VERSION", manifest: {files: []}}
        spark_kit_facts: {failed: false}
    - name: Build, compare, switch
      ansible.builtin.include_role:
        name: spark_kit
        tasks_from: build_deferred
"""


def _play(tmp_path: Path, node: dict[str, Any], stores: dict[str, Path],
          **more: Any) -> subprocess.CompletedProcess[str]:
    inv = tmp_path / "hosts.yml"
    hosts = {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    "spark_kit_store": str(store)} for name, store in stores.items()}
    inv.write_text(json.dumps({"sparks": {"hosts": hosts, "vars": {
        "spark_kit_build": STEPS, "spark_kit_mount": MOUNT, "spark_kit_build_image": IMAGE,
        "spark_kit_config": {}, **more}}}))
    play = tmp_path / "play.yml"
    play.write_text(PLAY.replace("VERSION", VERSION))
    env = {**os.environ, **node["env"], **LOCAL_RUN_ENV, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"}
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(play)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)


def _recap(out: str) -> dict[str, str]:
    return {line.split()[0]: line for line in out.splitlines() if " : ok=" in line}


def test_the_role_builds_on_every_node_then_a_rerun_changes_nothing(tmp_path: Path,
                                                                     node: dict[str, Any]) -> None:
    second = tmp_path / "store-b"
    shutil.copytree(node["store"], second, symlinks=True)
    stores = {"spark-0": node["store"], "spark-1": second}
    proc = _play(tmp_path, node, stores)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _runs(node) == 2
    for store in stores.values():
        assert os.readlink(store / "current") == VERSION
        assert (store / VERSION / "adapter" / "librow_store.so").is_file()
    proc = _play(tmp_path, node, stores)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _runs(node) == 2
    assert all("changed=0" in line for line in _recap(proc.stdout).values()), proc.stdout


def test_the_role_switches_current_with_the_build_pending_where_the_image_is_not_there_yet(
        tmp_path: Path, node: dict[str, Any]) -> None:
    second = tmp_path / "store-b"
    shutil.copytree(node["store"], second, symlinks=True)
    stores = {"spark-0": node["store"], "spark-1": second}
    node["id_file"].write_text("")
    proc = _play(tmp_path, node, stores)
    assert proc.returncode != 0 and "is not on this node" in proc.stdout, proc.stdout
    assert not any((store / "current").exists() for store in stores.values())
    proc = _play(tmp_path, node, stores, spark_kit_build_pending_ok=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _runs(node) == 0
    for store in stores.values():
        assert os.readlink(store / "current") == VERSION
        assert not (store / VERSION / "adapter" / "librow_store.so").exists()


def test_the_role_names_the_odd_node_and_leaves_current(tmp_path: Path, node: dict[str, Any]) -> None:
    stores = {"spark-0": node["store"], "spark-1": tmp_path / "store-b", "spark-2": tmp_path / "store-c"}
    for store in list(stores.values())[1:]:
        shutil.copytree(node["store"], store, symlinks=True)
    # spark-2's compiler makes another library (its build is recorded consistently, so only the
    # comparison across nodes finds it).
    odd = stores["spark-2"] / VERSION

    def other_compiler(argv: list[str]) -> tuple[int, str]:
        (odd / "adapter" / "librow_store.so").write_text("another compiler\n")
        return 0, ""

    kitbuild.build(str(odd), VERSION, STEPS, MOUNT, IMAGE, "sha256:" + "a" * 64, run=other_compiler)
    proc = _play(tmp_path, node, stores)
    assert proc.returncode != 0
    assert "the kit's build products differ across nodes (odd: spark-2): spark-2: adapter/librow_store.so" \
        in proc.stdout, proc.stdout
    assert not any((store / "current").exists() for store in stores.values())
