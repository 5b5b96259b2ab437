"""The engine image on a node: probe, build, save, load, compare (standard library only; runs on the nodes).

``sparkctl stage image`` makes the image once on the head (pull by digest, build from the kit's
Dockerfile, or load a ``docker save`` archive from the controller), then — only when a worker's
image ID differs from the head's — writes ``docker save <ref> | zstd`` to
``<run_dir>/images/<id16>/image.tar.zst`` (hashed while it is written, renamed when complete),
fans that directory out with the staging chain (:func:`sparkctl.stage.transfer.run_node`), and
``docker load``\\ s it on each worker whose data root has the room. The image ID must then be the
same on every node (and equal the inventory's pin, when there is one).

An image referenced by digest (``name@sha256:…``) keeps no repository digest through save/load,
so on a node that loaded it the reference does not resolve: such a node is looked up by the
expected image ID instead, and every node tags the image with
:func:`sparkctl.nodeside.images.run_reference` — the name the rank's ``docker run`` uses.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from typing import Any

from ..nodeside import progress as stage_progress
from ..nodeside.images import is_digest_ref, repository, run_reference
from ..nodeside.progress import gib
from . import manifest as mf

ARCHIVE = "image.tar.zst"
ARCHIVE_PLAIN = "image.tar"
IMAGES_DIR = "images"
BLOCK = 8 << 20
IMAGE_ID = re.compile(r"^sha256:[0-9a-f]{64}$")


class ImageError(RuntimeError):
    """A step on one node failed; the message names the node and what to do."""


def _docker(argv: list[str], timeout: float | None = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *argv], capture_output=True, text=True, timeout=timeout, check=False, **kw
    )


def archive_dir(run_dir: str, image_id: str) -> str:
    """``<run_dir>/images/<first 16 hex of the ID>``: one directory per image, the chain's root."""
    return os.path.join(run_dir, IMAGES_DIR, image_id.split(":", 1)[-1][:16])


def inspect(ref: str) -> dict[str, Any] | None:
    """``{"id", "size"}`` of the image ``ref`` (a reference or an ID), or None when absent."""
    proc = _docker(["image", "inspect", "--format", "{{.Id}} {{.Size}}", ref])
    if proc.returncode != 0:
        return None
    ident, _, size = proc.stdout.strip().partition(" ")
    return {"id": ident, "size": int(size or 0)}


def engine() -> dict[str, Any]:
    """Docker on this node: ``{"ok", "error", "root", "runtimes", "version"}``."""
    if shutil.which("docker") is None:
        return {"ok": False, "error": "the docker command is not installed", "root": "", "runtimes": []}
    try:
        proc = _docker(["info", "--format", "{{json .}}"], timeout=60)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "docker info did not answer within 60 s", "root": "", "runtimes": []}
    doc: dict[str, Any] = {}
    with contextlib.suppress(ValueError):
        doc = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or not doc.get("ServerVersion"):
        err = (proc.stderr.strip() or proc.stdout.strip() or "no answer").splitlines()[-1][:300]
        return {"ok": False, "error": f"the Docker engine does not answer: {err}", "root": "", "runtimes": []}
    return {
        "ok": True,
        "error": "",
        "root": str(doc.get("DockerRootDir") or "/var/lib/docker"),
        "runtimes": sorted(doc.get("Runtimes") or {}),
        "version": str(doc.get("ServerVersion")),
    }


