"""The one reader of staging manifests, and the status probe's cheap check of a rank's shards.

Standard library only (runs on the nodes: the probe and, through ``sparkctl.stage``, the stage
modules). Two kinds of manifest are written by staging:

* ``<model_dir>/.sparkctl-manifest.json``: the checkpoint's files, sizes and SHA-256
  (``sparkctl.stage.manifest`` builds and verifies it);
* ``<engram_dir>/manifest-r{rank}of{tp}.json``: one rank's packed Engram shards, ``"format":
  "DSV41EN1"`` (``sparkctl.stage.dsv41en1`` packs and verifies them).
"""

import json
import os

CHECKPOINT_MANIFEST = ".sparkctl-manifest.json"
SHARD_FORMAT = "DSV41EN1"


class ManifestError(ValueError):
    """A manifest is unreadable or not of the expected kind (the message names the file)."""


def shard_manifest_name(rank, tp):
    return f"manifest-r{rank}of{tp}.json"


def read(path, fmt=None):
    """The manifest at ``path`` (None when it does not exist).

    Raises ManifestError when it cannot be read or parsed, has no ``files`` list, or (with ``fmt``)
    records another ``format``.
    """
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path}: unreadable manifest ({exc})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise ManifestError("{}: not a {} manifest".format(path, fmt or "sparkctl"))
    if fmt is not None and doc.get("format") != fmt:
        raise ManifestError(f"{path}: not a {fmt} manifest")
    return doc


def read_checkpoint(model_dir):
    return read(os.path.join(model_dir, CHECKPOINT_MANIFEST))


def read_shards(engram_dir, rank, tp):
    return read(os.path.join(engram_dir, shard_manifest_name(rank, tp)), fmt=SHARD_FORMAT)


def shards_on_disk(engram_dir, rank, tp):
    """Every file the rank's shard manifest records is present, same size and modification time.

    Structural only (``stat``, no reading): what ``status`` can afford on every call. The full
    check is ``sparkctl.stage.dsv41en1.check_rank``.
    """
    name = shard_manifest_name(rank, tp)
    try:
        doc = read_shards(engram_dir, rank, tp)
    except ManifestError as exc:
        return {"verified": False, "problem": str(exc)[:200]}
    if doc is None:
        return {"verified": False, "problem": name + " missing in " + engram_dir}
    if doc.get("rank") != rank or doc.get("tp") != tp:
        return {"verified": False, "problem": f"{name} records rank {doc.get('rank')} of {doc.get('tp')}"}
    files = [f for f in doc["files"] if isinstance(f, dict)]
    if not files:
        return {"verified": False, "problem": name + " lists no files"}
    total = 0
    for entry in files:
        fname = str(entry.get("name"))
        try:
            st = os.stat(os.path.join(engram_dir, fname))
        except OSError:
            return {"verified": False, "problem": fname + " missing"}
        if entry.get("size") is not None and st.st_size != entry.get("size"):
            return {"verified": False,
                    "problem": "{} is {} B, manifest says {}".format(fname, st.st_size, entry.get("size"))}
        if entry.get("mtime_ns") and entry.get("mtime_ns") != st.st_mtime_ns:
            return {"verified": False, "problem": fname + " modified after packing"}
        total += st.st_size
    return {"verified": True, "files": len(files), "bytes": total}
