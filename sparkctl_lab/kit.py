"""The lab's synthetic serving kit: a local git repository shaped like a published kit.

A real site mounts a published kit (R4: ``patches/manifest.json`` with one entry per SGLang source
overlay, ``patches/source/<rel>``, ``adapter/``, ``runtime/``, ``docker/Dockerfile``,
``configs/cluster.example.json``) at a pinned commit. The lab has no route to any forge, so `lab up`
writes a small kit of the same shape into a git repository under the lab's directory, and the lab
inventory points ``sparkctl_kit`` at it (``source: git``, its absolute path, its commit).

The content is fixed and so is every commit field (author, committer, dates, message), so the
commit is the same on every controller and every run; ``ensure`` rewrites the repository only when
that commit would change. ``OVERLAYS`` and the digest helpers are what tests compare against.
The overlays' "before" text is what the lab's base engine image holds at
``OVERLAY_TARGET/<rel>`` (see ``engine``).

Like R4, the kit also carries the inputs of its stage-time build and the lock its launcher checks,
at R4's paths:

- ``vendor/b12x-source.tar.gz`` with ``vendor/b12x-source-manifest.json`` ({member: sha256}, the
  member set equal to its keys): extracted into ``<kit>/b12x/`` when the kit is staged. The archive
  is written byte by byte here (fixed member metadata and order, gzip mtime 0, stored deflate
  blocks), so its bytes do not depend on the controller's zlib;
- ``adapter/row_store.cpp``: a small C++17 shared library compiled inside the engine image into
  ``adapter/librow_store.so`` (``ROW_STORE_BUILD`` is R4's command line);
- ``runtime/configuration.py`` and ``versions.lock.json`` (``runtime_configuration_sha256``,
  ``model_config_sha256``, ``sglang_commit``, ``adapter_sha256``), computed from the kit's own files,
  the lab checkpoint's config.json (``MODEL_CONFIG``) and ``SGLANG_COMMIT``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from sparkctl.errors import SparkctlError
from sparkctl_lab import state

BASE_IMAGE = "sparkctl-lab/engine-base:bookworm"
KIT_IMAGE = "sparkctl-lab/engine:kit"
MANIFEST = "patches/manifest.json"
OVERLAY_SOURCE = "patches/source"
OVERLAY_TARGET = "/sgl-workspace/sglang"
DOCKERFILE = "docker/Dockerfile"
BRANCH = "main"
# The SGLang source revision the lab's engine image stands for: the image sets it as
# SGLANG_BUILD_COMMIT (see ``engine``) and the kit's versions.lock.json pins it as ``sglang_commit``,
# as R4's lock pins the commit its image was built from. It names no real SGLang commit.
SGLANG_COMMIT = "448f5c9d75b1699fd95aaf37459dfa2e5f08602d"

_GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "sparkctl lab",
    "GIT_AUTHOR_EMAIL": "lab@sparkctl.invalid",
    "GIT_AUTHOR_DATE": "2026-11-30T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "sparkctl lab",
    "GIT_COMMITTER_EMAIL": "lab@sparkctl.invalid",
    "GIT_COMMITTER_DATE": "2026-11-30T00:00:00+00:00",
}
_COMMIT_MESSAGE = "synthetic serving kit of the sparkctl lab\n"

# R4's stage-time build inputs and launcher lock, at R4's paths.
B12X_ARCHIVE = "vendor/b12x-source.tar.gz"
B12X_MANIFEST = "vendor/b12x-source-manifest.json"
B12X_DIR = "b12x"
ROW_STORE_SOURCE = "adapter/row_store.cpp"
ROW_STORE_LIBRARY = "adapter/librow_store.so"
ROW_STORE_RECORD = "row-store-build.json"
RUNTIME_CONFIGURATION = "runtime/configuration.py"
LOCK = "versions.lock.json"
KIT_MOUNT = "/opt/sglang4"
# R4 scripts/cluster.py stage(): the compile, inside the engine image, with the kit at KIT_MOUNT.
ROW_STORE_BUILD: tuple[str, ...] = (
    "g++", "-O2", "-Wall", "-Wextra", "-Werror", "-std=c++17", "-shared", "-fPIC", "-pthread",
    f"{KIT_MOUNT}/{ROW_STORE_SOURCE}", "-o", f"{KIT_MOUNT}/{ROW_STORE_LIBRARY}",
)

# The lab checkpoint's config.json, byte for byte: the synthetic checkpoint writer
# (tests/support/synth_checkpoint.py) writes exactly this whatever its sizes (they go into the
# safetensors index's metadata), so the lock's model_config_sha256 holds for every lab checkpoint.
# A unit test holds the two together.
MODEL_CONFIG = (
    json.dumps(
        {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "engram_layers": [1, 14]},
        indent=2,
    )
    + "\n"
).encode()


def _py(title: str, *body: str) -> bytes:
    lines = [f'"""{title}"""', "", *body]
    return ("\n".join(lines) + "\n").encode()


# rel -> (before: the image's file, or None where the kit adds a new file; after: the kit's file)
OVERLAYS: dict[str, tuple[bytes | None, bytes]] = {
    "python/sglang/srt/models/deepseek_v4.py": (
        _py(
            "DeepSeek V4 model (sparkctl lab engine image: the stock file the kit replaces).",
            'ENGRAM_MODE = "memory"',
        ),
        _py(
            "DeepSeek V4 model (sparkctl lab serving kit: Engram rows read from the NVMe packed shards).",
            'ENGRAM_MODE = "nvme"',
            'ENGRAM_LAYERS = (1, 14)',
        ),
    ),
    "python/sglang/srt/distributed/device_communicators/pynccl.py": (
        _py(
            "PyNccl communicator (sparkctl lab engine image: the stock file the kit replaces).",
            "ROCE_ALLREDUCE = False",
        ),
        _py(
            "PyNccl communicator (sparkctl lab serving kit: all-reduce over the RoCE fabric).",
            "ROCE_ALLREDUCE = True",
            'ROCE_ENV = "SGLANG4_ROCE_ALLREDUCE"',
        ),
    ),
    "python/sglang/kernels/ops/attention/dsv4/indexer_postprocess.py": (
        None,
        _py(
            "DSV4 indexer post-processing (sparkctl lab serving kit: a file the stock image lacks).",
            "TOPK_BLOCK = 64",
        ),
    ),
}

_ADAPTER = _py(
    "sparkctl lab serving kit adapter: loaded at interpreter start through PYTHONPATH, as published "
    "kits load theirs.\n\nIt changes nothing; it only records that it was loaded.",
    "import os",
    "",
    'os.environ.setdefault("SPARKCTL_LAB_KIT_ADAPTER", "loaded")',
)

_RUNTIME_README = b"""sparkctl lab serving kit: runtime
=================================