def free_bytes(path: str) -> tuple[str, int, int]:
    """(the nearest existing directory, its filesystem's device, free bytes for an unprivileged writer)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    st = os.statvfs(probe)
    return probe, os.stat(probe).st_dev, st.f_bavail * st.f_frsize


def node_image(ref: str, want_id: str | None) -> dict[str, Any] | None:
    """The image this node would run for ``ref``: by reference, or by ID for a digest reference."""
    found = inspect(ref)
    if found is None and want_id and is_digest_ref(ref):
        found = inspect(want_id)
        if found is not None:
            found["by"] = "id"
    elif found is not None:
        found["by"] = "ref"
    return found


def staged_answer(ref: str, want_id: str | None, build: dict[str, str] | None = None) -> dict[str, Any]:
    """What a fast path (of `up` or `stage`) asks of a node's image: ``{"found": node_image}``, plus
    ``"build"`` (``built_from``) when ``build`` names the kit context and Dockerfile; ``{"error"}``
    when docker cannot be asked."""
    try:
        out: dict[str, Any] = {"found": node_image(ref, want_id)}
        if build:
            out["build"] = built_from(ref, build["context"], build["dockerfile"])
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": str(exc)[:200]}
    return out


def probe(ref: str, run_dir: str, want_id: str | None = None) -> dict[str, Any]:
    """Everything stage needs to know about this node, changing nothing."""
    eng = engine()
    out: dict[str, Any] = {"engine": eng, "zstd": shutil.which("zstd") is not None, "image": None}
    if eng["ok"]:
        out["image"] = node_image(ref, want_id)
    return out


# --- the head: build, save ----------------------------------------------------------------------

_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)


def base_images(dockerfile_text: str) -> list[str]:
    """The images a Dockerfile starts from (earlier stages and ``scratch`` excluded)."""
    stages: set[str] = set()
    bases: list[str] = []
    for line in dockerfile_text.splitlines():
        m = _FROM.match(line)
        if not m:
            continue
        image, alias = m.group(1), m.group(2)
        if image.lower() != "scratch" and image.lower() not in stages and image not in bases:
            bases.append(image)
        if alias:
            stages.add(alias.lower())
    return bases


# The label a build puts on its image: what the build was made from (``build_key``).
BUILD_LABEL = "org.sparkctl.build"


def labels(ref: str) -> dict[str, str] | None:
    """The image's labels (``{}`` when it has none or they cannot be read), None when it is absent."""
    proc = _docker(["image", "inspect", "--format", "{{json .Config.Labels}}", ref])
    if proc.returncode != 0:
        return None
    try:
        doc = json.loads(proc.stdout.strip() or "null")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


Bases = list[tuple[str, dict[str, Any] | None]]  # each base image and what `inspect` finds of it


def _build_inputs(context: str, dockerfile: str) -> tuple[str, bytes, Bases]:
    """What a build of ``context`` depends on, read once: the kit directory it resolves to, the
    Dockerfile's bytes, and each base image with what ``inspect`` finds of it on this node (None when
    missing or named by a build argument). Raises OSError when the Dockerfile cannot be read."""
    real = os.path.realpath(context)
    with open(os.path.join(real, dockerfile), "rb") as fh:
        text = fh.read()
    bases = [(b, None if "$" in b else inspect(b)) for b in base_images(text.decode("utf-8", "replace"))]
    return real, text, bases


def _key(ref: str, dockerfile: str, real: str, text: bytes, bases: Bases) -> tuple[str | None, str]:
    ids = []
    for base, found in bases:
        if "$" in base:
            return None, f"{dockerfile} names its base by a build argument ({base})"
        if found is None:
            return None, f"the base image {base} is not on this node"
        ids.append([base, found["id"]])
    doc = {"ref": ref, "kit": os.path.basename(real), "bases": ids,
           "dockerfile": [dockerfile, hashlib.sha256(text).hexdigest()]}
    return "v1:" + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest(), ""


def build_key(ref: str, context: str, dockerfile: str) -> tuple[str | None, str]:
    """``(key, why)``: one digest over what a build of ``ref`` depends on. That is the kit version the
    context resolves to (a content-addressed directory), the Dockerfile's bytes and the ID of every
    base image on this node. The key is None, with the reason, when it cannot be known: no
    Dockerfile, a base named by a build argument, or a base missing on this node."""
    try:
        inputs = _build_inputs(context, dockerfile)
    except OSError as exc:
        return None, f"cannot read {os.path.join(context, dockerfile)}: {exc.strerror or exc}"
    return _key(ref, dockerfile, *inputs)


