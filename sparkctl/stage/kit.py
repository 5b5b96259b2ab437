"""Where a serving kit comes from: a git commit, a directory or a tarball, made into one checked tree.

Standard library only: it runs as the ``spark_kit_source`` module on the controller (git, and a
``dir``/``tar`` kit kept there) or on the head (a ``dir``/``tar`` kit kept there). The result is a
directory holding exactly the kit's tree (no ``.git``), its file manifest and version
(``sparkctl.nodeside.kit``), with every overlay checked against its ``after_sha256`` and the
manifest's overlays against the profile's list — before a byte moves to a node.

* git — the exact commit is fetched into a bare cache repository under the state directory
  (``<cache>/git/<hash of the URL>``), once: a commit the cache already holds is not fetched
  again. A branch or tag name is refused (it moves), and so is a commit the repository does not
  have. The tree is exported with ``git archive`` into ``<cache>/trees/<commit>``.
* dir — the directory itself is the tree (``.git`` inside it is ignored).
* tar — extracted (regular files and directories only) into ``<cache>/trees/tree-<16 hex>``.

A symbolic link in any of them is refused, named: the kit is staged as regular files, and a link
dropped on the way would leave the engine without a file it may need.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from typing import Any

from ..nodeside import kit as nk
from ..nodeside import progress as stage_progress

GIT_TIMEOUT_S = 1800


class KitSourceError(RuntimeError):
    """The kit cannot be obtained or is not the configured one (the message says what to fix)."""


def _git(
    args: list[str], cwd: str | None = None, timeout: float = GIT_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env,
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise KitSourceError("git is not installed on this machine (needed for a git kit)") from None
    except subprocess.TimeoutExpired:
        raise KitSourceError(f"git {args[0]} did not finish within {timeout:.0f} s") from None


def _git_fetch(args: list[str], cwd: str, progress: stage_progress.Progress | None,
               timeout: float = GIT_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``git fetch --quiet …``, or with ``progress`` ``git fetch --progress …`` whose phases
    (objects counted, received with their bytes, deltas resolved) are written to it as git prints them."""
    if progress is None:
        return _git(["fetch", "--quiet", *args], cwd=cwd, timeout=timeout)
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    argv = ["git", "fetch", "--progress", *args]
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise KitSourceError("git is not installed on this machine (needed for a git kit)") from None

    def on_line(text: str) -> None:
        phase = stage_progress.git_phase(text)
        if phase is None:
            return
        name, done, total, received = phase
        fields: dict[str, Any] = {"current": name, "count_done": done, "count_total": total}
        if received is not None:
            fields["bytes_done"] = received
        progress.set(**fields)

    timed_out, kept = stage_progress.follow_lines(proc, proc.stderr, on_line, timeout)
    if timed_out:
        raise KitSourceError(f"git fetch did not finish within {timeout:.0f} s")
    errors = [line for line in kept if stage_progress.git_phase(line) is None]
    return subprocess.CompletedProcess(argv, proc.returncode, "", "\n".join(errors))


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit {proc.returncode}"


def check_commit(commit: Any) -> str:
    """The commit as given when it is 40 lowercase hex; a branch, tag or short hash is refused."""
    text = str(commit or "").strip()
    if nk.COMMIT.match(text):
        return text
    if len(text) < 40 and all(c in "0123456789abcdef" for c in text.lower()) and text:
        why = "an abbreviated commit"
    else:
        why = "a branch or tag name (it moves)" if text else "empty"
    raise KitSourceError(
        f"sparkctl_kit.commit {text!r} is {why}: pin the full 40-hex commit "
        f"(git rev-parse {text or 'HEAD'} in the kit's repository)"
    )


def cache_repo(cache_dir: str, url: str) -> str:
    return os.path.join(cache_dir, "git", hashlib.sha256(url.encode()).hexdigest()[:16])


def _has_commit(repo: str, commit: str) -> bool:
    return _git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd=repo).returncode == 0


def fetch(url: str, commit: str, cache_dir: str, offline: bool = False,
          progress_path: str = "") -> tuple[str, bool]:
    """The bare cache repository holding ``commit`` from ``url``; (path, fetched this time).
    ``offline``: never fetch; a commit the cache does not hold yet is refused. ``progress_path``:
    where git's progress (objects, bytes) is written while it fetches (nodeside.progress)."""
    commit = check_commit(commit)
    repo = cache_repo(cache_dir, url)
    if offline and not (os.path.isdir(os.path.join(repo, "objects")) and _has_commit(repo, commit)):
        raise KitSourceError(f"the kit's commit {commit[:12]} is not fetched on this controller yet")
    if not os.path.isdir(os.path.join(repo, "objects")):
        os.makedirs(repo, exist_ok=True)
        init = _git(["init", "--quiet", "--bare", repo])
        if init.returncode:
            raise KitSourceError(f"cannot create the kit cache {repo}: {_tail(init)}")
    if _has_commit(repo, commit):
        return repo, False
    progress = None
    if progress_path:
        progress = stage_progress.Progress("controller", step="fetch", state="fetching", path=progress_path,
                                           count_unit="objects")
        progress.current = f"git fetch {commit[:12]}"
        progress.write()
    # By commit first (servers that allow it, protocol v2 ones do), then every branch and tag.
    first = _git_fetch(["--no-tags", "--", url, commit], repo, progress)
    if first.returncode or not _has_commit(repo, commit):
        every = _git_fetch(["--no-tags", "--", url, "+refs/heads/*:refs/sparkctl/heads/*",
                            "+refs/tags/*:refs/sparkctl/tags/*"], repo, progress)
        if every.returncode:
            if progress is not None:
                progress.set(state="failed", error=_tail(every))
            raise KitSourceError(f"cannot fetch the kit from {url}: {_tail(every)}")
    if progress is not None:
        progress.set(state="done", count_done=progress.count_total)
    if not _has_commit(repo, commit):
        raise KitSourceError(
            f"sparkctl_kit.commit {commit} does not exist in {url} (fetched every branch and tag); "
            "check the commit and the URL"
        )
    return repo, True


