"""`stage image` on one node, against a fake docker on PATH (tests/fixtures/fake_docker.py): the archive
written and reused, loads checked by image ID, refusals that name the node (a differing image, a full
data root, a missing kit or base image), and the spark_image module run through Ansible itself."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest
from support.modrun import needs_ansible, run_module

from sparkctl.nodeside import images
from sparkctl.stage import image
from sparkctl.stage import manifest as mf

# Only a save that hangs (blocked on a full pipe) reaches this; a loaded machine is merely slower.
HANG_S = 600

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "fixtures" / "fake_docker.py"
HEAD_ID = "sha256:" + "a" * 64
OTHER_ID = "sha256:" + "b" * 64
REF = "sparkctl-lab/engine:kit"

needs_zstd = pytest.mark.skipif(shutil.which("zstd") is None, reason="zstd is not installed")


class Docker:
    """One fake node's docker: its state file, and the PATH that finds it."""

    def __init__(self, tmp: Path, name: str):
        self.state = tmp / f"{name}-docker.json"
        self.root = tmp / f"{name}-docker-root"
        self.root.mkdir()
        self.bin = tmp / f"{name}-bin"
        self.bin.mkdir()
        (self.bin / "docker").symlink_to(FAKE)
        self.write({"images": {}, "root": str(self.root)})

    def read(self) -> dict[str, Any]:
        return json.loads(self.state.read_text())

    def write(self, doc: dict[str, Any]) -> None:
        self.state.write_text(json.dumps(doc))

    def add(self, ident: str, ref: str, size: int = 4096) -> None:
        doc = self.read()
        for other in doc["images"].values():
            if ref in other["tags"]:
                other["tags"].remove(ref)
        doc["images"].setdefault(ident, {"size": size, "tags": []})["tags"].append(ref)
        self.write(doc)

    def env(self) -> dict[str, str]:
        return {"FAKE_DOCKER_STATE": str(self.state), "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Docker:
    d = Docker(tmp_path, "node")
    for k, v in d.env().items():
        monkeypatch.setenv(k, v)
    return d


def test_probe_reads_the_engine_and_the_image(docker: Docker, tmp_path: Path) -> None:
    docker.add(HEAD_ID, REF, size=1234)
    doc = image.probe(REF, str(tmp_path / "run"))
    assert doc["engine"]["ok"] and doc["engine"]["root"] == str(docker.root)
    assert doc["image"] == {"id": HEAD_ID, "size": 1234, "by": "ref"}


def test_probe_names_an_engine_that_does_not_answer(docker: Docker, tmp_path: Path) -> None:
    docker.write({**docker.read(), "down": True})
    doc = image.probe(REF, str(tmp_path / "run"))
    assert not doc["engine"]["ok"] and "Cannot connect to the Docker daemon" in doc["engine"]["error"]
    assert doc["image"] is None


def test_a_digest_reference_is_found_by_id_after_a_load(docker: Docker) -> None:
    ref = "nvcr.io/x/sglang@sha256:" + "c" * 64
    docker.add(HEAD_ID, "nvcr.io/x/sglang:sparkctl-aaaaaaaaaaaa")
    assert image.node_image(ref, None) is None
    assert image.node_image(ref, HEAD_ID) == {"id": HEAD_ID, "size": 4096, "by": "id"}
    assert images.repository(ref) == "nvcr.io/x/sglang"
    assert images.repository("registry:5000/a/b:tag") == "registry:5000/a/b"


def test_a_pulled_image_runs_under_a_tag_derived_from_its_digest_alone() -> None:
    ref = "nvcr.io/x/sglang:v1@sha256:" + "c" * 64
    assert images.run_reference(ref) == "nvcr.io/x/sglang:sparkctl-cccccccccccc"
    assert images.run_reference("sparkctl-lab/engine:kit") == "sparkctl-lab/engine:kit"


@needs_zstd
def test_save_writes_a_hashed_archive_and_reuses_it(docker: Docker, tmp_path: Path) -> None:
    docker.add(HEAD_ID, REF)
    run = str(tmp_path / "run")
    first = image.save(REF, HEAD_ID, run, "spark-0")
    assert first["changed"] and first["dir"] == f"{run}/images/{'a' * 16}"
    entry = first["manifest"]["files"][0]
    path = Path(first["dir"]) / entry["path"]
    assert entry["path"] == image.ARCHIVE and entry["size"] == path.stat().st_size
    assert entry["sha256"] == mf.file_sha256(str(path))
    assert not list(Path(first["dir"]).glob("*.partial"))
    assert image.save(REF, HEAD_ID, run, "spark-0")["changed"] is False


def test_save_refuses_when_the_image_is_gone(docker: Docker, tmp_path: Path) -> None:
    with pytest.raises(image.ImageError, match="spark-0: docker save sparkctl-lab/engine:kit failed"):
        image.save(REF, HEAD_ID, str(tmp_path / "run"), "spark-0", compress=False)
    assert not list((tmp_path / "run" / "images").rglob("image.tar*"))


def test_save_refuses_when_the_heads_filesystem_lacks_the_space(docker: Docker, tmp_path: Path) -> None:
    run = tmp_path / "run"
    free = shutil.disk_usage(tmp_path).free
    docker.add(HEAD_ID, REF, size=free)  # x SAVE_FACTOR: more than is free
    with pytest.raises(
        image.ImageError,
        match=rf"spark-0: not enough space on the filesystem of {tmp_path}\S* to save the image: needs "
              r"[\d.]+ GiB \(image [\d.]+ GiB x 1.1 \+ 0.00 GiB margin\), [\d.]+ GiB free",
    ):
        image.save(REF, HEAD_ID, str(run), "spark-0")
    assert not list(run.rglob("image.tar*"))  # docker save never ran


SAVE_CHILD = """
import resource, signal, sys
from sparkctl.stage import image
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, like ENOSPC
resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))
try:
    image.save(sys.argv[1], sys.argv[2], sys.argv[3], "spark-0", compress=sys.argv[4] == "zstd")
except image.ImageError as exc:
    print(exc)
    raise SystemExit(3)
"""


@pytest.mark.timing  # held to the wall clock (20 s, against the 60 s exit wait it must not take)
@pytest.mark.parametrize("compress", ["zstd", "plain"])
def test_a_failing_archive_write_stops_the_save_pipe_within_seconds(
    docker: Docker, tmp_path: Path, compress: str
) -> None:
    """The archive's filesystem fills up (a file size limit in the saving process) while docker save
    still has megabytes to send: the pipe stops at once, naming the node and the cause, instead of
    waiting on a docker save blocked on a full pipe (or reading the rest into memory)."""
    if compress == "zstd" and shutil.which("zstd") is None:
        pytest.skip("zstd is not installed")
    docker.add(HEAD_ID, REF)
    run = tmp_path / "run"
    env = {**os.environ, "FAKE_DOCKER_SAVE_BYTES": str(64 << 20)}
    # a save blocked on a full pipe never ends: only that reaches the timeout, however loaded the machine
    proc = subprocess.run([sys.executable, "-c", SAVE_CHILD, REF, HEAD_ID, str(run), compress],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert re.match(rf"spark-0: docker save {REF}( \| zstd)? failed: writing \S+image.tar\S*\.partial "
                    r"failed: File too large", proc.stdout), proc.stdout
    assert not list(run.rglob("image.tar*"))  # the partial archive is removed


def test_a_failing_compressor_stops_the_save_and_names_it(
    docker: Docker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (docker.bin / "zstd").write_text(
        "#!/bin/sh\nhead -c 70000 >/dev/null\necho 'zstd: error 70 : Write error : cannot write block' >&2\n"
        "exit 1\n"
    )
    (docker.bin / "zstd").chmod(0o755)
    docker.add(HEAD_ID, REF)
    monkeypatch.setenv("FAKE_DOCKER_SAVE_BYTES", str(16 << 20))
    failure: list[BaseException] = []

    def save() -> None:
        try:
            image.save(REF, HEAD_ID, str(tmp_path / "run"), "spark-0")
        except BaseException as exc:  # handed to the test's thread
            failure.append(exc)

    saver = threading.Thread(target=save, daemon=True)
    saver.start()
    saver.join(HANG_S)  # a save blocked on the full pipe never ends; anything else does
    assert not saver.is_alive(), "the save still runs: blocked on a pipe nobody reads"
    assert failure and isinstance(failure[0], image.ImageError), failure
    assert str(failure[0]).startswith(f"spark-0: docker save {REF} | zstd failed: ")
    assert "zstd exited 1: zstd: error 70 : Write error" in str(failure[0])
    assert not list((tmp_path / "run").rglob("image.tar*"))


@needs_zstd
def test_load_puts_the_heads_image_in_and_checks_its_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    head, worker = Docker(tmp_path, "head"), Docker(tmp_path, "worker")
    head.add(HEAD_ID, REF)
    worker.add(OTHER_ID, REF)
    for k, v in head.env().items():
        monkeypatch.setenv(k, v)
    saved = image.save(REF, HEAD_ID, str(tmp_path / "run"), "spark-0")
    archive = str(Path(saved["dir"]) / image.ARCHIVE)
    for k, v in worker.env().items():
        monkeypatch.setenv(k, v)
    with pytest.raises(
        image.ImageError, match=f"spark-2: the image under {REF} is {OTHER_ID}, not the head's"
    ):
        image.verify("spark-2", REF, HEAD_ID)
    res = image.load("spark-2", archive, REF, HEAD_ID, str(worker.root), 4096, 0)
    assert res["changed"] and res["image"]["id"] == HEAD_ID
    assert image.verify("spark-2", REF, HEAD_ID)["id"] == HEAD_ID


class _Zeros:
    def __init__(self, size: int):
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def write_archive(path: Path, images_in: list[tuple[str, list[str]]], layer_bytes: int = 4096) -> Path:
    """A `docker save` archive (.tar, or .tar.zst by its name) of ``[(image ID, RepoTags)]``."""
    manifest = json.dumps([{"Config": f"blobs/sha256/{ident.split(':')[1]}", "RepoTags": tags,
                            "Layers": [f"blobs/sha256/{'f' * 64}"]} for ident, tags in images_in]).encode()
    zstd = None
    if path.name.endswith(".zst"):
        with path.open("wb") as out:
            zstd = subprocess.Popen(["zstd", "-q", "-c"], stdin=subprocess.PIPE, stdout=out)
        sink: Any = zstd.stdin
    else:
        sink = path.open("wb")
    with sink, tarfile.open(fileobj=sink, mode="w|") as tf:
        for name, data in (("manifest.json", manifest),):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(f"blobs/sha256/{'f' * 64}")
        info.size = layer_bytes
        tf.addfile(info, _Zeros(layer_bytes))  # type: ignore[arg-type]
    if zstd is not None:
        assert zstd.wait(60) == 0
    return path


def test_load_refuses_a_full_data_root_and_keeps_the_previous_image(docker: Docker, tmp_path: Path) -> None:
    docker.add(OTHER_ID, REF)
    archive = write_archive(tmp_path / "image.tar", [(HEAD_ID, [REF])])
    free = shutil.disk_usage(docker.root).free
    with pytest.raises(
        image.ImageError, match=r"spark-3: docker's data root .* free; loading the image needs"
    ):
        image.load("spark-3", str(archive), REF, HEAD_ID, str(docker.root), free + (1 << 30), 0)
    assert image.inspect(REF) == {"id": OTHER_ID, "size": 4096}


@needs_zstd
def test_the_load_space_estimate_is_the_uncompressed_archive_and_its_layers(
    docker: Docker, tmp_path: Path
) -> None:
    """A .tar.zst that unpacks to 64 MiB: docker writes the uncompressed tar under its data root and
    then the layers — its compressed size (even x3) says nothing about that."""
    docker.add(OTHER_ID, REF)
    archive = write_archive(tmp_path / "image.tar.zst", [(HEAD_ID, [REF])], layer_bytes=64 << 20)
    assert archive.stat().st_size < (1 << 20)
    free = shutil.disk_usage(docker.root).free
    with pytest.raises(
        image.ImageError,
        match=r"spark-2: docker's data root .* free; loading the image needs [\d.]+ GiB \(the 0.06 GiB "
              r"uncompressed archive docker unpacks first, 0.06 GiB of layers and [\d.]+ GiB margin\)",
    ):
        image.load("spark-2", str(archive), REF, HEAD_ID, str(docker.root), archive.stat().st_size * 3,
                   free - (96 << 20))
    assert image.inspect(REF) == {"id": OTHER_ID, "size": 4096}


def test_a_failed_load_names_the_node_and_keeps_the_previous_image(docker: Docker, tmp_path: Path) -> None:
    docker.add(OTHER_ID, REF)
    archive = tmp_path / "image.tar"
    archive.write_bytes(b"truncated")
    with pytest.raises(image.ImageError, match=r"spark-1: .*image.tar is not a readable docker save archive"):
        image.load("spark-1", str(archive), REF, HEAD_ID, str(docker.root), 0, 0)
    assert image.inspect(REF)["id"] == OTHER_ID  # type: ignore[index]
    write_archive(archive, [(HEAD_ID, [REF])])
    state = docker.read()
    docker.write({**state, "down": True})
    with pytest.raises(image.ImageError, match=r"spark-1: docker load of .* failed .*Cannot connect"):
        image.load("spark-1", str(archive), REF, HEAD_ID, str(docker.root), 0, 0)
    docker.write(state)
    assert image.inspect(REF)["id"] == OTHER_ID  # type: ignore[index]


def test_an_archive_of_another_image_is_refused_before_loading(docker: Docker, tmp_path: Path) -> None:
    docker.add(OTHER_ID, "sparkctl-lab/engine:old")
    archive = write_archive(tmp_path / "image.tar", [(OTHER_ID, [REF])])
    before = docker.read()
    with pytest.raises(
        image.ImageError, match=f"spark-1: .*image.tar holds {OTHER_ID}, not the expected {HEAD_ID}; nothing"
    ):
        image.load("spark-1", str(archive), REF, HEAD_ID, str(docker.root), 0, 0)
    assert docker.read() == before


def test_an_archive_that_would_retag_other_images_is_refused(docker: Docker, tmp_path: Path) -> None:
    """docker load moves every tag the archive names: one that also tags another image of this node
    (or holds a second image) would take that tag away from the image that has it now."""
    docker.add(OTHER_ID, "registry.local/monitoring:stable")
    before = docker.read()
    archive = write_archive(tmp_path / "image.tar", [(HEAD_ID, [REF, "registry.local/monitoring:stable"])])
    with pytest.raises(
        image.ImageError,
        match=rf"spark-0: .*image.tar holds 1 image\(s\) \({HEAD_ID} tagged {REF}, "
              rf"registry.local/monitoring:stable\), not one image tagged exactly {REF}: docker load would "
              r"move those tags off the images they name on this node; nothing was loaded",
    ):
        image.load("spark-0", str(archive), REF, HEAD_ID, str(docker.root), 0, 0)
    two = write_archive(tmp_path / "two.tar",
                        [(HEAD_ID, [REF]), (OTHER_ID, ["registry.local/monitoring:stable"])])
    with pytest.raises(image.ImageError, match=r"holds 2 image\(s\)"):
        image.load("spark-0", str(two), REF, HEAD_ID, str(docker.root), 0, 0)
    assert docker.read() == before  # nothing loaded, no tag moved
    # A digest reference: the archive may be untagged (or under its local run tag), nothing else.
    digest_ref = "nvcr.io/x/sglang@sha256:" + "c" * 64
    tagged = write_archive(tmp_path / "tagged.tar", [(HEAD_ID, ["nvcr.io/x/sglang:latest"])])
    with pytest.raises(image.ImageError,
                       match=r"not one image untagged or tagged nvcr.io/x/sglang:sparkctl-c{12}"):
        image.load("spark-0", str(tagged), digest_ref, HEAD_ID, str(docker.root), 0, 0)
    plain = write_archive(tmp_path / "plain.tar", [(HEAD_ID, [])])
    res = image.load("spark-0", str(plain), digest_ref, HEAD_ID, str(docker.root), 0, 0)
    assert res["image"]["id"] == HEAD_ID
    assert image.inspect(images.run_reference(digest_ref))["id"] == HEAD_ID  # type: ignore[index]
    assert image.inspect("registry.local/monitoring:stable")["id"] == OTHER_ID  # type: ignore[index]
    # name:tag@digest with the ID pinned: its own tag names that very image; docker's spelling of a
    # reference (no docker.io/library/, :latest when untagged) is the same tag.
    pinned_ref = "nvcr.io/x/sglang:v1@sha256:" + "c" * 64
    own = write_archive(tmp_path / "own.tar", [(HEAD_ID, ["nvcr.io/x/sglang:v1"])])
    loaded = image.load("spark-0", str(own), pinned_ref, HEAD_ID, str(docker.root), 0, 0)
    assert loaded["image"]["id"] == HEAD_ID
    hub = {"images": [{"id": HEAD_ID, "tags": ["nginx:latest"]}], "bytes": 0}
    image.check_archive("spark-0", "hub.tar", "docker.io/library/nginx", HEAD_ID, hub)  # no refusal


def test_space_check_names_the_node_and_the_filesystem(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    report = image.space_check("spark-1", str(tmp_path / "run"), str(tmp_path), 1 << 20, 1 << 20, 0)
    assert report[0]["needed_bytes"] == 2 << 20  # one filesystem: archive + layers together
    with pytest.raises(image.ImageError, match=f"spark-1: not enough space on the filesystem of {tmp_path}"):
        image.space_check("spark-1", str(tmp_path / "run"), str(tmp_path), free, 1 << 20, 0)


def test_base_images_skip_stages_and_scratch() -> None:
    text = (
        "FROM sparkctl-lab/engine-base:bookworm AS base\nRUN true\nFROM base\n"
        "FROM --platform=linux/arm64 scratch\n"
    )
    assert image.base_images(text) == ["sparkctl-lab/engine-base:bookworm"]


def test_build_refuses_a_missing_kit_and_a_missing_base(docker: Docker, tmp_path: Path) -> None:
    kit = tmp_path / "kit" / "current"
    with pytest.raises(image.ImageError, match=r"spark-0: the kit is not staged .*sparkctl stage kit"):
        image.build(REF, str(kit), "docker/Dockerfile", "spark-0")
    (kit / "docker").mkdir(parents=True)
    (kit / "docker" / "Dockerfile").write_text("FROM sparkctl-lab/engine-base:bookworm\nCOPY . /opt/kit\n")
    with pytest.raises(
        image.ImageError, match=r"spark-0: the base image.*/engine-base:bookworm of .* never pulls"
    ):
        image.build(REF, str(kit), "docker/Dockerfile", "spark-0")
    docker.add(OTHER_ID, "sparkctl-lab/engine-base:bookworm")
    built = image.build(REF, str(kit), "docker/Dockerfile", "spark-0")
    assert built["changed"] and image.inspect(REF)["id"] == built["image"]["id"]  # type: ignore[index]
    assert image.build(REF, str(kit), "docker/Dockerfile", "spark-0")["changed"] is False


def test_clean_keeps_only_the_current_archive(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for ident in (HEAD_ID, OTHER_ID):
        Path(image.archive_dir(str(run), ident)).mkdir(parents=True)
    (run / "images" / "incoming").mkdir()
    assert image.clean(str(run), [HEAD_ID], dry_run=True) == [image.archive_dir(str(run), OTHER_ID)]
    assert Path(image.archive_dir(str(run), OTHER_ID)).exists()
    image.clean(str(run), [HEAD_ID])
    assert sorted(p.name for p in (run / "images").iterdir()) == ["aaaaaaaaaaaaaaaa", "incoming"]


# --- the module through Ansible (AnsiballZ packing with the module_utils symlinks) ---------------


def image_module(args: dict[str, Any], env: dict[str, str],
                 check: bool = False) -> tuple[bool, dict[str, Any]]:
    return run_module("spark_image", "spark_image", args, check, env)


@needs_ansible
def test_module_verify_names_the_odd_node(tmp_path: Path) -> None:
    d = Docker(tmp_path, "spark-2")
    d.add(OTHER_ID, REF)
    failed, res = image_module(
        {"action": "verify", "node": "spark-2", "ref": REF, "expected_id": HEAD_ID}, d.env()
    )
    assert failed and res["msg"].startswith(
        f"spark-2: the image under {REF} is {OTHER_ID}, not the head's {HEAD_ID}"
    )
    failed, res = image_module(
        {"action": "verify", "node": "spark-2", "ref": REF, "expected_id": HEAD_ID, "pinned": True},
        d.env(),
        check=True,
    )
    assert failed and "not the pinned image" in res["msg"]
    failed, res = image_module({"action": "probe", "node": "spark-2", "ref": REF}, d.env(), check=True)
    assert not failed and res["image"]["id"] == OTHER_ID and res["changed"] is False


@needs_ansible
def test_module_preflight_refuses_a_short_node_before_anything_moves(tmp_path: Path) -> None:
    d = Docker(tmp_path, "spark-3")
    free = shutil.disk_usage(tmp_path).free
    failed, res = image_module(
        {
            "action": "preflight",
            "node": "spark-3",
            "run_dir": str(tmp_path / "run"),
            "data_root": str(d.root),
            "archive_bytes": free,
            "image_bytes": 1 << 30,
            "margin_gib": 0,
        },
        d.env(),
    )
    assert failed and res["msg"].startswith("spark-3: not enough space on the filesystem of")
    assert not (tmp_path / "run").exists()


def test_the_build_writes_each_step_as_it_starts(docker: Docker, tmp_path: Path) -> None:
    kit = tmp_path / "kit" / "current"
    (kit / "docker").mkdir(parents=True)
    (kit / "docker" / "Dockerfile").write_text(
        "FROM sparkctl-lab/engine-base:bookworm\nCOPY . /opt/kit\nRUN make -C /opt/kit\n"
    )
    docker.add(OTHER_ID, "sparkctl-lab/engine-base:bookworm")
    doc_path = tmp_path / "run" / "stage-progress.json"
    image.build(REF, str(kit), "docker/Dockerfile", "spark-0", progress_path=str(doc_path))
    doc = json.loads(doc_path.read_text())
    assert (doc["node"], doc["step"], doc["state"]) == ("spark-0", "build", "done")
    assert doc["count_unit"] == "steps"
    assert (doc["count_done"], doc["count_total"]) == (3, 3)  # the three steps fake docker printed


def test_a_failed_build_names_its_output_in_the_message_and_the_document(
    docker: Docker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kit = tmp_path / "kit" / "current"
    (kit / "docker").mkdir(parents=True)
    (kit / "docker" / "Dockerfile").write_text("FROM sparkctl-lab/engine-base:bookworm\nRUN false\n")
    docker.add(OTHER_ID, "sparkctl-lab/engine-base:bookworm")
    bin_dir = tmp_path / "failing-bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(
        "#!/bin/sh\nif [ \"$1\" = build ]; then echo '#5 [2/2] RUN false' >&2; echo 'ERROR: process "
        "\"/bin/sh -c false\" did not complete successfully: exit code: 1' >&2; exit 1; fi\n"
        f"exec {sys.executable} {FAKE} \"$@\"\n"
    )
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    doc_path = tmp_path / "stage-progress.json"
    failed = r"spark-0: docker build of .* failed:\n#5 \[2/2\] RUN false\nERROR"
    with pytest.raises(image.ImageError, match=failed):
        image.build(REF, str(kit), "docker/Dockerfile", "spark-0", progress_path=str(doc_path))
    doc = json.loads(doc_path.read_text())
    assert doc["state"] == "failed" and "did not complete successfully" in doc["error"]
    assert doc["current"] == "step 2/2: RUN false"


def test_the_save_writes_the_archives_bytes_as_they_come(docker: Docker, tmp_path: Path) -> None:
    docker.add(HEAD_ID, REF)
    doc_path = tmp_path / "run" / "stage-progress.json"
    saved = image.save(REF, HEAD_ID, str(tmp_path / "run"), "spark-0", compress=False,
                       progress_path=str(doc_path))
    doc = json.loads(doc_path.read_text())
    size = saved["manifest"]["files"][0]["size"]
    assert (doc["node"], doc["step"], doc["state"]) == ("spark-0", "save", "done")
    assert doc["bytes_done"] == doc["bytes_total"] == size > 0 and doc["files_done"] == 1
