"""The serving kit's build steps on a node: what a staged version needs besides its files.

Standard library only (shipped as ``ansible.module_utils.sparkctl.nodeside.kitbuild`` to the
spark_kit modules, and by ``nodeside.ship`` with the fast paths' checks). A profile's
``kit.build`` lists the steps (``sparkctl.profiles.KitBuildStep``), as the kit's publisher runs
them when it stages the kit (R4: ``scripts/cluster.py`` ``stage()``):

* ``extract`` — ``archive`` unpacked into the directory ``into``, every member a regular file whose
  SHA-256 the ``manifest`` (``{name: sha256}``) lists, and the archive's member set equal to the
  manifest's keys: nothing more, nothing less, no member leaving ``into``.
* ``compile`` — ``argv`` run in the engine image (``docker run --rm --network none``, the version
  directory bound read-write at the kit's mount, ``argv[0]`` the entrypoint); it must leave
  ``product``. With ``record``, the publisher's own record file is written too:
  ``{<key>: <product sha256>, "image": <image ID>}``.

Paths are relative to the version directory. sparkctl's record of a build, :data:`RECORD`
(``.sparkctl-build.json``, ignored by the tree verification like every ``.sparkctl-`` file), holds
the kit version, the image ID, the digest of the step definitions and each product's SHA-256. A
version whose record matches all three and whose products still hash as recorded is not rebuilt.
Products are not kit files: the tree verification skips them (:func:`product_filter`) and
:func:`verify` checks them against the record instead.
"""

import collections
import hashlib
import json
import os
import shutil
import subprocess
import tarfile

from . import kit as nk

RECORD = nk.OWN_PREFIX + "build.json"
WORK = nk.OWN_PREFIX + "build-work"
COMPILE_TIMEOUT_S = 900


class BuildError(RuntimeError):
    """A build step failed or its inputs are wrong (the message names the file)."""


def steps_digest(steps):
    """SHA-256 of the step definitions (canonical JSON): a changed step rebuilds."""
    return hashlib.sha256(json.dumps(list(steps or []), sort_keys=True, separators=(",", ":"))
                          .encode("utf-8")).hexdigest()


def _kind(step):
    if step.get("extract"):
        return "extract", step["extract"]
    if step.get("compile"):
        return "compile", step["compile"]
    raise BuildError(f"build step {step!r}: want extract or compile")


def product_filter(steps):
    """A predicate on kit-relative paths: True for what the steps produce (an extract's whole
    ``into`` directory, a compile's product and its record file)."""
    files, dirs = set(), []
    for step in steps or []:
        kind, s = _kind(step)
        if kind == "extract":
            dirs.append(s["into"].rstrip("/") + "/")
        else:
            files.add(s["product"])
            if s.get("record"):
                files.add(s["record"]["path"])

    def is_product(rel):
        return rel in files or any(rel.startswith(d) for d in dirs)

    return is_product


