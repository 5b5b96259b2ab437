"""The serving kit's build steps (profile ``kit.build``, nodeside/kitbuild.py): the schema, the
checked extract, the compile in the engine image and its records, the skip when nothing changed,
the products left out of the tree verification and checked against the record instead, the
comparison across nodes, and `up`'s fast path refusing a missing or changed product."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import subprocess
import tarfile
import types
from pathlib import Path
from typing import Any

import pytest
from support import gates_fakes as fakes
from support.gates_fakes import KIT_VERSION, container_site
from support.runner import NODES, FakeRunner

from sparkctl.ansible import results
from sparkctl.ansible.plan import Plan
from sparkctl.errors import InputError
from sparkctl.nodeside import kit as nk
from sparkctl.nodeside import kitbuild
from sparkctl.profiles import load_profile
from sparkctl.render import kit as render_kit
from sparkctl.render.rank import run_image
from sparkctl.serve import fastup
from sparkctl.stage.summaries import node_summaries

MOUNT = "/opt/sglang4"
IMAGE = "engine:pinned"
ID_A = "sha256:" + "a" * 64
ID_B = "sha256:" + "b" * 64
ARGV = ["g++", "-O2", "-shared", "-fPIC", f"{MOUNT}/adapter/row_store.cpp", "-o",
        f"{MOUNT}/adapter/librow_store.so"]
STEPS: list[dict[str, Any]] = [
    {"extract": {"archive": "vendor/b12x-source.tar.gz", "manifest": "vendor/b12x-source-manifest.json",
                 "into": "b12x"}},
    {"compile": {"argv": ARGV, "product": "adapter/librow_store.so",
                 "record": {"path": "row-store-build.json", "key": "row_store_library_sha256"}}},
]
BUNDLE = {"b12x/__init__.py": b"VERSION = 1\n", "b12x/ops/gemm.py": b"def gemm(): pass\n"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tar(path: Path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def write_kit(root: Path, members: dict[str, bytes] | None = None,
              manifest: dict[str, str] | None = None) -> dict[str, Any]:
    """A kit holding R4's build inputs at R4's paths; its file manifest."""
    members = BUNDLE if members is None else members
    _tar(root / "vendor" / "b12x-source.tar.gz", members)
    doc = {n: _sha(d) for n, d in BUNDLE.items()} if manifest is None else manifest
    (root / "vendor" / "b12x-source-manifest.json").write_text(json.dumps(doc))
    (root / "adapter").mkdir(parents=True, exist_ok=True)
    (root / "adapter" / "row_store.cpp").write_text("extern \"C\" int row_store() { return 1; }\n")
    digest, files = nk.tree(str(root))
    return nk.file_manifest(digest, files, {"source": "git"})


class FakeCompiler:
    """`docker run … --entrypoint g++ IMAGE … -o <mount>/<product>`: writes the product where the
    bind mount puts it, its bytes naming the image (another image, another library)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> tuple[int, str]:
        self.calls.append(argv)
        src = next(a for a in argv if a.startswith("type=bind,")).split(",")[1].removeprefix("src=")
        image = argv[argv.index("--entrypoint") + 2]
        out = argv[argv.index("-o") + 1]
        Path(src, os.path.relpath(out, MOUNT)).write_bytes(f"ELF built in {image}\n".encode())
        return 0, ""


# --- schema ---------------------------------------------------------------------------------------


def test_r4_and_the_lab_declare_r4s_two_steps() -> None:
    for name in ("r4-nvme", "lab"):
        kit = load_profile(name).kit
        assert kit is not None
        assert [s.as_fact() for s in kit.build] == [
            {"extract": {"archive": "vendor/b12x-source.tar.gz",
                         "manifest": "vendor/b12x-source-manifest.json", "into": "b12x"}},
            {"compile": {"argv": ["g++", "-O2", "-Wall", "-Wextra", "-Werror", "-std=c++17", "-shared",
                                  "-fPIC", "-pthread", "/opt/sglang4/adapter/row_store.cpp", "-o",
                                  "/opt/sglang4/adapter/librow_store.so"],
                         "product": "adapter/librow_store.so",
                         "record": {"path": "row-store-build.json", "key": "row_store_library_sha256"}}}]