A published kit keeps its launcher here (R4: runtime/launch.py, which checks every overlay's
after_sha256 before it starts SGLang). The lab's engine runs `sglang serve <argv>` directly; the
rank simulator inside the image makes the same checks and prints the kit's readiness markers.
"""

_DOCKERFILE = f"""# sparkctl lab serving kit: the engine image the lab's ranks run. Builds offline: its
# base is imported into the head's Docker engine by `sparkctl lab up`; nothing here downloads.
FROM {BASE_IMAGE}
LABEL org.opencontainers.image.title="sparkctl lab engine" org.sparkctl.lab.kit="synthetic"
HEALTHCHECK NONE
""".encode()

_CLUSTER_EXAMPLE = {
    "name": "sparkctl-lab",
    "image": KIT_IMAGE,
    "model_store": "/mnt/nvme/models",
    "model_subpath": "DeepSeek-V4.1-Flash",
    "run_dir": "/srv/sparkctl/run",
    "engram_dir": "/mnt/nvme/engram-tp4",
    "head_ip": "192.0.2.11",
    "fabric_interface": "enp1s0f0np0",
    "dist_port": 29649,
    "api_host": "0.0.0.0",
    "api_port": 8004,
    "nccl_test_port": 29659,
    "tp_size": 4,
    "ep_size": 4,
    "workers": [{"rank": r, "host": f"root@192.0.2.1{r + 1}", "ip": f"192.0.2.1{r + 1}"} for r in range(4)],
}

_README = b"""sparkctl lab serving kit (synthetic)
====================================