def read_record(root):
    """sparkctl's build record of the version at ``root`` (None when absent or unreadable)."""
    try:
        with open(os.path.join(root, RECORD), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _write_json(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def product_hashes(root, steps):
    """``{rel: sha256 | None}`` of every product now on disk (an extract's files as found)."""
    out = {}
    for step in steps or []:
        kind, s = _kind(step)
        if kind == "extract":
            into = os.path.join(root, s["into"])
            if os.path.isdir(into):
                for rel in nk.list_files(into):
                    out[s["into"].rstrip("/") + "/" + rel] = nk.file_sha256(os.path.join(into, rel))
        else:
            for rel in [s["product"]] + ([s["record"]["path"]] if s.get("record") else []):
                path = os.path.join(root, rel)
                out[rel] = nk.file_sha256(path) if os.path.isfile(path) and not os.path.islink(path) else None
    return out


def current(root, version, image_id, steps):
    """True when the record says this very build (version, image ID, steps) and every recorded
    product still hashes as recorded, with nothing else under an extract's directory."""
    rec = read_record(root)
    if not rec or rec.get("version") != version or rec.get("image_id") != image_id:
        return False
    if rec.get("steps_sha256") != steps_digest(steps):
        return False
    return rec.get("products") == product_hashes(root, steps)


# --- extract -------------------------------------------------------------------------------------


def read_bundle_manifest(path, where):
    doc = nk.read_json_object(path, "missing", "unreadable",
                              "want a non-empty {\"<name>\": \"<sha256>\"} object",
                              error=BuildError, where=where)
    for name, digest in doc.items():
        if not isinstance(digest, str) or not nk.HEX64.match(digest):
            raise BuildError(f"{where}: {name}: {digest!r} is not 64 lowercase hex")
    return doc


def extract(root, archive, manifest, into, work):
    """Unpack ``<root>/<archive>`` into ``<work>/<into>`` checking every member against
    ``<root>/<manifest>``; ``{<into>/<name>: sha256}``. Raises BuildError naming the member."""
    want = read_bundle_manifest(os.path.join(root, manifest), manifest)
    for name in want:
        try:
            nk.safe_rel(name, manifest)
        except nk.KitError as exc:
            raise BuildError(str(exc)) from None
    dest = os.path.join(work, into)
    os.makedirs(dest)
    out = {}
    try:
        with tarfile.open(os.path.join(root, archive)) as tf:
            members = tf.getmembers()
            names = [m.name for m in members]
            for m in members:
                try:
                    nk.safe_rel(m.name, archive)
                except nk.KitError:
                    raise BuildError(f"{archive}: member {m.name!r} leaves {into}/ (path traversal)"
                                     ) from None
                if not m.isfile():
                    raise BuildError(f"{archive}: member {m.name!r} is not a regular file")
            dup = sorted(n for n, c in collections.Counter(names).items() if c > 1)
            if dup:
                raise BuildError(f"{archive}: member(s) listed twice: {', '.join(dup[:10])}")
            extra, lacking = sorted(set(names) - set(want)), sorted(set(want) - set(names))
            if extra:
                raise BuildError(f"{archive}: member(s) not in {manifest}: {', '.join(extra[:10])}")
            if lacking:
                raise BuildError(f"{archive}: lacks member(s) {manifest} lists: {', '.join(lacking[:10])}")
            for m in members:
                src = tf.extractfile(m)
                if src is None:
                    raise BuildError(f"{archive}: member {m.name!r} cannot be read")
                target = os.path.join(dest, m.name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                h = hashlib.sha256()
                with src, open(target, "wb") as f:
                    while True:
                        block = src.read(nk.HASH_BLOCK)
                        if not block:
                            break
                        h.update(block)
                        f.write(block)
                actual = h.hexdigest()
                if actual != want[m.name]:
                    raise BuildError(f"{archive}: member {m.name} hashes {actual}, "
                                     f"{manifest} says {want[m.name]}")
                os.chmod(target, 0o644)
                out[into.rstrip("/") + "/" + m.name] = actual
    except (tarfile.TarError, OSError) as exc:
        raise BuildError(f"{archive}: cannot unpack ({exc})") from None
    return out


# --- compile -------------------------------------------------------------------------------------


def compile_argv(docker, root, mount, image, argv):
    """The ``docker run`` line of a compile step: no network, the version bound at the mount."""
    return [docker, "run", "--rm", "--network", "none", "--pull", "never",
            "--mount", f"type=bind,src={root},dst={mount}",
            "--entrypoint", argv[0], image, *argv[1:]]


def compile_step(root, step, mount, image, image_id, run, docker="docker"):
    """Run one compile step; ``{product: sha256[, record path: sha256]}``. ``run(argv)`` returns
    ``(rc, output)``."""
    product = os.path.join(root, step["product"])
    if os.path.lexists(product):
        os.unlink(product)
    rc, output = run(compile_argv(docker, root, mount, image, step["argv"]))
    if rc != 0:
        tail = " ".join(str(output or "").strip().splitlines()[-5:])[-600:]
        raise BuildError(f"{step['product']}: the compile in {image} failed (exit {rc}): {tail}")
    if not os.path.isfile(product) or os.path.islink(product):
        raise BuildError(f"{step['product']}: the compile in {image} left no such file")
    digest = nk.file_sha256(product)
    out = {step["product"]: digest}
    rec = step.get("record")
    if rec:
        path = os.path.join(root, rec["path"])
        _write_json(path, {rec["key"]: digest, "image": image_id})
        out[rec["path"]] = nk.file_sha256(path)
    return out


def _run(argv):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not installed"
    except subprocess.TimeoutExpired:
        return 124, f"did not finish within {COMPILE_TIMEOUT_S} s"
    return proc.returncode, (proc.stderr or "") + (proc.stdout or "")


def build(root, version, steps, mount, image, image_id, expected=None, run=_run, docker="docker"):
    """Run every step on the version at ``root`` and write the record; returns the record.

    ``expected`` (the kit's file manifest) is checked first: a product may not be a kit file.
    """
    kit_files = [e["path"] for e in (expected or {}).get("files", [])]
    is_product = product_filter(steps)
    clash = sorted(p for p in kit_files if is_product(p))
    if clash:
        raise BuildError("{}: a build step would overwrite the kit's own file(s): {}".format(
            version, ", ".join(clash[:10])))
    work = os.path.join(root, WORK)
    shutil.rmtree(work, ignore_errors=True)
    products = {}
    try:
        rec_path = os.path.join(root, RECORD)
        if os.path.lexists(rec_path):
            os.unlink(rec_path)
        for step in steps:
            kind, s = _kind(step)
            if kind == "extract":
                os.makedirs(work, exist_ok=True)
                got = extract(root, s["archive"], s["manifest"], s["into"], work)
                into = os.path.join(root, s["into"])
                if os.path.islink(into) or os.path.isfile(into):
                    os.unlink(into)
                shutil.rmtree(into, ignore_errors=True)
                os.makedirs(os.path.dirname(into) or root, exist_ok=True)
                os.replace(os.path.join(work, s["into"]), into)
                products.update(got)
            else:
                products.update(compile_step(root, s, mount, image, image_id, run, docker))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record = {"version": version, "image_id": image_id, "steps_sha256": steps_digest(steps),
              "products": dict(sorted(products.items()))}
    _write_json(os.path.join(root, RECORD), record)
    return record


def ensure(root, version, steps, mount, image, image_id, expected=None, run=_run, docker="docker",
           check_mode=False):
    """Build the version at ``root`` unless its record is :func:`current`. ``(changed, record)``:
    ``(False, the record)`` when nothing needed building, ``(True, None)`` in check mode when a
    build would run, ``(True, the new record)`` after a build."""
    if current(root, version, image_id, steps):
        return False, read_record(root)
    if check_mode:
        return True, None
    record = build(root, version, steps, mount, image, image_id, expected=expected, run=run, docker=docker)
    return True, record


# --- verification --------------------------------------------------------------------------------


def verify(root, version, steps, image_id=None):
    """Problems of the products at ``root`` against sparkctl's record (``nodeside.kit.problem``
    dicts): record missing or for another version/steps/image, a product missing, changed, or
    not recorded. ``image_id`` None: the image is not compared."""
    rec = read_record(root)
    if rec is None:
        return [nk.problem(RECORD, "build record missing: the kit's build steps have not run here "
                                   "(run sparkctl stage kit)")]
    problems = []
    if rec.get("version") != version:
        problems.append(nk.problem(RECORD, "records another kit version", version, rec.get("version")))
    if rec.get("steps_sha256") != steps_digest(steps):
        what = "records other build steps than the profile's (run sparkctl stage kit)"
        problems.append(nk.problem(RECORD, what, steps_digest(steps), rec.get("steps_sha256")))
    if image_id is not None and rec.get("image_id") != image_id:
        problems.append(nk.problem(RECORD, "built in another engine image (run sparkctl stage kit)",
                                   image_id, rec.get("image_id")))
    recorded = rec.get("products") or {}
    actual = product_hashes(root, steps)
    for rel in sorted(set(recorded) | set(actual)):
        want, have = recorded.get(rel), actual.get(rel)
        if want == have:
            continue
        if want is None:
            problems.append(nk.problem(rel, "build product not in the build record", None, have))
        elif have is None:
            problems.append(nk.problem(rel, "build product missing", want, None))
        else:
            problems.append(nk.problem(rel, "build product differs from the build record", want, have))
    return problems


def odd_nodes(products):
    """Products that differ across nodes: ``{node: {rel: sha256 | None}}`` (nodes in rank order)
    → ``[(node, problem)]``. The value most nodes hold is the expected one (a tie: the first
    node's); every other node is named, with the file and both digests."""
    out = []
    nodes = list(products)
    rels = sorted({rel for p in products.values() for rel in (p or {})})
    for rel in rels:
        values = [(products[n] or {}).get(rel) for n in nodes]
        if len(set(values)) <= 1:
            continue
        counts = collections.Counter(values)
        top = max(counts.values())
        expected = next(v for v in values if counts[v] == top)
        for n, v in zip(nodes, values, strict=True):
            if v != expected:
                out.append((n, nk.problem(rel, "build product differs across nodes", expected, v)))
    return out


def image_id_of(image, run=_run):
    """The ID of ``image`` in this node's Docker (None when absent or Docker does not answer)."""
    rc, out = run(["docker", "image", "inspect", "--format", "{{.Id}}", image])
    out = (out or "").strip()
    return out if rc == 0 and out.startswith("sha256:") else None


def staged_check(store, version, expected, build_steps=None, build_image=None, limit=50, run=_run):
    """``nodeside.kit.staged_check`` with the kit's build products: the tree verification skips
    them, :func:`verify` checks them against the record (and, given ``build_image``, the record's
    image ID against that image's ID here), and ``products`` gives their digests as found (for the
    comparison across nodes, :func:`odd_nodes`). Without ``build_steps`` exactly
    ``nodeside.kit.staged_check``."""
    steps = build_steps or []
    if not steps:
        return nk.staged_check(store, version, expected, limit=limit)
    root = os.path.join(store, version)
    problems = nk.verify_tree(root, expected, product_filter(steps))
    products = {}
    if os.path.isdir(root):
        image = build_image
        image_id = image_id_of(image, run) if image else None
        if image and image_id is None:
            problems.append(nk.problem(RECORD, f"the build image {image} is not on this node "
                                               "(run sparkctl stage image, then stage kit)"))
        problems += verify(root, version, steps, image_id)
        products = product_hashes(root, steps)
    cur = nk.current_version(store)
    if cur != version:
        what = "points at {}, not the configured kit {}".format(cur or "nothing", version)
        problems.append(nk.problem(os.path.join(store, nk.CURRENT), what))
    return {"version": version, "current": cur, "problems": problems[:limit], "count": len(problems),
            "products": products}


def product_reasons(kits):
    """A fast path's verdict on the build products across nodes: ``kits`` maps each node (rank
    order) to its :func:`staged_check` answer. One line ``node: file: …`` per product that differs
    from what most nodes hold (the odd nodes named with the file and both digests)."""
    products = {node: dict(k.get("products") or {}) for node, k in kits.items()
                if isinstance(k, dict) and "products" in k}
    return [f"{node}: {nk.describe(p)}" for node, p in odd_nodes(products)]
