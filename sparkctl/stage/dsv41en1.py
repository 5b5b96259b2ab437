"""The DSV41EN1 packed Engram shard: format, row ranges, packer and verifier — defined here only.

Standard library only: the node-side Ansible modules import this file (as
``ansible.module_utils.sparkctl.stage``), and so do the controller and the tests.

A packed file holds one rank's contiguous slice of one Engram layer::

    [0, 4096)          header: struct "<6Q" (MAGIC, layer, lo, hi, rows, 264), zero padded
    [4096, ...)        (hi - lo) rows of 264 B: 256 B FP8 E4M3 weight + 8 B E8M0 scale,
                       in checkpoint order (row lo first)

with ``lo = rows * rank // tp`` and ``hi = rows * (rank + 1) // tp``. Rows are read straight from
the checkpoint's safetensors shard: weight row ``r`` at ``weight_offset + r * 256``, its scale at
``scale_offset + r * 8``.

Next to the packed files, ``manifest-r{rank}of{tp}.json`` records the ranges, sizes, full-file
SHA-256 of each packed file and the checkpoint identity (SHA-256 of ``config.json`` and
``model.safetensors.index.json``). A re-run checks the files against it and skips; anything of
this rank and TP size that the manifest does not cover, and any ``.partial`` file, is refused
unless ``force``.

Size: the format, its packer and its verifier stay in one module on purpose — it is the one
definition of DSV41EN1, and a packer and verifier apart could drift from each other.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from ..nodeside import manifests
from ..nodeside.progress import gib
from .manifest import HashingWriter, file_sha256
from .safetensors import SafetensorsError, TensorInfo, read_header, read_index
from .writeback import Flusher

MAGIC = 0x31344E4531565344  # on disk (little-endian): the bytes "DSV1EN41"
HEADER_BYTES = 4096
WEIGHT_BYTES = 256  # FP8 E4M3 weights per row
SCALE_BYTES = 8  # E8M0 scales per row
ROW_BYTES = WEIGHT_BYTES + SCALE_BYTES
HEADER_STRUCT = struct.Struct("<6Q")
LAYERS = (1, 14)
WEIGHT_DTYPE = "F8_E4M3"
SCALE_DTYPE = "F8_E8M0"
# Rows compared byte for byte at pack and verify time: lo, lo+1, hi-2, hi-1, these offsets from lo
# (the published fixed set), then RANDOM_ROWS rows drawn with seed layer*1000 + rank.
FIXED_OFFSETS = (14, 15, 16, 30, 31, 32, 510, 511, 512)
RANDOM_ROWS = 1024
SAMPLED_ROWS = 4 + len(FIXED_OFFSETS) + RANDOM_ROWS  # 1,037
FORMAT = manifests.SHARD_FORMAT
MANIFEST_VERSION = 1
DEFAULT_BLOCK_ROWS = 1 << 13  # 2.06 MiB of packed rows per I/O block: it stays in cache from read to hash
_INTERLEAVE_ROWS = 2048  # sub-block that stays in cache while rows are interleaved
_IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024)  # vectors per preadv
PARTIAL = ".partial"


class FormatError(ValueError):
    """A packed file, manifest or source does not match the format (the message says which)."""


# --- layout -----------------------------------------------------------------------------------


def row_range(rows: int, rank: int, tp: int) -> tuple[int, int]:
    """This rank's contiguous rows [lo, hi) of a table of ``rows`` rows split over ``tp`` ranks."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    if not 0 <= rank < tp:
        raise ValueError(f"rank must be in [0, {tp}), got {rank}")
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    return rows * rank // tp, rows * (rank + 1) // tp


def packed_size(lo: int, hi: int) -> int:
    return HEADER_BYTES + (hi - lo) * ROW_BYTES


def shard_name(layer: int, rank: int, tp: int) -> str:
    return f"engram-l{layer}-r{rank}of{tp}.bin"


def manifest_name(rank: int, tp: int) -> str:
    name: str = manifests.shard_manifest_name(rank, tp)
    return name


