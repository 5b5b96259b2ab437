"""The fast path of `stage` (sparkctl.stage.faststage): the node check run for real on this machine
(kit, image, checkpoint, Engram shards), the verdict on what nodes answer, and the image build's
provenance label."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import synth_checkpoint
from support.gates_fakes import KIT_VERSION
from support.stage_fakes import (
    EXPECTED,
    HEAD_ID,
    OTHER_ID,
    AnswerFleet,
    clean_stagecheck,
    kit_reference,
    stage_site,
)

from sparkctl.nodeside import kit as nodekit
from sparkctl.nodeside import ship
from sparkctl.serve import fastup
from sparkctl.stage import dsv41en1, faststage
from sparkctl.stage import image as stage_image
from sparkctl.stage import manifest as mf


def _run(script: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(["/bin/sh", "-s"], input=script, capture_output=True, text=True, timeout=120,
                          env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc


def _fake_docker(bin_dir: Path, labels: dict[str, str] | None) -> None:
    """``docker image inspect``: the ID and size for {{.Id}} {{.Size}}, the labels for {{json ...}}."""
    bin_dir.mkdir(exist_ok=True)
    docker = bin_dir / "docker"
    docker.write_text(
        "#!/bin/sh\n"
        'case "$4" in *Labels*) echo \'' + json.dumps(labels) + "' ;; "
        "*) echo '" + HEAD_ID + " 4096' ;; esac\n"
    )
    docker.chmod(0o755)


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A controller checkpoint, a node's staged copy with its manifest, and rank 1's packed shards."""
    root = tmp_path_factory.mktemp("stage")
    src = root / "controller"
    synth_checkpoint.write_checkpoint(src, engram_rows=(503, 499), filler_shards=1, filler_mib=0.05)
    node = root / "node-model"
    shutil.copytree(src, node, ignore=shutil.ignore_patterns(mf.MANIFEST_NAME))
    mf.save(str(node), mf.build(str(node)))
    engram = root / "node-engram"
    dsv41en1.pack_rank(str(node), str(engram), 1, 4, margin_bytes=0)
    built = mf.build(str(src))
    expected = {"files": [{k: e[k] for k in ("path", "size", "sha256")} for e in built["files"]]}
    return {"src": src, "node": node, "engram": engram, "expected": expected}


def _params(staged: dict[str, Any], node: Path | None = None) -> dict[str, Any]:
    model = str(node or staged["node"])
    return {"mode": "stagecheck",
            "weights": {"model_dir": model, "expected": staged["expected"]},
            "engram": {"model_dir": model, "engram_dir": str(staged["engram"]), "rank": 1, "tp": 4}}


def test_a_staged_node_answers_clean(staged: dict[str, Any]) -> None:
    out = _run(faststage.check_script(_params(staged)))
    assert out["weights"] == {"problems": [], "count": 0, "extra": []}
    assert out["engram"]["verified"] and out["engram"]["problems"] == []
    assert {f["name"] for f in out["engram"]["files"]} == {"engram-l1-r1of4.bin", "engram-l14-r1of4.bin"}


def test_a_touched_file_an_extra_file_and_a_missing_shard_are_each_named(
        staged: dict[str, Any], tmp_path: Path) -> None:
    node = tmp_path / "model"
    shutil.copytree(staged["node"], node)  # copytree keeps the mtimes the node's manifest recorded
    out = _run(faststage.check_script(_params(staged, node)))
    assert out["weights"]["problems"] == [] and out["engram"]["verified"]
    shard = next(node.glob("model-*.safetensors"))
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # same size, changed since
    (node / "leftover.safetensors").write_bytes(b"old")
    out = _run(faststage.check_script(_params(staged, node)))
    assert out["weights"]["problems"] == [
        f"{shard.name}: not confirmed by this node's manifest (changed since staging?)"]
    assert out["weights"]["extra"] == ["leftover.safetensors"]
    engram = tmp_path / "engram"
    shutil.copytree(staged["engram"], engram)
    (engram / "engram-l14-r1of4.bin").unlink()
    params = _params(staged, node)
    params["engram"]["engram_dir"] = str(engram)
    out = _run(faststage.check_script(params))
    assert not out["engram"]["verified"]
    assert any("engram-l14-r1of4.bin" in p for p in out["engram"]["problems"])


