"""A site's files on disk: what would change (a unified diff, secrets never shown), and writing them
only after the whole site, as it would be, validated.

The new files are first laid out in a staging directory beside the site (a copy of what the site
holds, the new files over it) and loaded with the model (``sparkctl.model.load_inventory``): a site
that does not validate is left there, under that temporary name, and nothing in the site changes.
A site that validates is written file by file, each to a temporary name in its own directory, then
renamed over the old one (a reader sees the old file or the new one, never half of one).
"""

from __future__ import annotations

import difflib
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkctl.errors import InputError, SparkctlError
from sparkctl.model import Cluster, load_inventory


@dataclass(frozen=True)
class SiteFile:
    """One file of the site: where (absolute), its text, its mode, and whether it holds a secret."""

    path: Path
    text: str
    mode: int = 0o644
    secret: bool = False


@dataclass(frozen=True)
class Change:
    file: SiteFile
    old: str | None  # None: the file does not exist yet

    @property
    def new(self) -> bool:
        return self.old is None


def new_api_key() -> str:
    return secrets.token_urlsafe(32)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InputError(f"{path} cannot be read: {exc.strerror}", hint="fix its permissions") from exc


def changes(files: list[SiteFile]) -> list[Change]:
    """The files whose content differs from what is on disk (a secret file that exists is kept)."""
    out = []
    for f in files:
        old = _read(f.path)
        if f.secret and old is not None:
            continue  # an existing key is kept as it is: never rewritten, never shown
        if old != f.text:
            out.append(Change(f, old))
    return out


def diff(site_dir: Path, found: list[Change]) -> str:
    """A unified diff of the changes, paths relative to the site; secrets as one line, no content."""
    parts = []
    for ch in found:
        try:
            rel = str(ch.file.path.relative_to(site_dir))
        except ValueError:
            rel = str(ch.file.path)
        if ch.file.secret:
            parts.append(f"+++ {rel} (new secret, mode {ch.file.mode:04o}; content not shown)\n")
            continue
        old = (ch.old or "").splitlines(keepends=True)
        new = ch.file.text.splitlines(keepends=True)
        before = "/dev/null" if ch.new else f"a/{rel}"
        parts.append("".join(difflib.unified_diff(old, new, before, f"b/{rel}")))
    return "".join(parts)


def staged_site(site_dir: Path, files: list[SiteFile]) -> Path:
    """A staging directory beside the site: the site's current files with ``files`` laid over them."""
    site_dir = site_dir.absolute()
    site_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{site_dir.name}.init-", dir=site_dir.parent))
    if site_dir.is_dir():
        shutil.copytree(site_dir, stage, dirs_exist_ok=True, symlinks=True)
    for f in files:
        try:
            rel = f.path.relative_to(site_dir)
        except ValueError:
            continue  # a file outside the site (a shared known_hosts): not part of the inventory
        dest = stage / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if f.secret and f.path.exists():
            continue
        dest.write_text(f.text)
        os.chmod(dest, f.mode)
    return stage


def _atomic_write(f: SiteFile) -> None:
    f.path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{f.path.name}.", suffix=".tmp", dir=f.path.parent)
    try:
        os.fchmod(fd, f.mode)  # before the first byte: a secret is never readable by others
        with os.fdopen(fd, "w") as out:
            out.write(f.text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, f.path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write(site_dir: Path, files: list[SiteFile], found: list[Change],
          load: Callable[[Path], Cluster] = load_inventory) -> Cluster:
    """Validate the site as it would be, then write the changed files; the loaded Cluster.

    A site that does not validate: InputError (exit 2) with the model's problems, the staging
    directory named and left for inspection, nothing in the site touched."""
    stage = staged_site(site_dir, files)
    try:
        cluster = load(stage)
    except SparkctlError as exc:
        raise InputError(
            f"the site init would write does not validate: {exc.message}",
            hint=f"nothing in {site_dir} changed; the files are in {stage} — fix the flags or the --from "
                 "file and run init again",
            details=exc.details,
        ) from exc
    for ch in found:
        _atomic_write(ch.file)
    shutil.rmtree(stage, ignore_errors=True)
    return cluster


__all__ = ["Change", "SiteFile", "changes", "diff", "new_api_key", "staged_site", "write"]