@dataclass(frozen=True)
class Header:
    layer: int
    lo: int
    hi: int
    rows: int
    row_bytes: int = ROW_BYTES

    def pack(self) -> bytes:
        if not 0 <= self.lo <= self.hi <= self.rows:
            raise FormatError(f"bad row range [{self.lo}, {self.hi}) of {self.rows} rows")
        head = HEADER_STRUCT.pack(MAGIC, self.layer, self.lo, self.hi, self.rows, self.row_bytes)
        return head + bytes(HEADER_BYTES - len(head))

    @classmethod
    def unpack(cls, buf: bytes) -> Header:
        if len(buf) < HEADER_STRUCT.size:
            raise FormatError(f"header is {len(buf)} B, needs {HEADER_STRUCT.size}")
        magic, layer, lo, hi, rows, row_bytes = HEADER_STRUCT.unpack_from(buf)
        if magic != MAGIC:
            raise FormatError(f"bad magic 0x{magic:016x} (want 0x{MAGIC:016x}, {FORMAT})")
        if row_bytes != ROW_BYTES:
            raise FormatError(f"row size {row_bytes} B, want {ROW_BYTES}")
        if not lo <= hi <= rows:
            raise FormatError(f"bad row range [{lo}, {hi}) of {rows} rows")
        return cls(layer, lo, hi, rows, row_bytes)


def read_packed_header(path: str) -> Header:
    with open(path, "rb") as f:
        return Header.unpack(f.read(HEADER_BYTES))


def sample_rows(layer: int, rank: int, lo: int, hi: int, n_random: int = RANDOM_ROWS) -> list[int]:
    """The rows compared against the source: boundaries, the fixed offsets, then seeded random rows."""
    if hi <= lo:
        return []
    fixed = [lo, lo + 1, hi - 2, hi - 1, *(lo + k for k in FIXED_OFFSETS)]
    rng = random.Random(layer * 1000 + rank)
    return [r for r in fixed if lo <= r < hi] + [rng.randrange(lo, hi) for _ in range(n_random)]


# --- the source tables ------------------------------------------------------------------------


def weight_tensor(layer: int) -> str:
    return f"layers.{layer}.engram.embed.weight"


def scale_tensor(layer: int) -> str:
    return f"layers.{layer}.engram.embed.scale"


@dataclass(frozen=True)
class EngramSource:
    """Where one layer's Engram table lives in the checkpoint (absolute file offsets)."""

    layer: int
    rows: int
    weight_path: str
    weight_offset: int
    scale_path: str
    scale_offset: int

    @property
    def weight_file(self) -> str:
        return os.path.basename(self.weight_path)


def _find(wmap: dict[str, str], suffix: str) -> str | None:
    hits = [name for name in wmap if name == suffix or name.endswith("." + suffix)]
    if len(hits) > 1:
        raise FormatError(f"more than one tensor ends with {suffix}: {', '.join(sorted(hits))}")
    return hits[0] if hits else None


def locate(model_dir: str, layers: tuple[int, ...] | list[int] = LAYERS) -> list[EngramSource]:
    """Find each layer's weight and scale tensors via the index and the shard headers."""
    try:
        wmap = read_index(model_dir)
    except SafetensorsError as exc:
        raise FormatError(str(exc)) from exc
    headers: dict[str, dict[str, TensorInfo]] = {}

    def info(name: str) -> TensorInfo:
        shard = os.path.join(model_dir, wmap[name])
        if shard not in headers:
            try:
                headers[shard] = read_header(shard)
            except SafetensorsError as exc:
                raise FormatError(str(exc)) from exc
        tensors = headers[shard]
        if name not in tensors:
            raise FormatError(f"{shard}: tensor {name} listed in the index is missing from the shard")
        return tensors[name]

    out = []
    for layer in layers:
        wname, sname = _find(wmap, weight_tensor(layer)), _find(wmap, scale_tensor(layer))
        if wname is None or sname is None:
            missing = weight_tensor(layer) if wname is None else scale_tensor(layer)
            raise FormatError(f"{model_dir}: the index has no tensor {missing} (is this DeepSeek-V4.1?)")
        w, s = info(wname), info(sname)
        if w.dtype != WEIGHT_DTYPE or len(w.shape) != 2 or w.shape[1] != WEIGHT_BYTES:
            raise FormatError(
                f"{wname}: want {WEIGHT_DTYPE}[rows, {WEIGHT_BYTES}], found {w.dtype}{list(w.shape)}"
            )
        if s.dtype != SCALE_DTYPE or len(s.shape) != 2 or s.shape[1] != SCALE_BYTES:
            raise FormatError(
                f"{sname}: want {SCALE_DTYPE}[rows, {SCALE_BYTES}], found {s.dtype}{list(s.shape)}"
            )
        if w.shape[0] != s.shape[0]:
            raise FormatError(f"layer {layer}: {w.shape[0]} weight rows but {s.shape[0]} scale rows")
        out.append(
            EngramSource(
                layer,
                w.shape[0],
                os.path.join(model_dir, wmap[wname]),
                w.start,
                os.path.join(model_dir, wmap[sname]),
                s.start,
            )
        )
    return out


