"""The lab's base engine image, ``sparkctl-lab/engine-base:bookworm``: built offline, imported on the head.

A real Spark runs an SGLang image; the lab's stands in for it with a small Debian tree
(debootstrap minbase + python3 + g++, cached beside the lab rootfs) holding

- the rank simulator, importable as ``sparkctl_sim`` (copied from this checkout),
- the probe file the simulator reads (``sparkctl/qa/probes/r4.json``, data only),
- ``/usr/local/bin/sglang``: ``sglang serve <argv>`` runs the simulator with the argv the product
  renders for a real rank (the process shows as ``… sglang serve …``, as SGLang's own does),
- the stock ("before") version of each file the synthetic kit overlays, under
  ``/sgl-workspace/sglang/<rel>`` (see ``kit``),
- a C++ compiler: a kit's stage-time build compiles its sources inside the engine image (R4's
  ``stage()`` runs ``g++ … adapter/row_store.cpp -o adapter/librow_store.so`` there), so the lab's
  image needs one as the publisher's does,
- ``SGLANG_BUILD_COMMIT`` in its environment (``kit.SGLANG_COMMIT``), which R4's launcher compares
  with the kit's ``versions.lock.json`` ``sglang_commit``.

`lab up` turns that into a tar (``docker import`` needs no registry) and imports it into the
HEAD's engine only; the workers get images the way a site's do, through `sparkctl stage image`.
The image carries a label with the digest of everything that went into it, so a re-up with
nothing changed imports nothing.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import sparkctl_sim
from sparkctl.errors import SparkctlError
from sparkctl_lab import host, kit, rootfs, state

IMAGE = kit.BASE_IMAGE
CONTENT_LABEL = "org.sparkctl.lab.content"
# g++: the kit's stage-time build compiles adapter/row_store.cpp inside this image (see ``kit``).
PACKAGES: tuple[str, ...] = ("python3", "g++")
# Bump when the tree, the tar or the import recipe below change.
_RECIPE_VERSION = "2"
_COMPLETE_MARKER = ".sparkctl-engine-complete"
_IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The image's environment (``docker import --change 'ENV K=V'``); part of the content label.
IMAGE_ENV: dict[str, str] = {"PATH": _IMAGE_PATH, "SGLANG_BUILD_COMMIT": kit.SGLANG_COMMIT}
# Not needed in a container image (docs, locales, apt's caches) or made by the runtime (dev, proc, sys).
_EXCLUDE_CONTENTS = (
    "dev",
    "proc",
    "sys",
    "run",
    "tmp",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/cache/apt",
    "var/cache/debconf",
    "var/lib/apt/lists",
    "var/log",
)
# Parts of the compiler a kit's build never runs (link-time optimisation, sanitizer and profiling
# runtimes and tools, the C compiler, static archives) and glibc's iconv modules: left out whole,
# matched against the path inside the image. g++ adds 227 MiB to the tree (docs and the like
# excluded). What R4's compile line needs stays: the g++ driver, cc1plus, as, ld, the headers,
# libstdc++, libgcc, libc's development files (its linker scripts and libc_nonshared.a among them).
_OMIT_COMPILER_PARTS = (
    "usr/lib/gcc/*/*/lto1",
    "usr/bin/lto-dump*",
    "usr/bin/*-lto-dump*",
    "usr/lib/gcc/*/*/lib[alt]san.*",
    "usr/lib/gcc/*/*/libubsan.*",
    "usr/lib/gcc/*/*/libhwasan.*",
    "usr/lib/gcc/*/*/lib*san_preinit.o",
    "usr/lib/*-linux-gnu/lib[alt]san.so*",
    "usr/lib/*-linux-gnu/libubsan.so*",
    "usr/lib/*-linux-gnu/libhwasan.so*",
    "usr/lib/*-linux-gnu/libgprofng.so*",
    "usr/lib/*-linux-gnu/gprofng",
    "usr/bin/gprofng",
    "usr/bin/*-gprofng",
    "usr/bin/gp-*",
    "usr/bin/*-gp-*",
    "usr/bin/gcov*",
    "usr/bin/*-gcov*",
    # g++ on a .cpp runs cc1plus, never the C compiler proper; a -shared build links the shared
    # libraries, never these static archives; nor does it run gold or dwp; nothing in the image
    # converts character sets through glibc's iconv modules.
    "usr/lib/gcc/*/*/cc1",
    "usr/lib/gcc/*/*/libstdc++.a",
    "usr/lib/gcc/*/*/libstdc++fs.a",
    "usr/lib/*-linux-gnu/libc.a",
    "usr/lib/*-linux-gnu/libm-*.a",
    "usr/lib/*-linux-gnu/libmvec.a",
    "usr/bin/*ld.gold",
    "usr/bin/*dwp",
    "usr/lib/*-linux-gnu/gconv",
)
_FIXED_MTIME = 1796083200  # 2026-12-01, for the files added to the tree

SGLANG_SCRIPT = b'''#!/usr/bin/python3
"""sparkctl lab engine: `sglang serve <SGLang argv>` runs the rank simulator with that argv."""
import sys

from sparkctl_sim.rank import main

sys.exit(main())
'''


# --- the Debian tree ------------------------------------------------------------------------


def tree_key() -> str:
    text = "\n".join([rootfs.SUITE, rootfs.VARIANT, _RECIPE_VERSION, *sorted(PACKAGES)])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def tree_path() -> Path:
    return rootfs.cache_dir() / f"engine-base-{rootfs.SUITE}-{tree_key()}"


def ensure_tree(log_path: Path | None = None) -> tuple[Path, float | None]:
    """The cached Debian tree of the image (path, build seconds or None when cached)."""
    path = tree_path()
    if (path / _COMPLETE_MARKER).is_file():
        return path, None
    host.require_tools(["debootstrap"])
    tmp, mirror, seconds = rootfs.debootstrap(path, PACKAGES, "the lab engine image", log_path)
    (tmp / _COMPLETE_MARKER).write_text(f"mirror={mirror.uri}\nbuild_seconds={seconds:.1f}\n")
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    for other in path.parent.glob(f"engine-base-{rootfs.SUITE}-*"):
        if other != path and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)
    return path, seconds


# --- what the image adds to the tree --------------------------------------------------------


def python_site(tree: Path) -> str:
    """Debian's site directory for local packages of the tree's python3 (e.g. python3.11)."""
    versions = sorted(p.name for p in (tree / "usr/lib").glob("python3.*") if p.name[8:].isdigit())
    if not versions:
        raise SparkctlError(f"no python3 in the engine image tree {tree}", hint=f"remove {tree} and re-run")
    return f"usr/local/lib/{versions[-1]}/dist-packages"


def added_files(tree: Path) -> dict[str, tuple[bytes, int]]:
    """Path inside the image (no leading slash) -> (content, mode) of every file the lab adds."""
    sim_root = Path(sparkctl_sim.__file__).parent
    site = python_site(tree)
    out: dict[str, tuple[bytes, int]] = {"usr/local/bin/sglang": (SGLANG_SCRIPT, 0o755)}
    for f in sorted(sim_root.rglob("*.py")):
        out[f"{site}/sparkctl_sim/{f.relative_to(sim_root).as_posix()}"] = (f.read_bytes(), 0o644)
    # The published probes the simulator recognises (sparkctl_sim.probes), where it looks for them: the
    # data file only, at the path it has in the wheel (nothing in the image imports sparkctl).
    probes = sim_root.parent / "sparkctl" / "qa" / "probes"
    for f in sorted(probes.glob("*.json")):
        out[f"{site}/sparkctl/qa/probes/{f.name}"] = (f.read_bytes(), 0o644)
    for path, data in kit.image_files().items():
        out[path.lstrip("/")] = (data, 0o644)
    return out


def import_changes() -> list[str]:
    """The Dockerfile instructions ``docker import --change`` applies (environment and command)."""
    return [*(f"ENV {k}={v}" for k, v in IMAGE_ENV.items()), 'CMD ["sglang", "--help"]']


def content_key(tree: Path, added: dict[str, tuple[bytes, int]]) -> str:
    h = hashlib.sha256(f"{tree.name}\n{_RECIPE_VERSION}\n".encode())
    for line in [*import_changes(), *_OMIT_COMPILER_PARTS]:
        h.update(f"{line}\0".encode())
    for path, (data, mode) in sorted(added.items()):
        h.update(f"{path}\0{mode:o}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _excluded(rel: str) -> bool:
    """Left out of the tar: the contents of an _EXCLUDE_CONTENTS directory, an omitted compiler part."""
    return any(rel.startswith(prefix + "/") for prefix in _EXCLUDE_CONTENTS) or any(
        fnmatch.fnmatchcase(rel, pattern) for pattern in _OMIT_COMPILER_PARTS
    )


def write_tar(tree: Path, added: dict[str, tuple[bytes, int]], out: Path) -> None:
    """The image's root filesystem as a tar: the tree (sorted, excluded contents left out), then
    the added files with their parent directories."""
    tmp = out.with_name(out.name + ".partial")
    seen: set[str] = set()
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(tree):
            dirnames.sort()
            base = Path(dirpath)
            rel_dir = base.relative_to(tree).as_posix()
            for name in sorted([*dirnames, *filenames]):
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                if _excluded(rel) or rel == _COMPLETE_MARKER:
                    continue
                tar.add(base / name, arcname=rel, recursive=False)
                seen.add(rel)
            dirnames[:] = [d for d in dirnames if not _excluded(d if rel_dir == "." else f"{rel_dir}/{d}")]
        for path, (data, mode) in sorted(added.items()):
            parts = path.split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in seen:
                    info = tarfile.TarInfo(parent)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, _FIXED_MTIME
                    tar.addfile(info)
                    seen.add(parent)
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), mode, _FIXED_MTIME
            tar.addfile(info, io.BytesIO(data))
            seen.add(path)
    tmp.replace(out)


@dataclass(frozen=True)
class Tarball:
    path: Path
    key: str  # the content label the imported image carries
    tree_build_s: float | None
    tar_s: float | None  # None when the cached tar was reused


def ensure_tarball(log_path: Path | None = None) -> Tarball:
    tree, tree_s = ensure_tree(log_path)
    added = added_files(tree)
    key = content_key(tree, added)
    out = rootfs.cache_dir() / f"engine-base-{key[:16]}.tar"
    if out.is_file():
        return Tarball(out, key, tree_s, None)
    t0 = time.monotonic()
    write_tar(tree, added, out)
    for other in out.parent.glob("engine-base-*.tar"):
        if other != out:
            other.unlink(missing_ok=True)
    return Tarball(out, key, tree_s, time.monotonic() - t0)


# --- into the head's engine -----------------------------------------------------------------


def _docker(
    machine: str, st: state.LabState, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    from sparkctl_lab.machines import node_exec

    return node_exec(machine, ["docker", *args], st, timeout=timeout)


def wait_engine(machine: str, st: state.LabState, timeout: float = 60) -> None:
    """Wait until the machine's Docker engine answers; name what is wrong when it does not."""
    if host.wait_until(lambda: _docker(machine, st, "info", "--format", "{{.ServerVersion}}").returncode == 0,
                       timeout, 0.5):
        return
    from sparkctl_lab.machines import node_exec

    unit = node_exec(machine, ["systemctl", "is-active", "docker.service"], st).stdout.strip()
    journal = node_exec(machine, ["journalctl", "-b", "-u", "docker.service", "-n", "8", "--no-pager"], st)
    raise SparkctlError(
        f"{machine}: the Docker engine does not answer (docker.service is {unit or 'unknown'})",
        hint=f"sparkctl lab exec {machine} -- journalctl -b -u docker.service",
        details=journal.stdout.strip().splitlines()[-8:],
    )


