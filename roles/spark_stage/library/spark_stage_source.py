#!/usr/bin/python
"""Prepare the checkpoint on the head node and return its manifest (the staging idempotence key)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_stage_source
short_description: Prepare the checkpoint on the head node and return its manifest
description:
  - C(source=dir) takes a directory already on this host (C(path)); files are hard-linked into
    C(model_dir) (same filesystem) or copied through a verified C(.partial).
  - C(source=hf) downloads a Hugging Face repo at a pinned revision into C(model_dir) with
    huggingface_hub's own resumable downloader (run it with an interpreter that has huggingface_hub):
    the space is checked against the hub's file sizes before the download, and every file is
    compared with the hub's record (LFS SHA-256, or git blob id) after it, before any fan-out.
  - C(source=present) only (re)builds the manifest of what C(model_dir) holds (a controller
    directory copied by the role, or a re-run).
  - The manifest (every file's size and SHA-256) is saved as C(model_dir/.sparkctl-manifest.json);
    digests of files whose size and mtime are unchanged are reused unless C(full=true).
  - With C(expected) (a manifest), returns which files differ instead (C(missing)).
  - Check mode reports what would change and moves nothing.
options:
  source: {type: str, choices: [dir, hf, present], default: present, description: Where the bytes come from.}
  model_dir: {type: path, required: true, description: Checkpoint directory on this node.}
  path: {type: path, description: Source directory on this host (source=dir).}
  repo: {type: str, description: Hugging Face repo id (source=hf).}
  revision: {type: str, description: Full commit hash to pin (source=hf).}
  hf_token: {type: str, description: Hugging Face token (never logged).}
  full: {type: bool, default: false, description: Re-hash every file even when unchanged.}
  expected: {type: dict, description: A manifest to compare with (returns C(missing)); nothing is written.}
  margin_gib: {type: float, default: 8.0, description: "source=hf: free space to keep beyond the download (checked before it)."}
  progress_path: {type: path, default: "", description: "source=hf: where to write the download's progress JSON for the controller's bars (empty = none)."}
author: sparkctl
"""

RETURN = r"""
manifest: {description: The checkpoint manifest (files with size, sha256, mtime_ns), returned: success, type: dict}
content_key: {description: One digest over every (path, size, sha256), returned: success, type: str}
engram: {description: Per Engram layer its row count, returned: when the checkpoint has the tables, type: list}
missing: {description: Files of C(expected) this node lacks or holds with other bytes, returned: with expected, type: list}
extra: {description: Files this node holds that C(expected) does not list (another checkpoint's), returned: with expected, type: list}
"""

import hashlib
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sparkctl.nodeside import progress as stage_progress
from ansible.module_utils.sparkctl.stage import dsv41en1, manifest, transfer
# What the modules above import relatively, named here too: Mitogen ships with a module only the
# module_utils it names (tests/unit/test_strategy_mitogen.py keeps this list whole).
import ansible.module_utils.sparkctl.nodeside.manifests  # noqa: F401
import ansible.module_utils.sparkctl.nodeside.progress  # noqa: F401
import ansible.module_utils.sparkctl.stage.safetensors  # noqa: F401
import ansible.module_utils.sparkctl.stage.writeback  # noqa: F401


def _from_dir(module, src, model_dir):
    if not os.path.isdir(src):
        module.fail_json(msg=f"checkpoint source directory {src} does not exist on {module.params['_node']}")
    if os.path.abspath(src) == os.path.abspath(model_dir):
        return []
    actions = []
    prog = transfer.Progress("head")
    for rel in manifest.list_files(src):
        s, d = os.path.join(src, rel), os.path.join(model_dir, rel)
        if os.path.exists(d) and os.path.samefile(s, d):
            continue
        if os.path.exists(d):
            st_s, st_d = os.stat(s), os.stat(d)
            # copies keep the source's mtime (link_or_copy), so size + mtime identify them cheaply
            if st_s.st_size == st_d.st_size and st_s.st_mtime_ns == st_d.st_mtime_ns:
                continue
        if module.check_mode:
            actions.append(f"would stage {rel}")
            continue
        actions.append(f"{transfer.link_or_copy(s, d, manifest.file_sha256(s), prog)} {rel}")
    return actions


