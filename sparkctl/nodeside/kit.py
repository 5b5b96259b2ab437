"""The serving kit as files: its tree digest, its overlay manifest and the checks of a staged copy.

Standard library only: the same code runs on the controller (the kit fetched from git or read from a
directory or a tarball) and on the nodes (shipped to the spark_kit modules as
``ansible.module_utils.sparkctl.nodeside.kit``), so a kit is judged by one set of rules everywhere.

* Tree digest — SHA-256 of the text ``"<sha256>  <relpath>\\n"`` per regular file, sorted by
  relpath (what ``sha256sum`` prints for the sorted file list). ``.git`` and the files staging
  keeps beside a kit (``.sparkctl-*``, ``*.partial``) are not part of the tree. A kit staged from a
  directory or a tarball is versioned by it: ``tree-<first 16 hex>``; a git kit by its commit.
* Overlay manifest — the kit's ``patches/manifest.json`` (R4's format): ``{"<rel>": {"before_sha256":
  hex | null, "after_sha256": hex}, …}``. Each overlay file lives in the kit at
  ``<overlay_source>/<rel>`` and must hash to ``after_sha256``; the file it replaces in the engine
  image (``<overlay_target>/<rel>``) hashes to ``before_sha256`` (``null``: a new file).
* Staged copy — ``<store>/<version>`` on every node, checked file by file against the kit's file
  manifest; ``<store>/current`` is a symlink switched atomically once every node holds the version.

Every problem is a dict ``{"path", "problem", "expected", "actual"}``; :func:`describe` turns one
into the line a user reads (file, expected and actual digest).
"""

import contextlib
import hashlib
import json
import os
import re

HEX64 = re.compile(r"^[0-9a-f]{64}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
CURRENT = "current"
# Files staging keeps in a version directory: not part of the kit's tree.
OWN_PREFIX = ".sparkctl-"
PARTIAL = ".partial"
EXCLUDED_DIRS = frozenset({".git"})
HASH_BLOCK = 1 << 20


class KitError(ValueError):
    """The kit or its overlay manifest is unusable (the message names the file)."""


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(HASH_BLOCK), b""):
            h.update(block)
    return h.hexdigest()


def _own(name):
    return name.startswith(OWN_PREFIX) or name.endswith(PARTIAL)


def list_files(root):
    """Relative POSIX paths of the kit's regular files, sorted (no .git, no staging metadata).

    Symbolic links are not followed and not listed: a kit is a tree of regular files (:func:`tree`
    refuses a kit holding one, :func:`verify_tree` reports one in a staged copy, see :func:`strays`).
    """
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS and not _own(d)
                             and not os.path.islink(os.path.join(dirpath, d)))
        rel_dir = os.path.relpath(dirpath, root)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if _own(name) or os.path.islink(path) or not os.path.isfile(path):
                continue
            rel = name if rel_dir == "." else (rel_dir + "/" + name).replace(os.sep, "/")
            out.append(rel)
    return sorted(out)


def strays(root):
    """What is in the directory ``root`` besides the kit's tree and staging's own files:
    ``(partials, links)`` — relative paths of ``*.partial`` entries (left by an interrupted copy)
    and of symbolic links (``(rel, target)``; a kit holds regular files only), sorted."""
    partials, links = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)

        def rel(name, rel_dir=rel_dir):
            return name if rel_dir == "." else (rel_dir + "/" + name).replace(os.sep, "/")

        keep = []
        for name in sorted(dirnames):
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                links.append((rel(name), os.readlink(path)))
            elif name.endswith(PARTIAL):
                partials.append(rel(name))
            elif name not in EXCLUDED_DIRS and not _own(name):
                keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                links.append((rel(name), os.readlink(path)))
            elif name.endswith(PARTIAL):
                partials.append(rel(name))
    return sorted(partials), sorted(links)


def digest_of(entries):
    """The tree digest of ``[{"path", "sha256"}, …]`` (any order)."""
    h = hashlib.sha256()
    for e in sorted(entries, key=lambda e: e["path"]):
        h.update("{}  {}\n".format(e["sha256"], e["path"]).encode("utf-8"))
    return h.hexdigest()


def tree(root):
    """``(tree_sha256, [{"path", "size", "sha256"}, …])`` of the directory ``root``.

    A symbolic link in the kit is refused (KitError naming each): a kit is staged as regular files,
    so the link would be missing on the nodes while the engine may need it.
    """
    if not os.path.isdir(root):
        raise KitError(root + ": no such directory")
    links = strays(root)[1]
    if links:
        shown = ", ".join(f"{rel} -> {target}" for rel, target in links[:10])
        more = f" (and {len(links) - 10} more)" if len(links) > 10 else ""
        raise KitError(f"{root}: the kit holds {len(links)} symbolic link(s): {shown}{more}; a kit is "
                       "staged as regular files only, so they would be missing on the nodes — replace "
                       "each link by the file it points to, or remove it")
    files = []
    for rel in list_files(root):
        path = os.path.join(root, rel)
        files.append({"path": rel, "size": os.path.getsize(path), "sha256": file_sha256(path)})
    return digest_of(files), files