def built_from(ref: str, context: str, dockerfile: str) -> dict[str, Any]:
    """Whether the image under ``ref`` on this node is what a build from ``context`` makes now:
    ``{"current": bool, "why": str}`` (``why`` says what differs)."""
    key, why = build_key(ref, context, dockerfile)
    if key is None:
        return {"current": False, "why": why}
    found = labels(ref)
    if found is None:
        return {"current": False, "why": f"no image under {ref}"}
    have = found.get(BUILD_LABEL)
    if have != key:
        what = "it has no build label" if not have else "its build label differs"
        return {"current": False, "why": f"the image under {ref} is not the build of the staged kit and "
                                         f"its base image as they are now ({what})"}
    return {"current": True, "why": ""}


def repo_digests(ref: str) -> list[str] | None:
    """The registry digests docker knows for the image ``ref`` (``repo@sha256:…``), None when absent."""
    proc = _docker(["image", "inspect", "--format", "{{json .RepoDigests}}", ref])
    if proc.returncode != 0:
        return None
    try:
        doc = json.loads(proc.stdout.strip() or "[]")
    except ValueError:
        return []
    return [str(d) for d in doc] if isinstance(doc, list) else []


def _check_tagged_base(base: str, named: list[str], dockerfile: str, node: str) -> None:
    """A Dockerfile may name the pinned base by its moving tag (Mia's names ``lmsysorg/sglang:dev-dsv41``
    and pins the digest in its docs and preflight): the build is then right only if that tag, here,
    is the pinned digest (a build never pulls). ImageError naming what to do otherwise."""
    tagged, _, digest = base.partition("@")
    if tagged not in named or not digest:
        raise ImageError(
            f"{node}: {dockerfile} starts FROM {', '.join(named) or 'no image'}, not {base} (the profile's "
            "image.base) nor its tag; pin a kit commit whose Dockerfile builds on that base"
        )
    repo = tagged.rsplit(":", 1)[0] if ":" in tagged.rsplit("/", 1)[-1] else tagged
    digests = repo_digests(tagged)
    if digests is None or f"{repo}@{digest}" not in digests:
        seen = "is not on this node" if digests is None else f"is {', '.join(digests) or 'a local build'}"
        raise ImageError(
            f"{node}: {dockerfile} builds FROM {tagged}, which {seen}, not the pinned {repo}@{digest} (the "
            f"profile's image.base); on this node: docker pull {repo}@{digest} && docker tag "
            f"{repo}@{digest} {tagged}",
        )