Written by `sparkctl lab up`, in the shape of a published serving kit: patches/manifest.json lists
each SGLang source overlay (relative path -> before_sha256 / after_sha256), patches/source/<rel>
holds the overlay files, adapter/ goes on PYTHONPATH, docker/Dockerfile builds the engine image.
Staging builds two products, as R4's stage does: vendor/b12x-source.tar.gz extracted into b12x/
(checked against vendor/b12x-source-manifest.json) and adapter/row_store.cpp compiled inside the
engine image into adapter/librow_store.so (recorded in row-store-build.json). versions.lock.json
pins runtime/configuration.py, the checkpoint's config.json, the image's SGLang commit and adapter/.
"""

_ROW_STORE_CPP = b"""// sparkctl lab serving kit: stands in for the publisher's row store
// (R4 adapter/row_store.cpp, the C++ reader of packed Engram rows that the kit's Engram backend
// loads as librow_store.so).
// It is compiled at stage time inside the engine image, with the publisher's command line
// (g++ -O2 -Wall -Wextra -Werror -std=c++17 -shared -fPIC -pthread), and exports a C interface.
#include <cstddef>
#include <cstdint>

namespace {

// DSV41EN1 packed shard: a 4096-byte header, then rows of 264 bytes
// (256 FP8 values and 8 bytes of scales).
constexpr std::uint64_t kHeaderBytes = 4096;
constexpr std::uint64_t kRowBytes = 264;
constexpr char kVersion[] = "sparkctl-lab-row-store 1";

}  // namespace

extern "C" {

// The library's version string (the simulator and tests read it through ctypes).
const char* row_store_version() noexcept { return kVersion; }

// Byte offset of global row `row` in a shard holding rows [lo, hi); -1 when it is not there.
std::int64_t row_store_offset(std::uint64_t lo, std::uint64_t hi, std::uint64_t row) noexcept {
    if (row < lo || row >= hi) {
        return -1;
    }
    return static_cast<std::int64_t>(kHeaderBytes + (row - lo) * kRowBytes);
}

}  // extern "C"
"""

_RUNTIME_CONFIGURATION = _py(
    "sparkctl lab serving kit: stands in for R4's runtime/configuration.py.\n\n"
    "The publisher's module turns configs/cluster.json into each rank's SGLang arguments and\n"
    "environment for its launcher. In the lab, sparkctl renders those; this file is here so that\n"
    "versions.lock.json pins it (runtime_configuration_sha256) as R4's lock pins the original.",
    'PROFILE = "/config/profile.json"',
)

# A few text files standing in for the frozen b12x kernel sources R4 vendors (name -> content).
_B12X_SOURCES: dict[str, bytes] = {
    "README.md": b"b12x sources (sparkctl lab stand-in for the frozen kernel sources R4 vendors)\n",
    "b12x/__init__.py": _py("b12x kernels (sparkctl lab stand-in).", 'VERSION = "lab"'),
    "b12x/moe.py": _py("MXFP4 MoE kernel entry points (sparkctl lab stand-in).", "BLOCK_M = 128"),
}
_B12X_MTIME = 1796083200  # 2026-12-01, the same on every controller


def _stored_gzip(data: bytes) -> bytes:
    """``data`` as a gzip stream of stored (uncompressed) deflate blocks, mtime 0 and no file name:
    the same bytes whatever zlib the controller has (RFC 1951 3.2.4, RFC 1952)."""
    out = bytearray(b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + b"\x00\xff")
    chunks = [data[i : i + 0xFFFF] for i in range(0, len(data), 0xFFFF)] or [b""]
    for i, chunk in enumerate(chunks):
        out += bytes([1 if i == len(chunks) - 1 else 0])
        out += struct.pack("<HH", len(chunk), len(chunk) ^ 0xFFFF) + chunk
    out += struct.pack("<II", zlib.crc32(data) & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)
    return bytes(out)


def b12x_archive() -> bytes:
    """``vendor/b12x-source.tar.gz``: the files of ``_B12X_SOURCES`` in order, file members only
    (R4's stage requires the member names to equal the manifest's keys), fixed owner and mtime."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in _B12X_SOURCES.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, _B12X_MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return _stored_gzip(raw.getvalue())


def b12x_manifest() -> dict[str, str]:
    """``vendor/b12x-source-manifest.json``: member name -> sha256 of its content."""
    return {name: sha256(data) for name, data in _B12X_SOURCES.items()}


def _json(doc: object) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def overlay_rels() -> list[str]:
    return list(OVERLAYS)


def before_sha256(rel: str) -> str | None:
    before = OVERLAYS[rel][0]
    return None if before is None else sha256(before)


def after_sha256(rel: str) -> str:
    return sha256(OVERLAYS[rel][1])