def tree_digest(root):
    """The tree digest of the directory ``root`` (see the module's docstring)."""
    return tree(root)[0]


def version_of(source, commit, tree_sha256):
    """``<commit>`` for a git kit, ``tree-<first 16 hex of the tree digest>`` otherwise."""
    if source == "git":
        if not COMMIT.match(str(commit or "")):
            raise KitError(f"commit {commit!r} is not a full 40-hex commit")
        return str(commit)
    return "tree-" + tree_sha256[:16]


def file_manifest(tree_sha256, files, source):
    """The kit's file manifest in the staging format (``sparkctl.stage.manifest``): what the chain
    transfer moves and every node is verified against."""
    return {"version": 1, "files": [dict(f) for f in files], "total_bytes": sum(f["size"] for f in files),
            "source": dict(source, tree_sha256=tree_sha256)}


def safe_rel(rel, where):
    norm = os.path.normpath(str(rel))
    if (not rel or os.path.isabs(rel) or norm == "." or norm.startswith("..") or "\0" in rel
            or norm.replace(os.sep, "/") != rel):
        raise KitError(f"{where}: unsafe or non-normal path {rel!r}")
    return rel


def read_json_object(path, missing, unreadable, wanted, error=KitError, where=None):
    """The non-empty JSON object in ``path``; otherwise ``error`` raised with ``missing``, ``unreadable
    (why)`` or ``wanted`` (what the file should hold), each after ``where`` (default: the path)."""
    where = where or path
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise error(f"{where}: {missing}") from None
    except (OSError, ValueError) as exc:
        raise error(f"{where}: {unreadable} ({exc})") from None
    if not isinstance(doc, dict) or not doc:
        raise error(f"{where}: {wanted}")
    return doc


def read_overlay_manifest(path):
    """``{rel: {"before_sha256": hex | None, "after_sha256": hex}}`` from ``path``, validated."""
    doc = read_json_object(path, "overlay manifest missing", "unreadable overlay manifest",
                           "not an overlay manifest (want a non-empty {\"<rel>\": {before_sha256, "
                           "after_sha256}} object)")
    out = {}
    for rel, entry in doc.items():
        safe_rel(rel, path)
        if not isinstance(entry, dict):
            raise KitError(f"{path}: {rel}: want an object with before_sha256 and after_sha256")
        after, before = entry.get("after_sha256"), entry.get("before_sha256")
        if not isinstance(after, str) or not HEX64.match(after):
            raise KitError(f"{path}: {rel}: after_sha256 {after!r} is not 64 lowercase hex")
        if before is not None and (not isinstance(before, str) or not HEX64.match(before)):
            raise KitError(f"{path}: {rel}: before_sha256 {before!r} is not 64 lowercase hex or null")
        out[rel] = {"before_sha256": before, "after_sha256": after}
    return out


def problem(path, what, expected=None, actual=None):
    return {"path": path, "problem": what, "expected": expected, "actual": actual}


def describe(p, node=None):
    """One line: ``[node: ]path: problem (expected …, actual …)``."""
    text = "{}: {}".format(p["path"], p["problem"])
    if p.get("expected") is not None or p.get("actual") is not None:
        text += " (expected {}, actual {})".format(p.get("expected") or "absent", p.get("actual") or "absent")
    return (node + ": " + text) if node else text


def check_overlays(root, manifest_rel, overlay_source, overlays):
    """Problems of the kit at ``root``: the overlay manifest's keys against the profile's
    ``overlays`` list, and every ``<root>/<overlay_source>/<rel>`` against its ``after_sha256``.

    Returns ``(overlay_manifest, problems)``; the manifest is ``{}`` when it cannot be read.
    """
    mpath = os.path.join(root, manifest_rel)
    if overlays is not None and not overlays and not os.path.exists(mpath):
        return {}, []  # a kit used only as an image's build context: no overlays, no manifest
    try:
        doc = read_overlay_manifest(mpath)
    except KitError as exc:
        return {}, [problem(manifest_rel, str(exc).replace(mpath, manifest_rel, 1))]
    problems = []
    if overlays is not None:
        want, have = set(overlays), set(doc)
        for rel in sorted(have - want):
            problems.append(problem(manifest_rel, f"lists overlay {rel} that the profile does not declare"))
        for rel in sorted(want - have):
            problems.append(problem(manifest_rel, f"lacks overlay {rel} that the profile declares"))
    for rel, entry in sorted(doc.items()):
        kit_rel = overlay_source.rstrip("/") + "/" + rel
        path = os.path.join(root, kit_rel)
        actual = file_sha256(path) if os.path.isfile(path) and not os.path.islink(path) else None
        if actual != entry["after_sha256"]:
            what = "overlay missing" if actual is None else "overlay differs from the manifest's after_sha256"
            problems.append(problem(kit_rel, what, entry["after_sha256"], actual))
    return doc, problems