def test_the_kit_and_the_image_with_its_build_label(tmp_path: Path) -> None:
    store = tmp_path / "kit"
    (store / KIT_VERSION / "docker").mkdir(parents=True)
    (store / KIT_VERSION / "docker" / "Dockerfile").write_text("FROM sparkctl-lab/engine-base:1\n")
    (store / "current").symlink_to(KIT_VERSION)
    digest, files = nodekit.tree(str(store / KIT_VERSION))
    bin_dir = tmp_path / "bin"
    _fake_docker(bin_dir, {})
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    params = {"mode": "stagecheck",
              "kit": {"store": str(store), "version": KIT_VERSION,
                      "expected": nodekit.file_manifest(digest, files, {"source": "git"})},
              "image": {"ref": "sparkctl-lab/engine:kit", "want_id": None,
                        "build": {"context": str(store / "current"), "dockerfile": "docker/Dockerfile"}}}
    out = _run(faststage.check_script(params), env)
    assert out["kit"] == {"version": KIT_VERSION, "current": KIT_VERSION, "problems": [], "count": 0}
    assert out["image"]["found"]["id"] == HEAD_ID
    assert out["image"]["build"]["current"] is False and "no build label" in out["image"]["build"]["why"]

    old = os.environ["PATH"]
    os.environ["PATH"] = env["PATH"]
    try:
        key, why = stage_image.build_key("sparkctl-lab/engine:kit", str(store / "current"),
                                         "docker/Dockerfile")
    finally:
        os.environ["PATH"] = old
    assert key and key.startswith("v1:") and why == ""
    _fake_docker(bin_dir, {stage_image.BUILD_LABEL: key})
    assert _run(faststage.check_script(params), env)["image"]["build"] == {"current": True, "why": ""}
    (store / KIT_VERSION / "docker" / "Dockerfile").write_text("FROM sparkctl-lab/engine-base:2\n")
    out = _run(faststage.check_script(params), env)
    assert out["image"]["build"]["current"] is False and "label differs" in out["image"]["build"]["why"]
    assert out["kit"]["count"] == 1  # the kit's own check names the edited file too