def _hub_files(module):
    """The pinned revision's files as the hub records them: path -> size, LFS SHA-256, git blob id."""
    p = module.params
    try:
        from huggingface_hub import HfApi
    except ImportError:
        module.fail_json(msg="huggingface_hub is not importable by this interpreter on the head; "
                             "the role installs it in spark_stage_hf_venv — check that task")
    try:
        info = HfApi().model_info(p["repo"], revision=p["revision"], files_metadata=True,
                                  token=p["hf_token"] or None)
    except Exception as exc:  # the hub's own errors: no such repo, revision or access
        module.fail_json(msg=f"{p['_node']}: cannot read {p['repo']}@{p['revision']} from the hub: "
                             f"{type(exc).__name__}: {exc}")
    files = {}
    for s in info.siblings or []:
        lfs = getattr(s, "lfs", None)
        if isinstance(lfs, dict):
            sha, lfs_size = lfs.get("sha256"), lfs.get("size")
        else:
            sha, lfs_size = getattr(lfs, "sha256", None), getattr(lfs, "size", None)
        files[s.rfilename] = {"size": s.size if s.size is not None else lfs_size, "sha256": sha,
                              "blob_id": getattr(s, "blob_id", None)}
    return files


def _git_blob_id(path):
    """Git's object id of a file (what the hub records for files kept outside LFS)."""
    h = hashlib.sha1()  # noqa: S324 -- git's own object naming, not a security digest
    h.update(f"blob {os.path.getsize(path)}\0".encode())
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_space(module, model_dir, hub):
    """Before a byte is downloaded: the head must hold what is still missing, plus the margin."""
    p = module.params
    missing = sum(int(e["size"] or 0) for rel, e in hub.items()
                  if not (os.path.isfile(os.path.join(model_dir, rel))
                          and os.path.getsize(os.path.join(model_dir, rel)) == e["size"]))
    probe = model_dir
    while not os.path.isdir(probe):
        probe = os.path.dirname(probe) or "/"
    st = os.statvfs(probe)
    free = st.f_bavail * st.f_frsize
    need = missing + int(float(p["margin_gib"]) * (1 << 30))
    if need > free:
        module.fail_json(msg=f"{p['_node']}: not enough space in {model_dir} for {p['repo']}@{p['revision']}: "
                             f"{missing / (1 << 30):.2f} GiB still to download + {p['margin_gib']} GiB margin, "
                             f"{free / (1 << 30):.2f} GiB free; nothing was downloaded")
    return missing


def _verify_against_hub(module, model_dir, hub, built):
    """Every file equals what the hub recorded (LFS SHA-256, or git blob id), before any fan-out."""
    digests = {e["path"]: e["sha256"] for e in built["files"]}
    bad = []
    for rel, e in sorted(hub.items()):
        local = os.path.join(model_dir, rel)
        if not os.path.isfile(local):
            bad.append(f"{rel}: missing after the download")
        elif e["sha256"] and digests.get(rel) != e["sha256"]:
            bad.append(f"{rel}: sha256 {digests.get(rel)} but the hub records {e['sha256']}")
        elif not e["sha256"] and e["blob_id"] and _git_blob_id(local) != e["blob_id"]:
            bad.append(f"{rel}: git blob {_git_blob_id(local)} but the hub records {e['blob_id']}")
    if bad:
        module.fail_json(msg=f"{module.params['_node']}: the downloaded checkpoint differs from what the hub "
                             f"records for {module.params['repo']}@{module.params['revision']} "
                             f"({len(bad)} file(s)); nothing was fanned out", mismatched=bad[:20])