def verify_tree(root, expected, is_product=None):
    """Full check of a staged copy: every file of the file manifest ``expected`` present with its
    SHA-256, and no other file — nor a stray ``.partial`` or a symbolic link (anything extra would
    be mounted into the container too). ``is_product``: a predicate on relative paths naming what
    the kit's build steps made (``nodeside.kitbuild.product_filter``), checked against the build
    record instead of reported here."""
    if not os.path.isdir(root):
        return [problem(root, "kit version not staged on this node")]
    problems = []
    want = {e["path"]: e for e in expected.get("files", [])}
    for rel, e in sorted(want.items()):
        path = os.path.join(root, rel)
        if not os.path.isfile(path) or os.path.islink(path):
            problems.append(problem(rel, "missing", e["sha256"], None))
            continue
        actual = file_sha256(path)
        if actual != e["sha256"]:
            problems.append(problem(rel, "content differs", e["sha256"], actual))
    for rel in list_files(root):
        if rel not in want and not (is_product is not None and is_product(rel)):
            problems.append(problem(rel, "not part of the kit", None, file_sha256(os.path.join(root, rel))))
    partials, links = strays(root)
    for rel in partials:
        problems.append(problem(rel, "left by an interrupted copy (.partial): not part of the kit, "
                                     "but mounted into the container with it"))
    for rel, target in links:
        problems.append(problem(rel, f"symbolic link to {target} that the kit does not hold "
                                     "(a kit is regular files only)"))
    return problems


def check_base(overlays, digests):
    """Each overlay's ``before_sha256`` against the image's file it replaces.

    ``digests`` maps rel → the image file's SHA-256 (None: absent). Accepted: ``before`` or
    ``after`` (an image that already carries the patch); for a new file (``before`` null): absent
    or ``after``.
    """
    problems = []
    for rel, entry in sorted(overlays.items()):
        actual = digests.get(rel)
        before, after = entry.get("before_sha256"), entry["after_sha256"]
        if actual in (before, after):
            continue
        if before is None:
            problems.append(problem(rel, "image holds a file where the overlay adds a new one", None, actual))
        else:
            problems.append(problem(rel, "image file is neither the overlay's before nor after version",
                                    before, actual))
    return problems


def parse_sha256sum(text, target_root):
    """``{rel: sha256}`` from ``sha256sum <target_root>/<rel> …`` output (absent files not listed)."""
    prefix = target_root.rstrip("/") + "/"
    out = {}
    for line in text.splitlines():
        digest, sep, name = line.partition("  ")
        if sep and HEX64.match(digest) and name.startswith(prefix):
            out[name[len(prefix):]] = digest
    return out


def current_version(store):
    """The version ``<store>/current`` points at (None when there is no such link)."""
    try:
        target = os.readlink(os.path.join(store, CURRENT))
    except OSError:
        return None
    return os.path.basename(target.rstrip("/"))


def staged_check(store, version, expected, limit=50):
    """What a fast path asks of a node's kit: ``version`` verified file by file against ``expected``
    and ``current`` pointing at it. ``{"version", "current", "problems" (the first ``limit``),
    "count"}``; a wrong ``current`` is one of the problems."""
    problems = verify_tree(os.path.join(store, version), expected)
    current = current_version(store)
    if current != version:
        what = "points at {}, not the configured kit {}".format(current or "nothing", version)
        problems.append(problem(os.path.join(store, CURRENT), what))
    return {"version": version, "current": current, "problems": problems[:limit], "count": len(problems)}


def switch_current(store, version):
    """Point ``<store>/current`` at ``<store>/<version>`` atomically (a temporary link, renamed over
    the old one). Returns True when it changed."""
    link = os.path.join(store, CURRENT)
    if current_version(store) == version and os.path.islink(link):
        return False
    if not os.path.isdir(os.path.join(store, version)):
        raise KitError(f"{store}/{version}: no such kit version")
    tmp = os.path.join(store, OWN_PREFIX + "current." + str(os.getpid()))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(version, tmp)
    os.replace(tmp, link)
    dfd = os.open(store, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return True