def source_identity(model_dir: str, sources: list[EngramSource] | None = None) -> dict[str, Any]:
    """What the packed files were cut from: digests of config.json, the safetensors index and every
    shard that holds an Engram table (re-staged shards with other bytes never keep stale packs).

    A shard's digest comes from the checkpoint manifest when the manifest vouches for the file as it
    is now (same size and modification time); otherwise the shard is hashed.
    """
    sources = sources if sources is not None else locate(model_dir)
    try:
        staged = manifests.read_checkpoint(model_dir) or {}
    except (manifests.ManifestError, OSError, ValueError):
        staged = {}
    known = {e.get("path"): e for e in staged.get("files", []) if isinstance(e, dict)}
    shards: dict[str, str] = {}
    for path in sorted({p for s in sources for p in (s.weight_path, s.scale_path)}):
        rel = os.path.relpath(path, model_dir)
        rec = known.get(rel)
        st = os.stat(path)
        vouched = rec and rec.get("sha256") and (rec.get("size"), rec.get("mtime_ns")) == (
            st.st_size, st.st_mtime_ns)
        if vouched:
            shards[rel] = str(rec["sha256"])  # type: ignore[index]
        else:
            shards[rel] = file_sha256(path)
    return {
        "config_sha256": file_sha256(os.path.join(model_dir, "config.json")),
        "index_sha256": file_sha256(os.path.join(model_dir, "model.safetensors.index.json")),
        "engram_shards_sha256": shards,
    }


# --- packing ----------------------------------------------------------------------------------


def interleave(weights: memoryview, scales: memoryview, out: memoryview, n: int) -> None:
    """out[i*264 : i*264+264] = weights[i*256 : i*256+256] + scales[i*8 : i*8+8] for i < n.

    The definition of a packed block in memory, done as 33 strided 8-byte copies per cache-sized
    sub-block (C loops, no per-row Python). The packer reads straight into place instead
    (``read_rows``) and falls back to this after a short read.
    """
    for r0 in range(0, n, _INTERLEAVE_ROWS):
        r1 = min(n, r0 + _INTERLEAVE_ROWS)
        o = out[r0 * ROW_BYTES : r1 * ROW_BYTES].cast("Q")
        w = weights[r0 * WEIGHT_BYTES : r1 * WEIGHT_BYTES].cast("Q")
        o[32::33] = scales[r0 * SCALE_BYTES : r1 * SCALE_BYTES].cast("Q")
        for k in range(32):
            o[k::33] = w[k::32]


def row_slots(out: memoryview, n: int) -> list[memoryview]:
    """The weight part of each of ``n`` packed rows in ``out``: one 256-byte view per row.

    Built once per I/O buffer and reused for every block it carries (``read_rows``).
    """
    return [out[i * ROW_BYTES : i * ROW_BYTES + WEIGHT_BYTES] for i in range(n)]