@pytest.mark.parametrize(("step", "field"), [
    ({"extract": {"archive": "../x.tgz", "manifest": "m.json", "into": "b12x"}},
     "kit.build.0.extract.archive"),
    ({"extract": {"archive": "x.tgz", "manifest": "m.json"}}, "kit.build.0.extract.into"),
    ({"compile": {"argv": [], "product": "a.so"}}, "kit.build.0.compile.argv"),
    ({"compile": {"argv": ARGV, "product": "adapter/other.so"}}, "kit.build.0.compile.product"),
    ({"compile": {"argv": ARGV, "product": "adapter/librow_store.so", "record": {"path": "/abs"}}},
     "kit.build.0.compile.record"),
    ({}, "kit.build.0"),
    ({"extract": {"archive": "x.tgz", "manifest": "m.json", "into": "b"},
      "compile": {"argv": ARGV, "product": "p"}},
     "kit.build.0"),
    ({"unpack": {}}, "kit.build.0.unpack"),
])
def test_a_bad_step_is_refused_naming_its_field(step: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as exc:
        load_profile("r4-nvme", {"kit": {"build": [step]}})
    # A field's own check names it in the path; the kit's cross-field check names it in the message.
    named = (f"sparkctl_profile_overrides.{field}",
             f"sparkctl_profile_overrides.kit: {field.removeprefix('kit.')}:")
    assert any(d.startswith(named) for d in exc.value.details), exc.value.details


def test_the_steps_are_rendered_for_the_roles_and_none_without_them(tmp_path: Path) -> None:
    cluster, _doc = container_site(tmp_path)
    facts = render_kit.kit_facts(cluster)
    assert facts is not None and facts["build"] == render_kit.build_steps(cluster) != []
    kit = cluster.profile.kit.model_copy(update={"build": []})
    bare = cluster.model_copy(update={"profile": cluster.profile.model_copy(update={"kit": kit})})
    facts = render_kit.kit_facts(bare)
    assert facts is not None and facts["build"] == []


# --- extract --------------------------------------------------------------------------------------


def _extract(root: Path) -> dict[str, str]:
    return kitbuild.extract(str(root), "vendor/b12x-source.tar.gz", "vendor/b12x-source-manifest.json",
                            "b12x", str(root / kitbuild.WORK))


def test_extract_checks_every_member(tmp_path: Path) -> None:
    write_kit(tmp_path)
    got = _extract(tmp_path)
    assert got == {"b12x/" + n: _sha(d) for n, d in BUNDLE.items()}
    written = tmp_path / kitbuild.WORK / "b12x" / "b12x" / "ops" / "gemm.py"
    assert written.read_bytes() == BUNDLE["b12x/ops/gemm.py"]


def test_extract_refuses_a_member_the_manifest_does_not_list(tmp_path: Path) -> None:
    write_kit(tmp_path, members={**BUNDLE, "b12x/extra.py": b"x\n"})
    with pytest.raises(kitbuild.BuildError,
                       match=r"member\(s\) not in vendor/b12x-source-manifest.json: b12x/extra.py"):
        _extract(tmp_path)


def test_extract_refuses_a_member_the_archive_lacks(tmp_path: Path) -> None:
    write_kit(tmp_path, members={"b12x/__init__.py": BUNDLE["b12x/__init__.py"]})
    with pytest.raises(kitbuild.BuildError, match=r"lacks member\(s\) .* b12x/ops/gemm.py"):
        _extract(tmp_path)


def test_extract_refuses_a_hash_mismatch(tmp_path: Path) -> None:
    write_kit(tmp_path, members={**BUNDLE, "b12x/ops/gemm.py": b"def gemm(): return 0\n"})
    want = _sha(BUNDLE["b12x/ops/gemm.py"])
    with pytest.raises(kitbuild.BuildError, match=r"member b12x/ops/gemm.py hashes [0-9a-f]{64}, "
                                                  r"vendor/b12x-source-manifest.json says " + want):
        _extract(tmp_path)


@pytest.mark.parametrize("name", ["../escape.py", "/etc/escape.py", "b12x/../../escape.py"])
def test_extract_refuses_path_traversal(tmp_path: Path, name: str) -> None:
    write_kit(tmp_path, members={name: b"x\n"}, manifest={"b12x/a.py": "0" * 64})
    with pytest.raises(kitbuild.BuildError, match="path traversal"):
        _extract(tmp_path)
    assert not (tmp_path.parent / "escape.py").exists()


def test_extract_refuses_a_link_member(tmp_path: Path) -> None:
    write_kit(tmp_path)
    with tarfile.open(tmp_path / "vendor" / "b12x-source.tar.gz", "w:gz") as tf:
        info = tarfile.TarInfo("b12x/link")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(info)
    (tmp_path / "vendor" / "b12x-source-manifest.json").write_text(json.dumps({"b12x/link": "0" * 64}))
    with pytest.raises(kitbuild.BuildError, match="'b12x/link' is not a regular file"):
        _extract(tmp_path)


# --- build, record, skip --------------------------------------------------------------------------


def test_a_build_writes_both_records_and_a_rerun_builds_nothing(tmp_path: Path) -> None:
    root = tmp_path / "kit" / KIT_VERSION
    expected = write_kit(root)
    cc = FakeCompiler()
    changed, rec = kitbuild.ensure(str(root), KIT_VERSION, STEPS, MOUNT, IMAGE, ID_A, expected, run=cc)
    assert changed and len(cc.calls) == 1
    assert cc.calls[0][:10] == ["docker", "run", "--rm", "--network", "none", "--pull", "never", "--mount",
                                f"type=bind,src={root},dst={MOUNT}", "--entrypoint"]
    assert cc.calls[0][10:] == ["g++", IMAGE, *ARGV[1:]]
    lib = _sha((root / "adapter" / "librow_store.so").read_bytes())
    publisher = json.loads((root / "row-store-build.json").read_text())
    assert publisher == {"row_store_library_sha256": lib, "image": ID_A}
    assert rec is not None and rec == json.loads((root / kitbuild.RECORD).read_text())
    assert rec["version"] == KIT_VERSION and rec["image_id"] == ID_A
    assert rec["steps_sha256"] == kitbuild.steps_digest(STEPS)
    assert rec["products"]["adapter/librow_store.so"] == lib
    assert rec["products"]["b12x/b12x/ops/gemm.py"] == _sha(BUNDLE["b12x/ops/gemm.py"])
    assert set(rec["products"]) == {"adapter/librow_store.so", "row-store-build.json",
                                    "b12x/b12x/__init__.py", "b12x/b12x/ops/gemm.py"}
    # Nothing changed: nothing runs, nothing is written.
    mtime = (root / kitbuild.RECORD).stat().st_mtime_ns
    changed, again = kitbuild.ensure(str(root), KIT_VERSION, STEPS, MOUNT, IMAGE, ID_A, expected, run=cc)
    assert not changed and again == rec and len(cc.calls) == 1
    assert (root / kitbuild.RECORD).stat().st_mtime_ns == mtime
    # The products are no strays of the tree, and match their record.
    assert nk.verify_tree(str(root), expected, kitbuild.product_filter(STEPS)) == []
    assert kitbuild.verify(str(root), KIT_VERSION, STEPS, ID_A) == []
    strays = {p["path"] for p in nk.verify_tree(str(root), expected)}
    assert "adapter/librow_store.so" in strays  # without the filter they would be


@pytest.mark.parametrize("change", ["image", "steps", "version", "product", "extra"])
def test_a_changed_image_step_version_or_product_rebuilds(tmp_path: Path, change: str) -> None:
    root = tmp_path / "kit" / KIT_VERSION
    expected = write_kit(root)
    cc = FakeCompiler()
    kitbuild.ensure(str(root), KIT_VERSION, STEPS, MOUNT, IMAGE, ID_A, expected, run=cc)
    steps, image_id, version = STEPS, ID_A, KIT_VERSION
    if change == "image":
        image_id = ID_B
    elif change == "steps":
        steps = copy.deepcopy(STEPS)
        steps[1]["compile"]["argv"].insert(1, "-O3")
    elif change == "version":
        version = "f" * 40
    elif change == "product":
        (root / "adapter" / "librow_store.so").write_bytes(b"tampered\n")
    else:
        (root / "b12x" / "stray.py").write_text("x\n")
    assert not kitbuild.current(str(root), version, image_id, steps)
    assert kitbuild.ensure(str(root), version, steps, MOUNT, IMAGE, image_id, expected, run=cc,
                           check_mode=True) == (True, None)
    assert len(cc.calls) == 1  # check mode built nothing
    changed, rec = kitbuild.ensure(str(root), version, steps, MOUNT, IMAGE, image_id, expected, run=cc)
    assert changed and len(cc.calls) == 2 and rec is not None and rec["image_id"] == image_id
    assert not (root / "b12x" / "stray.py").exists()
    assert kitbuild.verify(str(root), version, steps, image_id) == []


def test_a_failed_compile_names_the_product_and_leaves_no_record(tmp_path: Path) -> None:
    root = tmp_path / "kit" / KIT_VERSION
    expected = write_kit(root)
    with pytest.raises(kitbuild.BuildError, match=r"adapter/librow_store.so: the compile in engine:pinned "
                                                  r"failed \(exit 1\): row_store.cpp:1: error"):
        kitbuild.build(str(root), KIT_VERSION, STEPS, MOUNT, IMAGE, ID_A, expected,
                       run=lambda argv: (1, "row_store.cpp:1: error: expected ';'\n"))
    assert not (root / kitbuild.RECORD).exists() and not (root / kitbuild.WORK).exists()


def test_a_step_may_not_overwrite_a_kit_file(tmp_path: Path) -> None:
    root = tmp_path / "kit" / KIT_VERSION
    (root / "b12x").mkdir(parents=True)
    (root / "b12x" / "shipped.py").write_text("x\n")
    expected = write_kit(root)
    with pytest.raises(kitbuild.BuildError, match=r"would overwrite the kit's own file.*b12x/shipped\.py"):
        kitbuild.build(str(root), KIT_VERSION, STEPS, MOUNT, IMAGE, ID_A, expected, run=FakeCompiler())


def test_verify_names_a_missing_or_changed_product(tmp_path: Path) -> None:
    root = tmp_path / "kit" / KIT_VERSION
    expected = write_kit(root)
    rec = kitbuild.build(str(root), KIT_VERSION, STEPS, MOUNT, IMAGE, ID_A, expected, run=FakeCompiler())
    lib = rec["products"]["adapter/librow_store.so"]
    (root / "adapter" / "librow_store.so").write_bytes(b"tampered\n")
    (root / "b12x" / "b12x" / "ops" / "gemm.py").unlink()
    got = kitbuild.verify(str(root), KIT_VERSION, STEPS, ID_A)
    assert nk.problem("adapter/librow_store.so", "build product differs from the build record", lib,
                      _sha(b"tampered\n")) in got
    assert nk.problem("b12x/b12x/ops/gemm.py", "build product missing",
                      _sha(BUNDLE["b12x/ops/gemm.py"]), None) in got
    assert [p["problem"] for p in kitbuild.verify(str(root), KIT_VERSION, STEPS, ID_B)
            if p["path"] == kitbuild.RECORD] == ["built in another engine image (run sparkctl stage kit)"]
    (root / kitbuild.RECORD).unlink()
    assert kitbuild.verify(str(root), KIT_VERSION, STEPS)[0]["problem"].startswith("build record missing")


# --- across nodes ---------------------------------------------------------------------------------


def test_the_odd_node_is_named_with_the_product() -> None:
    same = {"adapter/librow_store.so": "1" * 64, "row-store-build.json": "2" * 64}
    odd = dict(same, **{"adapter/librow_store.so": "9" * 64})
    got = kitbuild.odd_nodes({"spark-0": same, "spark-1": same, "spark-2": odd, "spark-3": same})
    assert got == [("spark-2", nk.problem("adapter/librow_store.so", "build product differs across nodes",
                                          "1" * 64, "9" * 64))]
    assert kitbuild.odd_nodes({"a": same, "b": same}) == []
    missing = {"row-store-build.json": "2" * 64}
    assert kitbuild.odd_nodes({"a": same, "b": missing, "c": same}) == [
        ("b", nk.problem("adapter/librow_store.so", "build product differs across nodes", "1" * 64, None))]
    # A tie: the first node (rank 0) is the reference.
    assert [n for n, _ in kitbuild.odd_nodes({"a": same, "b": odd})] == ["b"]


# --- up's fast path -------------------------------------------------------------------------------


def _run(script: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(["/bin/sh", "-s"], input=script, capture_output=True, text=True, timeout=60,
                          env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.splitlines()[-1]))


def test_up_fast_path_refuses_a_missing_or_changed_product(tmp_path: Path) -> None:
    cluster, doc = container_site(tmp_path)
    steps = render_kit.build_steps(cluster)
    mount = cluster.profile.kit.mount
    store = tmp_path / "store"
    root = store / KIT_VERSION
    expected = write_kit(root)
    (store / "current").symlink_to(KIT_VERSION)

    def compiler(argv: list[str]) -> tuple[int, str]:
        out = argv[argv.index("-o") + 1]
        Path(str(root), os.path.relpath(out, mount)).write_bytes(b"ELF\n")
        return 0, ""

    kitbuild.build(str(root), KIT_VERSION, steps, mount, run_image(cluster), ID_A, expected, run=compiler)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"  # `docker image inspect --format FORMAT REF`
    docker.write_text(f"#!/bin/sh\nif [ \"$4\" = '{{{{.Id}}}}' ]; then echo '{ID_A}'\n"
                      f"else echo '{ID_A} 4096'; fi\n")
    docker.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    entry = doc["nodes"][0]
    params = fastup.check_params(cluster, entry, fastup.KitReference(str(store), KIT_VERSION, expected))
    assert params["kit"]["build_steps"] == steps and params["kit"]["build_image"] == run_image(cluster)
    params["files"], params["dirs"] = [], []
    out = _run(fastup.check_script(params), env)
    assert out["kit"]["problems"] == []
    assert out["kit"]["products"]["adapter/librow_store.so"] == _sha(b"ELF\n")

    lib = root / "adapter" / "librow_store.so"
    lib.write_bytes(b"other\n")
    out = _run(fastup.check_script(params), env)
    assert [nk.describe(p) for p in out["kit"]["problems"]] == [
        f"adapter/librow_store.so: build product differs from the build record "
        f"(expected {_sha(b'ELF' + bytes([10]))}, actual {_sha(b'other' + bytes([10]))})"]
    # The verdict: the node and the file named, the fast path refused (the playbook's verify refuses).
    answers = {e["name"]: fakes.clean_upcheck(cluster, e, kit_version=KIT_VERSION) for e in doc["nodes"]}
    answers[entry["name"]]["kit"] = out["kit"]
    reasons = fastup.judge(cluster, doc, answers, kit_needed=True)
    refused = (f"{entry['name']}: kit {KIT_VERSION} fails verification: adapter/librow_store.so: "
               "build product differs from the build record")
    assert any(r.startswith(refused) for r in reasons), reasons

    lib.unlink()
    out = _run(fastup.check_script(params), env)
    assert [(p["path"], p["problem"]) for p in out["kit"]["problems"]] == [
        ("adapter/librow_store.so", "build product missing")]


def test_up_fast_path_names_the_node_whose_product_differs_from_the_others(tmp_path: Path) -> None:
    cluster, doc = container_site(tmp_path)
    answers = {e["name"]: fakes.clean_upcheck(cluster, e, kit_version=KIT_VERSION) for e in doc["nodes"]}
    names = [str(e["name"]) for e in sorted(doc["nodes"], key=lambda e: int(e["rank"]))]
    for name in names:
        answers[name]["kit"]["products"] = {"adapter/librow_store.so": "1" * 64}
    assert fastup.judge(cluster, doc, answers, kit_needed=True) == []
    answers[names[2]]["kit"]["products"] = {"adapter/librow_store.so": "9" * 64}
    assert fastup.judge(cluster, doc, answers, kit_needed=True) == [
        f"{names[2]}: adapter/librow_store.so: build product differs across nodes "
        f"(expected {'1' * 64}, actual {'9' * 64})"]


def test_a_pending_build_is_reported_and_shown() -> None:
    """`stage kit` before the image: the node's kit is verified and current, its build pending."""
    from rich.console import Console

    from sparkctl.cli.stage_view import summary_table

    def kit(host: str) -> dict[str, Any]:
        return {"version": KIT_VERSION, "verified": True, "current": KIT_VERSION, "switched": True,
                "build": {"changed": False, "built": False, "pending": True, "products": {}}}

    fake = FakeRunner(NODES, ok=9, duration_s=1.0, per_node={results.KIT: kit})
    got = node_summaries(fake(Plan("stage.yml", Path("inventory"))))
    assert got[NODES[0]]["kit"]["build"] == {"built": False, "products": {}, "pending": True}
    cluster = types.SimpleNamespace(name="site", nodes=[types.SimpleNamespace(name=n, rank=i)
                                                        for i, n in enumerate(NODES)])
    console = Console(width=80, record=True, color_system=None)
    console.print(summary_table(cluster, got, False, "kit"))  # type: ignore[arg-type]
    text = console.export_text()
    assert "kit verified; its build waits on every node for the image (sparkctl stage image)" in text


def test_stage_reports_each_nodes_build() -> None:
    def kit(host: str) -> dict[str, Any]:
        built = host == NODES[1]
        build = {"changed": built, "built": built, "products": {"adapter/librow_store.so": "1" * 64}}
        return {"version": KIT_VERSION, "verified": True, "current": KIT_VERSION, "switched": False,
                "build": build}

    fake = FakeRunner(NODES, ok=9, duration_s=1.0, per_node={results.KIT: kit})
    got = node_summaries(fake(Plan("stage.yml", Path("inventory"))))
    assert got[NODES[1]]["kit"]["build"] == {"built": True, "products": {"adapter/librow_store.so": "1" * 64},
                                            "pending": False}
    assert got[NODES[0]]["kit"]["build"]["built"] is False
