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
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
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

_GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "sparkctl lab",
    "GIT_AUTHOR_EMAIL": "lab@sparkctl.invalid",
    "GIT_AUTHOR_DATE": "2026-11-30T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "sparkctl lab",
    "GIT_COMMITTER_EMAIL": "lab@sparkctl.invalid",
    "GIT_COMMITTER_DATE": "2026-11-30T00:00:00+00:00",
}
_COMMIT_MESSAGE = "synthetic serving kit of the sparkctl lab\n"


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
"""


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


def files() -> dict[str, bytes]:
    """Every file of the kit by path relative to its root."""
    out = {
        "README.md": _README,
        MANIFEST: (json.dumps(manifest(), indent=2, sort_keys=True) + "\n").encode(),
        "adapter/sitecustomize.py": _ADAPTER,
        "runtime/README": _RUNTIME_README,
        DOCKERFILE: _DOCKERFILE,
        "configs/cluster.example.json": (json.dumps(_CLUSTER_EXAMPLE, indent=2) + "\n").encode(),
    }
    for rel, (_before, after) in OVERLAYS.items():
        out[f"{OVERLAY_SOURCE}/{rel}"] = after
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