def read_rows(
    src: EngramSource, wfd: int, sfd: int, r0: int, n: int, out: memoryview, slots: list[memoryview]
) -> None:
    """Fill ``out`` with packed rows [r0, r0+n) of ``src`` (the bytes ``interleave`` defines).

    The weights are scattered by the kernel straight into their places (``preadv`` with one
    256-byte vector per row, up to IOV_MAX per call, no Python per row and no second copy); the
    scales follow with one strided copy. After a short read the rest of the block is read
    plainly and interleaved.
    """
    w_at = src.weight_offset + r0 * WEIGHT_BYTES
    done = 0  # whole rows in place
    while done < n:
        got = os.preadv(wfd, slots[done : min(n, done + _IOV_MAX)], w_at + done * WEIGHT_BYTES)
        if got % WEIGHT_BYTES or got == 0:
            break
        done += got // WEIGHT_BYTES
    if done < n:  # a short read (end of file, a signal): the rest the simple way, or a clear error
        left = n - done
        w = _pread_exact(wfd, left * WEIGHT_BYTES, w_at + done * WEIGHT_BYTES, src.weight_path)
        s_at = src.scale_offset + (r0 + done) * SCALE_BYTES
        s = _pread_exact(sfd, left * SCALE_BYTES, s_at, src.scale_path)
        interleave(memoryview(w), memoryview(s), out[done * ROW_BYTES : n * ROW_BYTES], left)
        n = done
    if n:
        s = _pread_exact(sfd, n * SCALE_BYTES, src.scale_offset + r0 * SCALE_BYTES, src.scale_path)
        out[: n * ROW_BYTES].cast("Q")[32::33] = memoryview(s).cast("Q")


def _pread_exact(fd: int, n: int, offset: int, what: str) -> bytes:
    data = os.pread(fd, n, offset)
    while len(data) < n:
        more = os.pread(fd, n - len(data), offset + len(data))
        if not more:
            raise FormatError(f"{what}: short read at offset {offset} ({len(data)} of {n} B)")
        data += more
    return data


@dataclass
class PackedFile:
    name: str
    layer: int
    lo: int
    hi: int
    rows: int
    size: int
    sha256: str
    mtime_ns: int = 0
    source_file: str = ""
    weight_offset: int = 0
    scale_offset: int = 0


def pack_layer(
    src: EngramSource,
    out_path: str,
    rank: int,
    tp: int,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    on_progress: Callable[[int], None] | None = None,
) -> PackedFile:
    """Write this rank's slice of one layer to ``out_path`` (truncating it), hashing while writing.

    Three stages overlap: this thread reads each block straight into packed order
    (``read_rows``: the kernel scatters the rows, so the GIL is free almost all the time), and
    manifest.HashingWriter's writer and hasher threads write it and feed SHA-256. All three
    release the GIL, so on two cores the hash runs beside the I/O instead of after it; a
    writeback.Flusher keeps the disk writing meanwhile. The file is fsynced before returning;
    renaming it into place is the caller's job, after verification.
    """
    lo, hi = row_range(src.rows, rank, tp)
    header = Header(src.layer, lo, hi, src.rows).pack()
    digest = hashlib.sha256(header)
    block_rows = max(1, min(block_rows, hi - lo))
    slots: dict[int, list[memoryview]] = {}  # per I/O buffer, its rows' weight slots

    wfd = os.open(src.weight_path, os.O_RDONLY)
    sfd = os.open(src.scale_path, os.O_RDONLY)
    ofd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(ofd, header)
        flusher = Flusher(ofd)

        def written(n: int) -> None:
            flusher.add(n)
            if on_progress is not None:
                on_progress(n)

        writer = HashingWriter(ofd, digest, block_rows * ROW_BYTES, buffers=4, on_done=written)
        try:
            for r0 in range(lo, hi, block_rows):
                n = min(block_rows, hi - r0)
                out = writer.buffer()
                view = memoryview(out)
                if id(out) not in slots:
                    slots[id(out)] = row_slots(view, block_rows)
                read_rows(src, wfd, sfd, r0, n, view, slots[id(out)])
                writer.submit(out, n * ROW_BYTES)
        finally:
            slots.clear()  # release the views before the buffers go
            try:
                writer.close()
            finally:
                flusher.close()
        os.fsync(ofd)
    finally:
        os.close(ofd)
        os.close(wfd)
        os.close(sfd)
    size = os.path.getsize(out_path)
    return PackedFile(
        shard_name(src.layer, rank, tp),
        src.layer,
        lo,
        hi,
        src.rows,
        size,
        digest.hexdigest(),
        source_file=src.weight_file,
        weight_offset=src.weight_offset,
        scale_offset=src.scale_offset,
    )