def manifest() -> dict[str, dict[str, str | None]]:
    """The overlay manifest, in R4's format: {rel: {before_sha256, after_sha256}}."""
    return {rel: {"before_sha256": before_sha256(rel), "after_sha256": after_sha256(rel)} for rel in OVERLAYS}


def lock(kit_files: dict[str, bytes]) -> dict[str, object]:
    """``versions.lock.json`` (R4's keys) for the kit files ``kit_files`` (rel -> content): the
    digests of runtime/configuration.py and of every file under adapter/, the lab checkpoint's
    config.json digest, and the SGLang commit the lab's engine image carries."""
    return {
        "runtime_configuration_sha256": sha256(kit_files[RUNTIME_CONFIGURATION]),
        "model_config_sha256": sha256(MODEL_CONFIG),
        "sglang_commit": SGLANG_COMMIT,
        "adapter_sha256": {
            rel.split("/", 1)[1]: sha256(data)
            for rel, data in sorted(kit_files.items())
            if rel.startswith("adapter/")
        },
    }


def files() -> dict[str, bytes]:
    """Every file of the kit by path relative to its root."""
    out = {
        "README.md": _README,
        MANIFEST: _json(manifest()),
        "adapter/sitecustomize.py": _ADAPTER,
        ROW_STORE_SOURCE: _ROW_STORE_CPP,
        "runtime/README": _RUNTIME_README,
        RUNTIME_CONFIGURATION: _RUNTIME_CONFIGURATION,
        DOCKERFILE: _DOCKERFILE,
        "configs/cluster.example.json": (json.dumps(_CLUSTER_EXAMPLE, indent=2) + "\n").encode(),
        B12X_ARCHIVE: b12x_archive(),
        B12X_MANIFEST: _json(b12x_manifest()),
    }
    for rel, (_before, after) in OVERLAYS.items():
        out[f"{OVERLAY_SOURCE}/{rel}"] = after
    out[LOCK] = _json(lock(out))
    return out


def image_files() -> dict[str, bytes]:
    """What the base engine image holds of SGLang's tree: the "before" of every replaced overlay,
    by absolute path inside the image."""
    return {
        f"{OVERLAY_TARGET}/{rel}": before for rel, (before, _after) in OVERLAYS.items() if before is not None
    }


# --- the repository -------------------------------------------------------------------------


@dataclass(frozen=True)
class KitRepo:
    path: Path
    commit: str
    written: bool  # False when the repository already held this commit


def default_path() -> Path:
    """Under the lab's directory; kept by `lab down` (like the checkpoint): it is the same every time."""
    return state.lab_dir() / "kit"


def _git(repo: Path, *args: str) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        **_GIT_IDENTITY,
    }
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=60, check=False
        )
    except FileNotFoundError as exc:
        raise SparkctlError("git is missing: the lab writes its serving kit as a git repository",
                            hint="apt-get install -y git") from exc
    if proc.returncode != 0:
        raise SparkctlError(
            f"git {' '.join(args)} failed in {repo} (exit {proc.returncode})",
            details=proc.stderr.strip().splitlines()[-4:],
        )
    return proc.stdout.strip()


def _head(repo: Path) -> str | None:
    """HEAD of a clean repository at `repo`, else None."""
    if not (repo / ".git").is_dir():
        return None
    try:
        if _git(repo, "status", "--porcelain", "--untracked-files=all"):
            return None
        return _git(repo, "rev-parse", "--verify", "HEAD")
    except SparkctlError:
        return None


def write_repo(repo: Path) -> str:
    """Create the kit repository at `repo` (which must not exist); return its commit."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", BRANCH)
    for rel, data in sorted(files().items()):
        f = repo / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
        f.chmod(0o644)
    _git(repo, "add", "--all")
    _git(repo, "commit", "-q", "--no-verify", "--no-gpg-sign", "-m", _COMMIT_MESSAGE)
    return _git(repo, "rev-parse", "--verify", "HEAD")


def ensure(path: Path | None = None) -> KitRepo:
    """The kit repository at `path` (default under the lab's directory), written when missing,
    changed or dirty; left alone when it already holds the expected commit."""
    path = (path or default_path()).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f"{path.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        commit = write_repo(tmp)
        if _head(path) == commit:
            return KitRepo(path, commit, written=False)
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)
        return KitRepo(path, commit, written=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