def test_a_build_puts_the_key_on_the_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = tmp_path / "kit"
    (ctx / "docker").mkdir(parents=True)
    (ctx / "docker" / "Dockerfile").write_text("FROM base:1\nRUN true\n")
    calls: list[list[str]] = []

    def docker(argv: list[str], timeout: float | None = 120, **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        out = f"{HEAD_ID} 10" if argv[:2] == ["image", "inspect"] else ""
        return subprocess.CompletedProcess(argv, 0, out, "")

    def streamed(argv: list[str], timeout: float, progress: Any) -> tuple[int, list[str]]:
        calls.append(argv)  # the build itself streams its output (its steps are progress)
        return 0, []

    monkeypatch.setattr(stage_image, "_docker", docker)
    monkeypatch.setattr(stage_image, "_build_streamed", streamed)
    stage_image.build("eng:kit", str(ctx), "docker/Dockerfile", "spark-0")
    (build,) = [c for c in calls if c[0] == "build"]
    key, _ = stage_image.build_key("eng:kit", str(ctx), "docker/Dockerfile")
    assert build[build.index("--label") + 1] == f"{stage_image.BUILD_LABEL}={key}"
    (ctx / "docker" / "Dockerfile").write_text("FROM $BASE\n")
    assert stage_image.build_key("eng:kit", str(ctx), "docker/Dockerfile") == (
        None, "docker/Dockerfile names its base by a build argument ($BASE)")


@pytest.mark.parametrize("modules", [faststage.NODE_MODULES, fastup.NODE_MODULES], ids=["stage", "up"])
def test_every_shipped_module_finds_what_it_imports_shipped_before_it(modules: tuple[str, ...]) -> None:
    """A relative import (``from .x import``, ``from ..pkg import x``) names a module shipped earlier."""
    shipped: list[str] = []
    for name, source in ship.sources(modules):
        package = name.rpartition(".")[0]
        for line in source.splitlines():
            words = line.split()
            if len(words) >= 4 and words[0] == "from" and words[1].startswith(".") and words[2] == "import":
                dots = len(words[1]) - len(words[1].lstrip("."))
                parts = package.split(".") if package else []
                rest = words[1].lstrip(".")
                base = parts[:len(parts) - (dots - 1)] + ([rest] if rest else [])
                target = ".".join(base)
                names = [w.strip(",()") for w in words[3:] if w not in ("as",)]
                if target in shipped:
                    continue
                wanted = [f"{target}.{n}" if target else n for n in names[:1]]
                assert set(wanted) <= set(shipped), f"{name} imports {wanted}; shipped before it: {shipped}"
        shipped.append(name)


# --- the verdict ---------------------------------------------------------------------------------


def test_nodes_holding_everything_need_no_playbook(tmp_path: Path) -> None:
    cluster = stage_site(tmp_path)
    todo = faststage.parts(cluster, "all")
    assert todo == ["kit", "image", "weights", "engram"]
    reasons, nodes = faststage.judge(cluster, todo, clean_stagecheck(cluster, EXPECTED), kit_reference(),
                                     EXPECTED)
    assert reasons == []
    assert nodes["spark-2"]["weights"] == {"present": True, "verified": True, "files": 1, "bytes": 10,
                                           "problems": []}
    assert nodes["spark-0"]["kit"]["verified"]
    assert nodes["spark-0"]["image"] == {"id": HEAD_ID, "bytes_moved": 0}


def test_stage_image_also_checks_the_kits_build_products(tmp_path: Path) -> None:
    """`stage image` builds the kit's products in the image it stages: its fast path checks them, so
    products left pending by `stage kit` (no image then) send it to the playbook that builds them."""
    cluster = stage_site(tmp_path)
    assert faststage.kit_build_steps(cluster)  # the lab profile declares R4's build steps
    assert faststage.parts(cluster, "image") == ["kit", "image"]
    no_build = cluster.model_copy(update={"profile": cluster.profile.model_copy(
        update={"kit": cluster.profile.kit.model_copy(update={"build": []})})})
    assert faststage.parts(no_build, "image") == ["image"]


def _set(ans: dict[str, Any], node: str, path: list[str], value: Any) -> None:
    here = ans[node]
    for key in path[:-1]:
        here = here[key]
    here[path[-1]] = value


@pytest.mark.parametrize("node,path,value,said", [
    ("spark-2", ["kit", "current"], "b" * 40, f"spark-2: the kit's current points at {'b' * 40}"),
    ("spark-1", ["kit", "problems"], [{"path": "patches/x.py", "problem": "content differs"}],
     "spark-1: kit " + KIT_VERSION + " is not staged as configured: patches/x.py"),
    ("spark-3", ["image", "found", "id"], OTHER_ID,
     f"spark-3: the image under sparkctl-lab/engine:kit is {OTHER_ID}"),
    ("spark-0", ["image", "build"], {"current": False, "why": "its build label differs"},
     "spark-0: its build label differs"),
    ("spark-1", ["weights", "problems"], ["config.json: missing"],
     "spark-1: checkpoint: config.json: missing"),
    ("spark-0", ["weights", "extra"], ["old.safetensors"], "spark-0: the checkpoint directory holds files"),
    ("spark-2", ["engram", "verified"], False, "spark-2: Engram shards:"),
    ("spark-3", ["engram"], {"error": "boom"}, "spark-3: the Engram shards could not be read (boom)"),
])
def test_each_difference_is_named(tmp_path: Path, node: str, path: list[str], value: Any, said: str) -> None:
    cluster = stage_site(tmp_path)
    ans = clean_stagecheck(cluster, EXPECTED)
    _set(ans, node, path, value)
    reasons, _ = faststage.judge(cluster, faststage.parts(cluster, "all"), ans, kit_reference(), EXPECTED)
    assert len(reasons) == 1 and reasons[0].startswith(said), reasons


def test_an_extra_file_on_a_worker_is_not_a_reason_as_the_playbook_leaves_it(tmp_path: Path) -> None:
    cluster = stage_site(tmp_path)
    ans = clean_stagecheck(cluster, EXPECTED)
    _set(ans, "spark-1", ["weights", "extra"], ["old.safetensors"])
    assert faststage.judge(cluster, faststage.parts(cluster, "all"), ans, kit_reference(), EXPECTED)[0] == []


def test_the_pin_decides_and_an_unpinned_pull_is_the_playbooks(tmp_path: Path) -> None:
    pinned = stage_site(tmp_path / "a", image_id=OTHER_ID, source="pull")
    ans = clean_stagecheck(pinned, EXPECTED)
    reasons, _ = faststage.judge(pinned, ["image"], ans, None, None)
    assert len(reasons) == 4 and all(f"not the pinned image {OTHER_ID}" in r for r in reasons)
    unpinned = stage_site(tmp_path / "b", source="pull")
    reasons, _ = faststage.judge(unpinned, ["image"], clean_stagecheck(unpinned, EXPECTED), None, None)
    assert reasons == ["the image is not pinned (sparkctl_runtime.image_id) and comes by pull: "
                       "the playbook consults its source"]


def test_check_builds_the_controller_manifest_and_asks_every_node_once(tmp_path: Path) -> None:
    cluster = stage_site(tmp_path)
    synth_checkpoint.write_checkpoint(cluster.checkpoint.path, engram_rows=(53, 49), filler_shards=1,
                                      filler_mib=0.01)
    ans = clean_stagecheck(cluster, EXPECTED)
    fleet = AnswerFleet(ans)
    got = faststage.check(cluster, "all", fleet, kit_reference())
    assert got.ok and got.as_dict()["path"] == "fast"
    assert set(fleet.scripts) == {n.name for n in cluster.nodes}
    head = fleet.scripts["spark-0"]
    assert '\\"build\\"' in head and '\\"build\\"' not in fleet.scripts["spark-1"]
    assert "config.json" in head and "SPARKCTL_STAGECHECK_EOF" in head
    ans["spark-2"] = "connection refused"
    got = faststage.check(cluster, "all", AnswerFleet(ans), kit_reference())
    assert got.reasons == ["spark-2: unreachable: connection refused"]


def test_a_source_only_the_head_can_read_asks_no_node(tmp_path: Path) -> None:
    cluster = stage_site(tmp_path)
    ck = cluster.checkpoint.model_copy(update={"location": "head"})
    cluster = cluster.model_copy(update={"checkpoint": ck})
    fleet = AnswerFleet({})
    got = faststage.check(cluster, "weights", fleet, None)
    assert got.reasons == [
        "the checkpoint comes from a directory on the head: the playbook reads its source there"]
    assert fleet.scripts == {}
    got = faststage.check(stage_site(tmp_path / "b"), "kit", fleet, "the kit's commit 123 is not fetched")
    assert got.reasons == ["kit: the kit's commit 123 is not fetched"] and fleet.scripts == {}