def verify_rows(src: EngramSource, packed_path: str, rank: int, tp: int) -> list[str]:
    """Length, header and the sampled rows of a packed file against the source; [] when all match."""
    lo, hi = row_range(src.rows, rank, tp)
    problems: list[str] = []
    name = os.path.basename(packed_path)
    size = os.path.getsize(packed_path)
    if size != packed_size(lo, hi):
        return [f"{name}: {size} B, want {packed_size(lo, hi)} B for rows [{lo}, {hi})"]
    try:
        head = read_packed_header(packed_path)
    except FormatError as exc:
        return [f"{name}: {exc}"]
    want = Header(src.layer, lo, hi, src.rows)
    if head != want:
        return [f"{name}: header {asdict(head)} != expected {asdict(want)}"]
    pfd = os.open(packed_path, os.O_RDONLY)
    wfd = os.open(src.weight_path, os.O_RDONLY)
    sfd = os.open(src.scale_path, os.O_RDONLY)
    try:
        for row in sample_rows(src.layer, rank, lo, hi):
            got = _pread_exact(pfd, ROW_BYTES, HEADER_BYTES + (row - lo) * ROW_BYTES, packed_path)
            w = _pread_exact(wfd, WEIGHT_BYTES, src.weight_offset + row * WEIGHT_BYTES, src.weight_path)
            s = _pread_exact(sfd, SCALE_BYTES, src.scale_offset + row * SCALE_BYTES, src.scale_path)
            if got != w + s:
                part = "weight" if got[:WEIGHT_BYTES] != w else "scale"
                problems.append(
                    f"{name}: row {row} {part} bytes differ from {os.path.basename(src.weight_path)}"
                )
                if len(problems) >= 5:
                    break
    finally:
        os.close(pfd)
        os.close(wfd)
        os.close(sfd)
    return problems


# --- one rank's shard set on a node -----------------------------------------------------------


@dataclass
class RankResult:
    """What ``pack_rank`` / ``check_rank`` found or did (JSON-serialisable through ``as_dict``)."""

    rank: int
    tp: int
    engram_dir: str
    changed: bool = False
    present: bool = False
    verified: bool = False
    files: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    bytes_written: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def expected_files(
    sources: list[EngramSource], rank: int, tp: int
) -> list[tuple[EngramSource, str, int, int, int]]:
    out = []
    for src in sources:
        lo, hi = row_range(src.rows, rank, tp)
        out.append((src, shard_name(src.layer, rank, tp), lo, hi, packed_size(lo, hi)))
    return out


def read_manifest(path: str) -> dict[str, Any] | None:
    """A rank's shard manifest (None when absent), read by the one node-side reader."""
    try:
        doc: dict[str, Any] | None = manifests.read(path, fmt=FORMAT)
    except manifests.ManifestError as exc:
        raise FormatError(str(exc)) from exc
    return doc