def export(repo: str, commit: str, dest: str) -> bool:
    """``git archive`` of ``commit`` unpacked at ``dest`` (kept when already there); True when written."""
    if os.path.isdir(dest):
        return False
    part = dest + nk.PARTIAL
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    archive = os.path.join(os.path.dirname(dest), f".{commit}.tar")
    proc = _git(["-c", "core.autocrlf=false", "archive", "--format=tar", "-o", archive, commit], cwd=repo)
    if proc.returncode:
        raise KitSourceError(f"git archive of {commit} failed: {_tail(proc)}")
    try:
        _extract(archive, part)
    finally:
        os.unlink(archive)
    os.replace(part, dest)
    return True


def _extract(archive: str, dest: str) -> None:
    """Regular files, hard links and directories of a tar (a symbolic link, anything else, or a path
    leaving ``dest``, refused)."""
    links: list[str] = []
    try:
        with tarfile.open(archive) as tf:
            for member in tf.getmembers():
                name = os.path.normpath(member.name)
                if name in (".", ""):
                    continue
                if os.path.isabs(member.name) or name.startswith(".."):
                    raise KitSourceError(f"{archive}: {member.name!r} leaves the kit directory")
                if member.issym():  # never dropped silently: the engine may need it
                    links.append(f"{member.name} -> {member.linkname}")
                elif not (member.isfile() or member.isdir() or member.islnk()):
                    raise KitSourceError(f"{archive}: {member.name!r} is not a regular file or directory")
            if links:
                raise KitSourceError(
                    f"{archive}: the kit holds {len(links)} symbolic link(s): {', '.join(links[:10])}"
                    f"{f' (and {len(links) - 10} more)' if len(links) > 10 else ''}; a kit is staged as "
                    "regular files only, so they would be missing on the nodes — replace each link by "
                    "the file it points to, or remove it"
                )
            # A hard link is the same bytes under a second name: extracted as a regular file.
            members = [m for m in tf.getmembers() if m.isfile() or m.isdir() or m.islnk()]
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12
                tf.extractall(dest, members=members, filter="data")
            else:  # every member was checked above
                tf.extractall(dest, members=members)
    except (tarfile.TarError, OSError) as exc:
        raise KitSourceError(f"{archive}: cannot unpack ({exc})") from exc


def _from_tar(path: str, cache_dir: str) -> tuple[str, bool]:
    if not os.path.isfile(path):
        raise KitSourceError(f"sparkctl_kit.path {path}: no such file")
    trees = os.path.join(cache_dir, "trees")
    os.makedirs(trees, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tar-", suffix=nk.PARTIAL, dir=trees)
    try:
        _extract(path, tmp)
        digest, _ = nk.tree(tmp)
        dest = os.path.join(trees, "tree-" + digest[:16])
        if os.path.isdir(dest):
            return dest, False
        os.replace(tmp, dest)
        return dest, True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def prepare(
    source: str,
    cache_dir: str,
    *,
    url: str | None = None,
    commit: str | None = None,
    path: str | None = None,
    sha256: str | None = None,
    manifest: str = "patches/manifest.json",
    overlay_source: str = "patches/source",
    overlays: list[str] | None = None,
    offline: bool = False,
    progress_path: str = "",
) -> dict[str, Any]:
    """Obtain the kit and check it; the dict the playbook passes on (``offline``: a git kit only
    from the cache, see :func:`fetch`; ``progress_path``: git's progress, see :func:`fetch`).

    ``{"version", "tree_sha256", "dir", "manifest" (file manifest), "overlays" (overlay manifest),
    "changed" (fetched or unpacked this time)}``. Raises KitSourceError naming what is wrong.
    """
    changed = False
    if source == "git":
        if not url:
            raise KitSourceError("sparkctl_kit.url is required for a git kit")
        commit = check_commit(commit)
        repo, changed = fetch(url, commit, cache_dir, offline=offline, progress_path=progress_path)
        tree_dir = os.path.join(cache_dir, "trees", commit)
        os.makedirs(os.path.dirname(tree_dir), exist_ok=True)
        changed = export(repo, commit, tree_dir) or changed
        where = {"source": "git", "url": url, "commit": commit}
    elif source == "dir":
        if not path or not os.path.isdir(path):
            raise KitSourceError(f"sparkctl_kit.path {path}: no such directory")
        tree_dir, where = path, {"source": "dir", "path": str(path)}
    elif source == "tar":
        tree_dir, changed = _from_tar(str(path), cache_dir)
        where = {"source": "tar", "path": str(path)}
    else:
        raise KitSourceError(f"sparkctl_kit.source {source!r}: want git, dir or tar")
    digest, files = nk.tree(tree_dir)
    if sha256 and digest != sha256:
        raise KitSourceError(
            f"the kit's tree digest {digest} differs from sparkctl_kit.sha256 {sha256} "
            f"({where.get('url') or where.get('path')})"
        )
    overlay_doc, problems = nk.check_overlays(tree_dir, manifest, overlay_source, overlays)
    if problems:
        raise KitSourceError(
            "the kit fails its overlay checks: " + "; ".join(nk.describe(p) for p in problems)
        )
    version = nk.version_of(source, commit, digest)
    return {
        "version": version,
        "tree_sha256": digest,
        "dir": tree_dir,
        "manifest": nk.file_manifest(digest, files, where),
        "overlays": overlay_doc,
        "changed": changed,
    }