def image_key(machine: str, st: state.LabState) -> str | None:
    """The content label of the machine's base image, or None when it has none."""
    proc = _docker(machine, st, "image", "inspect", "--format",
                   f'{{{{ index .Config.Labels "{CONTENT_LABEL}" }}}}', IMAGE)
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def import_image(machine: str, st: state.LabState, tarball: Tarball) -> float | None:
    """``docker import`` the tarball on `machine` unless its image already has this content.
    Return the seconds it took, or None when nothing was imported."""
    from sparkctl_lab.machines import node_argv

    wait_engine(machine, st)
    if image_key(machine, st) == tarball.key:
        return None
    changes = [f"LABEL {CONTENT_LABEL}={tarball.key}", *import_changes()]
    argv = node_argv(machine, [
        "docker", "import", *(arg for change in changes for arg in ("--change", change)), "-", IMAGE,
    ], st)
    t0 = time.monotonic()
    with open(tarball.path, "rb") as f:
        proc = subprocess.run(argv, stdin=f, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise SparkctlError(
            f"{machine}: docker import of {IMAGE} failed (exit {proc.returncode})",
            details=(proc.stderr or proc.stdout).strip().splitlines()[-6:],
        )
    # The image this replaced, if any, is now untagged: remove it.
    _docker(machine, st, "image", "prune", "--force", "--filter", f"label={CONTENT_LABEL}")
    return time.monotonic() - t0