def check_rank(
    model_dir: str,
    engram_dir: str,
    rank: int,
    tp: int,
    layers: tuple[int, ...] | list[int] = LAYERS,
    depth: str = "quick",
    sources: list[EngramSource] | None = None,
    identity: dict[str, str] | None = None,
) -> RankResult:
    """Are this rank's packed files present and consistent with their manifest and the checkpoint?

    ``quick``: manifest, sizes, modification times, headers and the checkpoint identity (seconds).
    ``full``: also every file's SHA-256 and the 1,037 sampled rows against the source.
    """
    res = RankResult(rank, tp, engram_dir)
    mpath = os.path.join(engram_dir, manifest_name(rank, tp))
    try:
        doc = read_manifest(mpath)
    except FormatError as exc:
        res.problems.append(str(exc))
        return res
    if doc is None:
        res.problems.append(f"{manifest_name(rank, tp)}: missing in {engram_dir}")
        return res
    try:
        sources = sources if sources is not None else locate(model_dir, layers)
        identity = identity if identity is not None else source_identity(model_dir, sources)
    except (FormatError, OSError) as exc:
        res.problems.append(f"checkpoint: {exc}")
        return res
    if doc.get("rank") != rank or doc.get("tp") != tp:
        res.problems.append(f"{manifest_name(rank, tp)}: records rank {doc.get('rank')} of {doc.get('tp')}")
    src_doc = doc.get("source") or {}
    for key, value in identity.items():
        if src_doc.get(key) != value:
            res.problems.append(
                f"{manifest_name(rank, tp)}: {key} differs from the checkpoint in {model_dir}"
            )
    by_name = {f.get("name"): f for f in doc["files"] if isinstance(f, dict)}
    present = True
    for src, name, lo, hi, size in expected_files(sources, rank, tp):
        path = os.path.join(engram_dir, name)
        entry = by_name.get(name)
        res.files.append(
            {
                "name": name,
                "layer": src.layer,
                "lo": lo,
                "hi": hi,
                "size": size,
                "sha256": entry.get("sha256") if entry else None,
            }
        )
        if entry is None:
            res.problems.append(f"{name}: not in {manifest_name(rank, tp)}")
            present = False
            continue
        if (entry.get("lo"), entry.get("hi"), entry.get("rows"), entry.get("size")) != (
            lo,
            hi,
            src.rows,
            size,
        ):
            res.problems.append(f"{name}: manifest range/size differ from the checkpoint's rows [{lo}, {hi})")
        try:
            st = os.stat(path)
        except FileNotFoundError:
            res.problems.append(f"{name}: missing in {engram_dir}")
            present = False
            continue
        if st.st_size != size:
            res.problems.append(f"{name}: {st.st_size} B, want {size} B")
            continue
        try:
            head = read_packed_header(path)
            if head != Header(src.layer, lo, hi, src.rows):
                res.problems.append(f"{name}: header does not match rows [{lo}, {hi}) of layer {src.layer}")
        except (FormatError, OSError) as exc:
            res.problems.append(f"{name}: {exc}")
        if depth == "full":
            digest = file_sha256(path)
            if digest != entry.get("sha256"):
                res.problems.append(
                    f"{name}: SHA-256 {digest[:16]}… differs from the manifest's "
                    f"{str(entry.get('sha256'))[:16]}…"
                )
            res.problems.extend(verify_rows(src, path, rank, tp))
        elif entry.get("mtime_ns") and entry.get("mtime_ns") != st.st_mtime_ns:
            res.problems.append(f"{name}: modified after packing (mtime differs from the manifest)")
    res.present = present
    res.verified = present and not res.problems
    return res


def leftovers(engram_dir: str, rank: int, tp: int, manifested: set[str]) -> list[str]:
    """Files of this rank and TP size that no manifest covers, and any .partial file."""
    if not os.path.isdir(engram_dir):
        return []
    suffix = f"-r{rank}of{tp}.bin"
    out = []
    for name in sorted(os.listdir(engram_dir)):
        if name.endswith(PARTIAL) or (
            name.startswith("engram-") and name.endswith(suffix) and name not in manifested
        ):
            out.append(name)
    return out