def _build_streamed(argv: list[str], timeout: float, progress: stage_progress.Progress | None
                    ) -> tuple[int, list[str]]:
    """Run ``docker build`` reading its output as it comes (BuildKit's plain progress, or the
    classic builder's steps): each build step started is written to ``progress``. (exit status,
    the output's last lines); killed after ``timeout`` seconds."""
    env = dict(os.environ, BUILDKIT_PROGRESS="plain")
    proc = subprocess.Popen(["docker", *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env)

    def on_line(text: str) -> None:
        step = stage_progress.build_step(text)
        if step is not None and progress is not None:
            k, n, what = step
            progress.set(count_done=k - 1, count_total=n, current=f"step {k}/{n}: {what}"[:160])

    timed_out, kept = stage_progress.follow_lines(proc, proc.stdout, on_line, timeout)
    if timed_out:
        kept.append(f"docker build did not finish within {timeout:.0f} s")
    return proc.returncode, kept


def build(ref: str, context: str, dockerfile: str, node: str, timeout: float = 7200,
          base: str | None = None, progress_path: str = "") -> dict[str, Any]:
    """``docker build`` of ``context`` on this node without pulling: every base must be here already.
    ``base``: the image the Dockerfile must start FROM, by digest (a profile's ``image.base``);
    ``progress_path``: where the build's step k of n is written as it starts (nodeside.progress)."""
    path = os.path.join(context, dockerfile)
    if not os.path.isdir(context):
        raise ImageError(
            f"{node}: the kit is not staged ({context} is missing); run `sparkctl stage kit` first"
        )
    if not os.path.isfile(path):
        raise ImageError(
            f"{node}: the kit has no {dockerfile} ({path} is missing); the image cannot be built"
        )
    inputs = _build_inputs(context, dockerfile)
    named = [b for b, _found in inputs[2]]
    if base and base not in named:
        _check_tagged_base(base, named, dockerfile, node)
    missing = [base for base, found in inputs[2] if "$" not in base and found is None]
    if missing:
        raise ImageError(
            f"{node}: the base image(s) {', '.join(missing)} of {dockerfile} are not on this node and a "
            "build never pulls; load them first (docker load) or use image_source: pull|archive"
        )
    before = inspect(ref)
    key, _why = _key(ref, dockerfile, *inputs)
    label = ["--label", f"{BUILD_LABEL}={key}"] if key else []
    progress = None
    if progress_path:
        progress = stage_progress.Progress(node, step="build", state="building", path=progress_path,
                                           count_unit="steps")
        progress.write()
    try:
        code, output = _build_streamed(["build", "--pull=false", *label, "-f", path, "-t", ref, context],
                                       timeout, progress)
    except OSError as exc:  # docker itself cannot start
        code, output = 127, [f"docker: {exc.strerror or exc}"]
    if code != 0:
        tail = "\n".join(line.rstrip() for line in output[-15:])
        if progress is not None:
            progress.set(state="failed", error=tail.splitlines()[-1] if tail else f"exit {code}")
        raise ImageError(f"{node}: docker build of {ref} failed:\n{tail}")
    if progress is not None:
        progress.set(state="done", count_done=progress.count_total, current="")
    after = inspect(ref)
    if after is None:
        raise ImageError(f"{node}: docker build succeeded but {ref} does not resolve")
    return {"changed": before is None or before["id"] != after["id"], "image": after, "previous": before}


# The saved archive is at most about the image's size (a plain tar of its layers; zstd only shrinks
# it): the head needs that much, times this factor, plus the margin, free before `docker save`.
SAVE_FACTOR = 1.1
# A save pipe that sends no byte for this long is stopped (docker hung, a stuck disk). Generous: an
# older engine exports every layer to its own temporary directory before the first byte comes out.
SAVE_STALL_S = 1800.0
# After the stream ended, how long each stage may take to exit.
EXIT_WAIT_S = 60.0


def save_space_check(node: str, root: str, image_bytes: int, margin: int) -> dict[str, Any]:
    """Refuse, naming the node, the path and needed against free bytes, when the filesystem of the
    archive directory ``root`` cannot hold the archive of an image of ``image_bytes`` (× SAVE_FACTOR)
    plus ``margin``. A ``.partial`` left by an interrupted save counts as free (it is replaced)."""
    probe_path, _dev, free = free_bytes(root)
    for name in (ARCHIVE, ARCHIVE_PLAIN):
        with contextlib.suppress(OSError):
            free += os.stat(os.path.join(root, name + mf.PARTIAL)).st_size
    need = int(image_bytes * SAVE_FACTOR) + margin
    report = {"path": probe_path, "needed_bytes": need, "free_bytes": free, "margin_bytes": margin}
    if need > free:
        raise ImageError(
            f"{node}: not enough space on the filesystem of {probe_path} to save the image: needs "
            f"{gib(need)} (image {gib(image_bytes)} x {SAVE_FACTOR} + {gib(margin)} margin), "
            f"{gib(free)} free; nothing was saved — free space there (or lower the margin) and re-run"
        )
    return report


def _tail(fh: Any) -> str:
    fh.seek(0)
    text = fh.read()[-2000:].decode(errors="replace").strip()
    return " ".join(text.splitlines()[-3:])[-300:]


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Kill every stage still running and reap it (bounded: a killed process exits at once)."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)


def pipe_to_file(
    node: str, argvs: list[list[str]], path: str, stall_s: float = SAVE_STALL_S,
    on_bytes: Callable[[int], None] | None = None,
) -> tuple[int, str]:
    """Run ``argvs`` as a pipe (each stage's stdout into the next one's stdin), the last stage's
    output written to ``path`` and hashed as it arrives: ``(bytes, sha256)``.

    Streams in blocks (never held in memory). Every stage's exit status is checked; a failed write
    (full disk, file size limit), a stage that exits non-zero, or one that sends nothing for
    ``stall_s`` kills every stage at once and raises ImageError naming the node, the stage and why.
    """
    what = " | ".join(argv[0] if argv[0] != "docker" else " ".join(argv) for argv in argvs)
    procs: list[subprocess.Popen[bytes]] = []
    errs = [tempfile.TemporaryFile() for _ in argvs]  # noqa: SIM115  # closed in the finally below
    h = hashlib.sha256()
    size = 0
    cause = ""
    reader: Any = None
    try:
        for argv, err in zip(argvs, errs, strict=True):
            proc = subprocess.Popen(argv, stdin=reader if reader is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=err)
            procs.append(proc)
            if reader is not None:
                reader.close()  # the next stage holds the read end now: a dead reader is EPIPE upstream
            reader = proc.stdout
        assert reader is not None
        fd = reader.fileno()
        with open(path, "wb", buffering=0) as out:
            while True:
                ready, _, _ = select.select([fd], [], [], stall_s)
                if not ready:
                    cause = f"{what} sent nothing for {stall_s:.0f} s"
                    break
                chunk = os.read(fd, BLOCK)
                if not chunk:
                    break
                h.update(chunk)
                try:
                    out.write(chunk)
                except OSError as exc:
                    cause = f"writing {path} failed: {exc.strerror or exc}"
                    break
                size += len(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
            if not cause:
                try:
                    os.fsync(out.fileno())
                except OSError as exc:
                    cause = f"writing {path} failed: {exc.strerror or exc}"
    except OSError as exc:  # a stage that cannot start (zstd missing), the file that cannot be opened
        cause = f"{exc.filename or what}: {exc.strerror or exc}"
    finally:
        if reader is not None:
            reader.close()
        if cause:
            _stop(procs)
        deadline = time.monotonic() + EXIT_WAIT_S
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                cause = cause or f"{proc.args!r} did not exit after its output ended"
                _stop(procs)
        stages = []
        for argv, proc, err in zip(argvs, procs, errs, strict=False):  # the stages that started
            name = " ".join(argv[:2]) if argv[0] == "docker" else argv[0]
            if proc.returncode and not (cause and proc.returncode < 0):  # not our own kill
                stages.append(f"{name} exited {proc.returncode}: {_tail(err) or 'no message'}")
            err.close()
    if cause or stages:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise ImageError(f"{node}: {what} failed: {'; '.join([c for c in [cause] if c] + stages)}")
    return size, h.hexdigest()


def save(
    ref: str, image_id: str, run_dir: str, node: str, compress: bool = True, margin: int = 0,
    progress_path: str = "",
) -> dict[str, Any]:
    """The archive of ``image_id`` (saved under ``ref``) and its manifest; an existing one is reused.

    First the archive directory's filesystem must hold the image's size (× SAVE_FACTOR) plus
    ``margin`` (:func:`save_space_check`). Then ``docker save | zstd`` is written to
    ``<archive>.partial`` and hashed as it arrives (:func:`pipe_to_file`: a failing stage or write
    stops the whole pipe at once); the rename happens only when every stage exited 0 and the image
    under ``ref`` is still ``image_id``. Returns ``{"changed", "dir", "manifest", "space"}``.
    """
    root = archive_dir(run_dir, image_id)
    name = ARCHIVE if compress else ARCHIVE_PLAIN
    with contextlib.suppress(mf.ManifestError):
        doc = mf.load(root)
        if (
            doc
            and [e["path"] for e in doc["files"]] == [name]
            and (doc.get("source") or {}).get("image_id") == image_id
            and all(mf.quick_ok(root, doc, doc).values())
        ):
            return {"changed": False, "dir": root, "manifest": doc}
    found = inspect(image_id)
    if found is None:
        raise ImageError(f"{node}: docker save {ref} failed: the image {image_id} is not on this node")
    space = save_space_check(node, root, found["size"], margin)
    os.makedirs(root, exist_ok=True)
    final = os.path.join(root, name)
    part = final + mf.PARTIAL
    argvs = [["docker", "save", ref]] + ([["zstd", "-T0", "-3", "-q", "-c"]] if compress else [])
    progress = ticker = None
    if progress_path:  # the archive's bytes as written (its final size is known only at the end)
        progress = stage_progress.Progress(node, step="save", state="saving", path=progress_path,
                                           files_total=1)
        progress.current = name
        ticker = stage_progress.Ticker(progress)
        progress.write()
        ticker.start()
    try:
        counted = (lambda n: progress.add(done=n)) if progress is not None else None
        size, digest = pipe_to_file(node, argvs, part, on_bytes=counted)
    except ImageError as exc:
        if ticker is not None and progress is not None:
            ticker.finish()
            progress.set(state="failed", error=str(exc)[-300:])
        raise
    if ticker is not None and progress is not None:
        ticker.finish()
        progress.set(state="done", bytes_total=size, files_done=1, current="")
    now = inspect(ref)
    if now is None or now["id"] != image_id:
        os.unlink(part)
        raise ImageError(f"{node}: {ref} changed while it was saved; re-run `sparkctl stage image`")
    os.replace(part, final)
    st = os.stat(final)
    doc = {
        "version": mf.VERSION,
        "source": {"image_id": image_id, "ref": ref, "compress": "zstd" if compress else "none"},
        "total_bytes": size,
        "files": [{"path": name, "size": size, "sha256": digest, "mtime_ns": st.st_mtime_ns}],
    }
    mf.save(root, doc)
    return {"changed": True, "dir": root, "manifest": doc, "space": space}


# --- the workers: space, load -------------------------------------------------------------------


def space_check(
    node: str, run_dir: str, data_root: str, archive_bytes: int, image_bytes: int, margin: int
) -> list[dict[str, Any]]:
    """Raise ImageError naming the node when the archive plus the loaded layers (+ margin) do not fit."""
    need: dict[int, list[Any]] = {}
    for path, nbytes in ((os.path.join(run_dir, IMAGES_DIR), archive_bytes), (data_root, image_bytes)):
        probe_path, dev, free = free_bytes(path)
        entry = need.setdefault(dev, [probe_path, 0, free])
        entry[1] += nbytes
    report = []
    for probe_path, nbytes, free in need.values():
        report.append(
            {"path": probe_path, "needed_bytes": nbytes, "free_bytes": free, "margin_bytes": margin}
        )
        if nbytes and nbytes + margin > free:
            raise ImageError(
                f"{node}: not enough space on the filesystem of {probe_path} for the image: needs "
                f"{gib(nbytes + margin)} ({gib(nbytes)} + {gib(margin)} margin), {gib(free)} free; "
                "nothing was loaded and the previous image stays — free space (docker image prune) and re-run"
            )
    return report


def archive_contents(node: str, archive: str, timeout: float = 7200) -> dict[str, Any]:
    """What ``docker load`` would do with ``archive`` (a ``docker save`` tar, or one zstd-compressed),
    read as a stream: ``{"images": [{"id", "tags"}], "bytes", "ids"}`` — each image's ID (its config
    digest) and the tags its ``manifest.json`` gives it, the uncompressed size of the whole tar, and
    every ID docker may give the image (config digests, and the manifest digests of ``index.json``)."""
    dec = None
    src: Any = None
    manifest, index, total = None, None, 0
    try:
        if archive.endswith(".zst"):
            dec = subprocess.Popen(["zstd", "-dc", "-q", archive], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
            src = dec.stdout
        else:
            src = open(archive, "rb")  # noqa: SIM115  # closed in the finally below
        with tarfile.open(fileobj=src, mode="r|") as tf:
            for member in tf:
                total += member.size
                if member.name.removeprefix("./") in ("manifest.json", "index.json") and member.isfile():
                    fh = tf.extractfile(member)
                    doc = json.loads(fh.read(1 << 20)) if fh is not None else None
                    if member.name.endswith("manifest.json"):
                        manifest = doc
                    else:
                        index = doc
    except (tarfile.TarError, OSError, ValueError) as exc:
        raise ImageError(f"{node}: {archive} is not a readable docker save archive ({exc}); nothing was "
                         "loaded and the previous image stays") from None
    finally:
        if src is not None:
            src.close()
        if dec is not None:  # everything needed was read: the rest of the stream is not
            dec.kill()
            dec.wait(timeout)
    if not isinstance(manifest, list) or not manifest:
        raise ImageError(f"{node}: {archive} has no manifest.json naming its image; nothing was loaded")
    images = []
    for entry in manifest:
        config = str((entry or {}).get("Config") or "")
        digest = os.path.basename(config).removesuffix(".json")
        images.append({"id": f"sha256:{digest}" if re.fullmatch(r"[0-9a-f]{64}", digest) else None,
                       "tags": [str(t) for t in (entry.get("RepoTags") or [])]})
    # The containerd image store names an image by its manifest (index) digest, which the OCI
    # index.json lists, rather than by its config digest.
    also = [str(m.get("digest")) for m in ((index or {}).get("manifests") or []) if isinstance(m, dict)]
    return {"images": images, "bytes": total, "ids": sorted({i["id"] for i in images if i["id"]} | set(also))}


def _tag_name(ref: str) -> str:
    """A tag reference as docker writes it in an archive's RepoTags (``docker.io/library/`` and
    ``docker.io/`` dropped, ``:latest`` when no tag is given)."""
    for prefix in ("docker.io/library/", "index.docker.io/library/", "docker.io/", "index.docker.io/"):
        if ref.startswith(prefix):
            ref = ref[len(prefix):]
            break
    return ref if ":" in ref.rsplit("/", 1)[-1] else ref + ":latest"


def check_archive(node: str, archive: str, ref: str, expected_id: str | None,
                  contents: dict[str, Any]) -> None:
    """Refuse an archive that ``docker load`` would use to retag other images on this node: it must
    hold exactly one image, tagged exactly ``ref`` (for a digest reference: untagged, or under the
    local tag :func:`sparkctl.nodeside.images.run_reference` gives it), and be ``expected_id`` when
    one is known."""
    images = contents["images"]
    if is_digest_ref(ref):
        allowed = {_tag_name(run_reference(ref))}
        named = ref.split("@", 1)[0]
        if expected_id and named != repository(ref):  # name:tag@digest: its tag names the pinned ID
            allowed.add(_tag_name(named))
        wanted = f"untagged or tagged {' or '.join(sorted(allowed))}"
    else:
        allowed, wanted = {_tag_name(ref)}, f"tagged exactly {ref}"
    tags = images[0]["tags"] if len(images) == 1 else []
    if (len(images) != 1 or any(_tag_name(t) not in allowed for t in tags)
            or (not is_digest_ref(ref) and not tags)):
        named = "; ".join(f"{i['id'] or '?'} tagged {', '.join(i['tags']) or 'nothing'}" for i in images)
        raise ImageError(
            f"{node}: {archive} holds {len(images)} image(s) ({named}), not one image {wanted}: "
            "docker load would move those tags off the images they name on this node; nothing was "
            f"loaded — give an archive of exactly that image (docker save {ref} > file)"
        )
    ids = contents.get("ids") or []
    if expected_id and ids and expected_id not in ids:
        raise ImageError(
            f"{node}: {archive} holds {images[0]['id']}, not the expected {expected_id}; nothing was loaded "
            "and the previous image stays"
        )


def load(
    node: str,
    archive: str,
    ref: str,
    expected_id: str | None,
    data_root: str,
    image_bytes: int,
    margin: int,
    timeout: float = 7200,
) -> dict[str, Any]:
    """``zstd -dc <archive> | docker load`` (plain ``docker load`` for a .tar), then check the ID.

    Before loading, the archive is read through once (:func:`archive_contents`): it must hold
    exactly the expected image under exactly ``ref`` (:func:`check_archive`: docker load moves
    every tag an archive names, so another would retag images of this node), and docker's data
    root must have the room for the load — the uncompressed tar, which docker unpacks in its own
    temporary directory first, plus the layers (at least ``image_bytes``) plus the margin. A
    failed load leaves the reference on the previous image: docker moves a tag only once the whole
    image is in.
    """
    contents = archive_contents(node, archive, timeout)
    check_archive(node, archive, ref, expected_id, contents)
    tar_bytes = int(contents["bytes"])
    need = tar_bytes + max(image_bytes, tar_bytes)
    probe_path, _dev, free = free_bytes(data_root)
    if need + margin > free:
        raise ImageError(
            f"{node}: docker's data root {probe_path} has {gib(free)} free; loading the image needs "
            f"{gib(need + margin)} (the {gib(tar_bytes)} uncompressed archive docker unpacks first, "
            f"{gib(max(image_bytes, tar_bytes))} of layers and {gib(margin)} margin); nothing was "
            "loaded and the previous image stays — free space (docker image prune) and re-run"
        )
    before = node_image(ref, expected_id)
    if archive.endswith(".zst"):
        dec = subprocess.Popen(["zstd", "-dc", "-q", archive], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            proc = subprocess.run(
                ["docker", "load", "-q"],
                stdin=dec.stdout,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        finally:
            dec.stdout.close()  # type: ignore[union-attr]
            dec_err = dec.communicate()[1].decode(errors="replace").strip()
        failed = dec.returncode != 0 or proc.returncode != 0
        err = f"{dec_err} {proc.stderr.strip()}".strip()
    else:
        proc = _docker(["load", "-q", "-i", archive], timeout=timeout)
        failed, err = proc.returncode != 0, proc.stderr.strip()
    if failed:
        raise ImageError(
            f"{node}: docker load of {archive} failed ({err[-400:] or 'no message'}); "
            "the previous image stays"
        )
    if expected_id and is_digest_ref(ref):  # no repository digest survives save/load: tag it
        _docker(["tag", expected_id, run_reference(ref)])
    after = node_image(ref, expected_id)
    if after is None:
        raise ImageError(
            f"{node}: after docker load of {archive}, {ref} does not resolve: the archive holds "
            "another image (docker save it under that reference)"
        )
    if expected_id and after["id"] != expected_id:
        raise ImageError(f"{node}: after docker load, {ref} is {after['id']}, not the expected {expected_id}")
    return {
        "changed": before is None or before["id"] != after["id"],
        "image": after,
        "output": proc.stdout.strip(),
    }


def clean(run_dir: str, keep: list[str], dry_run: bool = False) -> list[str]:
    """Remove every archive directory under ``<run_dir>/images`` except those of the ``keep`` IDs."""
    base = os.path.join(run_dir, IMAGES_DIR)
    keep_dirs = {os.path.basename(archive_dir(run_dir, i)) for i in keep if i}
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for name in sorted(os.listdir(base)):
            path = os.path.join(base, name)
            if name in keep_dirs or name == "incoming" or not os.path.isdir(path):
                continue
            if not dry_run:
                shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


# --- the cluster: one ID everywhere ---------------------------------------------------------------


def verify(node: str, ref: str, reference_id: str, pinned: bool = False) -> dict[str, Any]:
    """This node's image under ``ref`` must be ``reference_id`` (the pin, else the head's ID)."""
    found = node_image(ref, reference_id)
    whose = "the pinned image" if pinned else "the head's"
    if found is None:
        raise ImageError(
            f"{node}: has no image under {ref} ({whose} is {reference_id}); run `sparkctl stage image`"
        )
    if found["id"] != reference_id:
        raise ImageError(
            f"{node}: the image under {ref} is {found['id']}, not {whose} {reference_id}; "
            "run `sparkctl stage image` (it replaces the odd image)"
        )
    return found