def _from_hf(module, model_dir, hub):
    p = module.params
    if not p["repo"] or not p["revision"]:
        module.fail_json(msg="source=hf needs repo and a pinned revision")
    from huggingface_hub import snapshot_download

    missing = _check_space(module, model_dir, hub)
    if module.check_mode:
        return [f"would download {missing / (1 << 30):.2f} GiB of {p['repo']}@{p['revision']} into {model_dir}"]
    ticker = None
    if p["progress_path"]:
        sizes = {rel: int(e["size"] or 0) for rel, e in hub.items()}
        prog = stage_progress.Progress(p["_node"], step="download", state="downloading", path=p["progress_path"],
                                       bytes_total=sum(sizes.values()), files_total=len(sizes))
        ticker = stage_progress.Ticker(prog, every=1.0, sample=stage_progress.hub_sampler(prog, model_dir, sizes))
        ticker.sample()
        prog.write()
        ticker.start()
    try:
        path = snapshot_download(repo_id=p["repo"], revision=p["revision"], local_dir=model_dir,
                                 token=p["hf_token"] or None)
    except Exception as exc:
        if ticker is not None:
            ticker.finish()
            ticker.progress.set(state="failed", error=f"{type(exc).__name__}: {exc}")
        module.fail_json(msg=f"{p['_node']}: downloading {p['repo']}@{p['revision']} failed: "
                             f"{type(exc).__name__}: {exc} (a re-run resumes)")
    if ticker is not None:
        ticker.finish()
        ticker.progress.set(state="done", items=[], current="")
    return [f"downloaded {p['repo']}@{p['revision']} into {path}"]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source=dict(type="str", choices=["dir", "hf", "present"], default="present"),
            model_dir=dict(type="path", required=True),
            path=dict(type="path"),
            repo=dict(type="str"),
            revision=dict(type="str"),
            hf_token=dict(type="str", no_log=True),
            full=dict(type="bool", default=False),
            expected=dict(type="dict"),
            margin_gib=dict(type="float", default=8.0),
            progress_path=dict(type="path", default=""),
            _node=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    model_dir = p["model_dir"]
    node = p["_node"] or os.uname().nodename
    p["_node"] = node
    started = time.monotonic()
    try:
        previous = manifest.load(model_dir) if os.path.isdir(model_dir) else None
    except manifest.ManifestError:
        previous = None
    if p["expected"] is not None:
        missing = []
        quick = manifest.quick_ok(model_dir, p["expected"], previous)
        for e in p["expected"].get("files", []):
            if not quick.get(e["path"]):
                missing.append(e["path"])
        wanted = {e["path"] for e in p["expected"].get("files", [])}
        present = manifest.list_files(model_dir) if os.path.isdir(model_dir) else []
        extra = [rel for rel in present if rel not in wanted]
        module.exit_json(changed=False, missing=missing, extra=extra, node=node)
    actions = []
    if not module.check_mode:
        os.makedirs(model_dir, exist_ok=True)
    if p["source"] == "dir":
        actions = _from_dir(module, p["path"] or "", model_dir)
    elif p["source"] == "hf":
        if not p["repo"] or not p["revision"]:
            module.fail_json(msg="source=hf needs repo and a pinned revision")
        hub = _hub_files(module)
        actions = _from_hf(module, model_dir, hub)
    if not os.path.isdir(model_dir) or not manifest.list_files(model_dir):
        if module.check_mode:
            module.exit_json(changed=True, actions=actions, node=node)
        module.fail_json(msg=f"{node}: {model_dir} holds no checkpoint files")
    ident = {}
    if p["source"] == "hf":
        ident = {"repo": p["repo"], "revision": p["revision"]}
    elif p["source"] == "dir":
        ident = {"path": p["path"]}
    result = manifest.build(model_dir, previous, full=p["full"], source=ident or (previous or {}).get("source"))
    if p["source"] == "hf" and not module.check_mode:
        _verify_against_hub(module, model_dir, hub, result)
    changed = bool(actions) or previous is None or manifest.content_key(previous) != manifest.content_key(result)
    if not module.check_mode:
        if previous is None or manifest.content_key(previous) != manifest.content_key(result) \
                or [e.get("mtime_ns") for e in previous["files"]] != [e["mtime_ns"] for e in result["files"]]:
            try:
                manifest.save(model_dir, result)
            except OSError as exc:  # a read-only source directory: the manifest is still returned
                module.warn(f"cannot save {manifest.MANIFEST_NAME} in {model_dir}: {exc}")
    engram = []
    try:
        for src in dsv41en1.locate(model_dir, dsv41en1.LAYERS):
            engram.append({"layer": src.layer, "rows": src.rows, "file": src.weight_file})
    except dsv41en1.FormatError as exc:
        module.fail_json(msg=f"{node}: {exc}")
    module.exit_json(changed=changed, manifest=result, content_key=manifest.content_key(result),
                     engram=engram, actions=actions, node=node, seconds=round(time.monotonic() - started, 2))


if __name__ == "__main__":
    main()