def free_bytes(path: str) -> int:
    """Free bytes for an unprivileged writer on the filesystem of ``path`` (or its nearest parent)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pack_rank(
    model_dir: str,
    engram_dir: str,
    rank: int,
    tp: int,
    layers: tuple[int, ...] | list[int] = LAYERS,
    force: bool = False,
    check_mode: bool = False,
    margin_bytes: int = 8 << 30,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    on_progress: Callable[[int], None] | None = None,
) -> RankResult:
    """Pack (or confirm) this rank's Engram files; raises FormatError with a message on refusal.

    Existing files that pass ``check_rank`` (quick) are kept. Leftovers (unmanifested files of
    this rank/TP, ``.partial`` files) are refused unless ``force``, which deletes them.
    """
    started = time.monotonic()
    sources = locate(model_dir, layers)
    identity = source_identity(model_dir, sources)
    current = check_rank(model_dir, engram_dir, rank, tp, layers, "quick", sources, identity)
    if current.verified:
        current.actions.append("kept: manifest, sizes, headers and checkpoint identity match")
        current.seconds = time.monotonic() - started
        return current
    mpath = os.path.join(engram_dir, manifest_name(rank, tp))
    try:
        doc = read_manifest(mpath)
    except FormatError:
        doc = None
    manifested = {f.get("name") for f in (doc or {}).get("files", []) if isinstance(f, dict)}
    stray = leftovers(engram_dir, rank, tp, {m for m in manifested if isinstance(m, str)})
    res = RankResult(rank, tp, engram_dir, problems=[])
    if stray and not force:
        raise FormatError(
            f"{engram_dir} holds files no manifest covers: {', '.join(stray)}; "
            "re-run with --force to delete them, or choose a fresh engram_dir"
        )
    plan = expected_files(sources, rank, tp)
    need = sum(size for _, _, _, _, size in plan)
    free = free_bytes(engram_dir)
    reclaim = sum(
        os.path.getsize(os.path.join(engram_dir, n))
        for _, n, _, _, _ in plan
        if os.path.exists(os.path.join(engram_dir, n))
    )
    if need + margin_bytes > free + reclaim:
        raise FormatError(
            f"not enough space in {engram_dir}: needs {gib(need + margin_bytes)} "
            f"({gib(need)} + {gib(margin_bytes)} margin), {gib(free + reclaim)} free"
        )
    if check_mode:
        res.changed = True
        res.actions = [f"would delete {n}" for n in stray] + [
            f"would pack {n} rows [{lo}, {hi})" for _, n, lo, hi, _ in plan
        ]
        res.files = [
            {"name": n, "layer": s.layer, "lo": lo, "hi": hi, "size": size} for s, n, lo, hi, size in plan
        ]
        res.problems = current.problems
        return res
    os.makedirs(engram_dir, exist_ok=True)
    for name in stray:
        os.unlink(os.path.join(engram_dir, name))
        res.actions.append(f"deleted {name}")
    if os.path.exists(mpath):
        os.unlink(mpath)  # the files are about to change: no manifest may describe them meanwhile
    packed: list[PackedFile] = []

    def pack_and_verify(item: tuple[EngramSource, str, int, int, int]) -> tuple[PackedFile, list[str]]:
        src, name = item[0], item[1]
        part = os.path.join(engram_dir, name) + PARTIAL
        pf = pack_layer(src, part, rank, tp, block_rows, on_progress)
        return pf, verify_rows(src, part, rank, tp)

    # The layers are packed side by side: each file's SHA-256 is one sequential stream, so two
    # files are what lets two cores hash at once (and one file's fsync overlap the other's work).
    with ThreadPoolExecutor(max_workers=max(1, len(plan)), thread_name_prefix="pack") as pool:
        done = list(pool.map(pack_and_verify, plan))
    for (src, name, lo, hi, _size), (pf, problems) in zip(plan, done, strict=True):
        final = os.path.join(engram_dir, name)
        part = final + PARTIAL
        if problems:
            raise FormatError("; ".join(problems) + f" (left {part} for inspection)")
        os.replace(part, final)
        pf.mtime_ns = os.stat(final).st_mtime_ns
        packed.append(pf)
        res.bytes_written += pf.size
        res.actions.append(f"packed {name} rows [{lo}, {hi}) of {src.rows}")
    _fsync_dir(engram_dir)
    manifest = {
        "format": FORMAT,
        "version": MANIFEST_VERSION,
        "rank": rank,
        "tp": tp,
        "row_bytes": ROW_BYTES,
        "header_bytes": HEADER_BYTES,
        "verified_rows_per_file": SAMPLED_ROWS,
        "source": {**identity, "model_dir": model_dir},
        "files": [asdict(p) for p in packed],
        "packed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp = mpath + PARTIAL
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, mpath)
    _fsync_dir(engram_dir)
    res.changed = True
    res.present = res.verified = True
    res.files = [
        {"name": p.name, "layer": p.layer, "lo": p.lo, "hi": p.hi, "size": p.size, "sha256": p.sha256}
        for p in packed
    ]
    res.seconds = time.monotonic() - started
    return res
