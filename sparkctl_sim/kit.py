"""The serving kit's launcher checks and readiness markers, simulated (``SPARKCTL_SIM_KIT_*``).

A real rank of a kit profile (R4's ``runtime/launch.py``) refuses to start SGLang unless the kit it
runs is the one it was published as; once loaded, the kit's code logs readiness markers that the
boot gates look for. With ``SPARKCTL_SIM_KIT_DIR`` set, the simulator does the same checks before
it serves anything, and logs the same markers while it "loads":

- the kit directory exists and its overlay manifest (``{rel: {before_sha256, after_sha256}}``)
  parses;
- every overlay sits at ``SPARKCTL_SIM_KIT_TARGET/<rel>`` with its ``after_sha256``;
- every ``KIT_DIR/<adapter>`` exists and is on ``PYTHONPATH``;
- ``DSV41_PACKED_DIR`` holds this rank's ``manifest-r{rank}of{tp}.json`` (format DSV41EN1) and the
  packed files it lists for layers 1 and 14 (``engram-l{layer}-r{rank}of{tp}.bin``), each of the
  recorded size with a header that matches its entry;
- ``<--model-path>/config.json`` is a readable JSON object.

A resident-Engram rank (``SGLANG8_RESIDENT_PROFILE=1``, SG17's hook set: the Engram tables live in
unified memory) has no packed directory, and SG17's launcher (R8 ``sglang/runtime/launch.py``)
asks for none: it checks the checkpoint's config and the image's SGLang commit. What the hook set
itself refuses at model load (R8 ``sglang/adapter/resident_engram.py``: "SGLang8 requires TP8 and
native device-resident Engram shards") is checked instead: ``--tp-size`` 8 and no Engram host
table (``SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE`` not 1). ``DSV41_PACKED_DIR`` is not read.

Then the kit's stage-time build products, which R4's Engram backend needs at import (and R4's
launcher checks): ``KIT_DIR/adapter/librow_store.so`` hashes to ``row_store_library_sha256`` of
``KIT_DIR/row-store-build.json``, and ``KIT_DIR/b12x/`` holds every file of
``KIT_DIR/vendor/b12x-source-manifest.json`` ({name: sha256}) with its digest. A missing or wrong
product logs one line per file and the rank exits 1, as a failed import ends a real rank.

Markers, in the shapes R4's ``scripts/cluster.py`` parses: ``ROCE_TP4_READY {rank, world_size}``
and a ``ROCE_TP4_ROUTE rank=… dtype=… bytes=…`` line once the group formed (unless
``SGLANG4_ROCE_ALLREDUCE=0``), then one ``NVME_ENGRAM_READY {json}`` per packed layer and one
``DSPARK_MOE_LAYOUT {target, draft}`` line. With SG17's switch (``SGLANG8_ROCE_ALLREDUCE=1``) the
route is SG17's eight-rank one instead (R8 ``sglang/experiments/sg17-rocenante`` pynccl overlay):
``ROCE_TP8_READY {json}`` and ``ROCE_TP8_ROUTE …`` once the group formed, and
``ROCE_POST_RESULT_HEALTH {json}`` once the rank has loaded (the overlay logs it after the first
result it checks; the simulator runs no forward pass on a worker, so it logs it when the rank is
ready for one). A world size other than 8 fails the check, as the overlay raises. Every line goes
through the simulator's log, so it still says it comes from the simulator.

Only file names and formats are shared with the product (the DSV41EN1 header and manifest); this
module is standard library only and imports nothing of sparkctl.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkctl_sim.config import ServerConfig
from sparkctl_sim.knobs import Knobs

# DSV41EN1 packed Engram shard: a 4096-byte header starting with struct "<6Q"
# (magic, layer, lo, hi, rows, row_bytes), then (hi - lo) rows of 264 bytes.
SHARD_FORMAT = "DSV41EN1"
SHARD_MAGIC = 0x31344E4531565344
SHARD_HEADER = struct.Struct("<6Q")
SHARD_HEADER_BYTES = 4096
SHARD_ROW_BYTES = 264
ENGRAM_LAYERS = (1, 14)
HEX64 = re.compile(r"[0-9a-f]{64}")
# The build products, at R4's paths inside the kit (scripts/cluster.py stage(), runtime/launch.py).
ROW_STORE_LIBRARY = "adapter/librow_store.so"
ROW_STORE_RECORD = "row-store-build.json"
ROW_STORE_KEY = "row_store_library_sha256"
B12X_MANIFEST = "vendor/b12x-source-manifest.json"
B12X_DIR = "b12x"

# The published MoE layout (R4): 384 routed experts in 40 target layers, 128 in 3 draft stages,
# intermediate 2304 per expert, hidden 5120; MXFP4 packs two values per byte.
TARGET_LAYERS, TARGET_EXPERTS = 40, 384
DRAFT_STAGES, DRAFT_EXPERTS = 3, 128
MOE_INTERMEDIATE, HIDDEN = 2304, 5120
MOE_METHODS = {"flashinfer_mxfp4": "Mxfp4FlashinferCutlassMoEMethod"}
# A 5-token, 8-request decode all-reduce in BF16: the payload the RoCE route logs first.
ROCE_ROUTE_BYTES = 409_600
# SG17's switches (R8 sglang/experiments/sg17-rocenante/configuration.py environment()): the
# resident-Engram hook set, and RoCEnante on the global eight-rank TP group.
RESIDENT_SWITCH = "SGLANG8_RESIDENT_PROFILE"
RESIDENT_TP = 8
HOST_TABLE_SWITCH = "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE"
ROCE8_SWITCH = "SGLANG8_ROCE_ALLREDUCE"
ROCE8_WORLD = 8


class KitCheckFailed(Exception):
    """The kit is not what the launcher requires; ``problems`` names each thing wrong."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class PackedShard:
    name: str
    layer: int
    lo: int
    hi: int
    rows: int
    size: int


@dataclass
class KitReport:
    """What the checks looked at, once they all passed."""

    kit_dir: str
    manifest: str
    target: str
    overlays: list[str] = field(default_factory=list)
    adapters: list[str] = field(default_factory=list)
    packed_dir: str = ""
    packed_manifest: str = ""
    shards: list[PackedShard] = field(default_factory=list)
    model_config: str = ""
    # "packed" (DSV41_PACKED_DIR's shards) or "resident" (SGLANG8_RESIDENT_PROFILE=1: no shards).
    engram: str = "packed"

    def summary(self) -> str:
        """One log line listing what was checked (it names no marker, so gates count markers only)."""
        if self.engram == "resident":
            engram = (f"resident Engram ({RESIDENT_SWITCH}=1): tp_size {RESIDENT_TP}, no host table, "
                      "no packed directory")
        else:
            shards = ", ".join(s.name for s in self.shards)
            manifest = os.path.basename(self.packed_manifest)
            engram = f"packed Engram in {self.packed_dir}: {manifest} + {shards}"
        return (
            f"simulated kit launcher checks passed: kit {self.kit_dir}; manifest {self.manifest} "
            f"({len(self.overlays)} overlays at {self.target}, after_sha256 each); adapters on "
            f"PYTHONPATH: {', '.join(self.adapters) or 'none declared'}; {engram}; "
            f"model config {self.model_config}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "kit_dir": self.kit_dir,
            "manifest": self.manifest,
            "target": self.target,
            "overlays": list(self.overlays),
            "adapters": list(self.adapters),
            "engram": self.engram,
            "packed_dir": self.packed_dir,
            "packed_files": [s.name for s in self.shards],
            "model_config": self.model_config,
        }


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _read_overlay_manifest(path: str) -> dict[str, str]:
    """rel -> after_sha256 of the kit's overlay manifest; raises KitCheckFailed naming what is wrong."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise KitCheckFailed([f"kit manifest {path}: unreadable ({_why(exc)})"]) from None
    except ValueError as exc:
        raise KitCheckFailed([f"kit manifest {path}: not JSON ({exc})"]) from None
    if not isinstance(doc, dict) or not doc:
        raise KitCheckFailed([f"kit manifest {path}: expected a non-empty object {{rel: {{after_sha256}}}}"])
    out: dict[str, str] = {}
    problems = []
    for rel, entry in doc.items():
        after = entry.get("after_sha256") if isinstance(entry, dict) else None
        parts = rel.split("/")
        if os.path.isabs(rel) or ".." in parts or not rel.strip("/."):
            problems.append(f"kit manifest {path}: overlay {rel!r} is not a path inside the target")
        elif not isinstance(after, str) or not HEX64.fullmatch(after):
            problems.append(f"kit manifest {path}: overlay {rel} has no after_sha256 (64 lower-case hex)")
        else:
            out[rel] = after
    if problems:
        raise KitCheckFailed(problems)
    return out


def _check_overlays(target: str, overlays: Mapping[str, str]) -> list[str]:
    problems = []
    for rel, want in overlays.items():
        path = os.path.join(target, rel)
        try:
            got = sha256_file(path)
        except FileNotFoundError:
            problems.append(f"overlay {rel}: {path} is missing (expected after_sha256 {want})")
            continue
        except OSError as exc:
            problems.append(f"overlay {rel}: {path} unreadable ({_why(exc)}; expected after_sha256 {want})")
            continue
        if got != want:
            problems.append(f"overlay {rel}: {path} has sha256 {got}, expected after_sha256 {want}")
    return problems


def _check_adapters(kit_dir: str, adapters: tuple[str, ...], env: Mapping[str, str]) -> list[str]:
    pythonpath = env.get("PYTHONPATH", "")
    entries = {os.path.normpath(p) for p in pythonpath.split(os.pathsep) if p}
    problems = []
    for adapter in adapters:
        path = os.path.normpath(os.path.join(kit_dir, adapter))
        if not os.path.isdir(path):
            problems.append(f"adapter {path}: no such directory in the kit")
        elif path not in entries:
            problems.append(f"adapter {path}: not on PYTHONPATH (PYTHONPATH={pythonpath or '<unset>'})")
    return problems


def _check_packed(packed_dir: str, rank: int, tp: int) -> tuple[str, list[PackedShard], list[str]]:
    """This rank's DSV41EN1 manifest and packed files, structurally (sizes and headers, not digests)."""
    mname = f"manifest-r{rank}of{tp}.json"
    mpath = os.path.join(packed_dir, mname)
    try:
        with open(mpath, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return mpath, [], [f"packed Engram: {mname} missing in {packed_dir} (DSV41_PACKED_DIR)"]
    except OSError as exc:
        return mpath, [], [f"packed Engram: {mpath} unreadable ({_why(exc)})"]
    except ValueError as exc:
        return mpath, [], [f"packed Engram: {mpath} is not JSON ({exc})"]
    if not isinstance(doc, dict) or doc.get("format") != SHARD_FORMAT or type(doc.get("files")) is not list:
        return mpath, [], [f"packed Engram: {mpath} is not a {SHARD_FORMAT} manifest"]
    if (doc.get("rank"), doc.get("tp")) != (rank, tp):
        recorded = f"rank {doc.get('rank')} of {doc.get('tp')}"
        return mpath, [], [f"packed Engram: {mpath} records {recorded}, not rank {rank} of {tp}"]
    by_name = {f["name"]: f for f in doc["files"] if isinstance(f, dict) and isinstance(f.get("name"), str)}
    shards: list[PackedShard] = []
    problems: list[str] = []
    for layer in ENGRAM_LAYERS:
        name = f"engram-l{layer}-r{rank}of{tp}.bin"
        entry = by_name.get(name)
        if entry is None:
            problems.append(f"packed Engram: {name} not listed in {mpath}")
            continue
        path = os.path.join(packed_dir, name)
        try:
            lo, hi, rows, size = (int(entry[k]) for k in ("lo", "hi", "rows", "size"))
        except (KeyError, TypeError, ValueError):
            problems.append(f"packed Engram: {mpath}: entry {name} lacks lo/hi/rows/size")
            continue
        try:
            actual = os.stat(path).st_size
            with open(path, "rb") as fh:
                head = fh.read(SHARD_HEADER.size)
        except FileNotFoundError:
            problems.append(f"packed Engram: {path} is missing (listed in {mname})")
            continue
        except OSError as exc:
            problems.append(f"packed Engram: {path} unreadable ({_why(exc)})")
            continue
        if actual != size:
            problems.append(f"packed Engram: {path} is {actual} B, {mname} records {size} B")
            continue
        want = (SHARD_MAGIC, layer, lo, hi, rows, SHARD_ROW_BYTES)
        got = SHARD_HEADER.unpack(head) if len(head) == SHARD_HEADER.size else None
        if got != want or size != SHARD_HEADER_BYTES + (hi - lo) * SHARD_ROW_BYTES:
            problems.append(
                f"packed Engram: {path} header does not match {mname} "
                f"(layer {layer}, rows [{lo}, {hi}) of {rows}, {SHARD_FORMAT})"
            )
            continue
        shards.append(PackedShard(name, layer, lo, hi, rows, size))
    return mpath, shards, problems


def _check_model_config(model_path: str | None) -> tuple[str, list[str]]:
    if not model_path:
        return "", ["model config: no --model-path given"]
    path = os.path.join(model_path, "config.json")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        return path, [f"model config {path}: unreadable ({_why(exc)})"]
    except ValueError as exc:
        return path, [f"model config {path}: not JSON ({exc})"]
    if not isinstance(doc, dict):
        return path, [f"model config {path}: not a JSON object"]
    return path, []


def check_kit(knobs: Knobs, cfg: ServerConfig, env: Mapping[str, str]) -> KitReport:
    """Run the launcher's checks for this rank; raises KitCheckFailed listing every problem found.

    A missing kit directory or an unusable manifest stops at once (nothing else can be judged);
    otherwise every check runs and all problems are reported together.
    """
    kit_dir = knobs.kit_dir
    if not kit_dir:
        raise KitCheckFailed(["SPARKCTL_SIM_KIT_DIR is not set"])
    if not os.path.isdir(kit_dir):
        raise KitCheckFailed([f"kit directory {kit_dir} is missing (SPARKCTL_SIM_KIT_DIR)"])
    manifest = os.path.join(kit_dir, knobs.kit_manifest)
    overlays = _read_overlay_manifest(manifest)
    report = KitReport(kit_dir=kit_dir, manifest=manifest, target=knobs.kit_target, overlays=sorted(overlays))
    problems = _check_overlays(knobs.kit_target, overlays)
    problems += _check_adapters(kit_dir, knobs.kit_adapters, env)
    report.adapters = [os.path.join(kit_dir, a) for a in knobs.kit_adapters]
    packed_dir = env.get("DSV41_PACKED_DIR", "").strip()
    if resident_engram(env):
        report.engram = "resident"
        problems += _check_resident(cfg, env)
    elif not packed_dir:
        problems.append("packed Engram: DSV41_PACKED_DIR is not set")
    else:
        report.packed_dir = packed_dir
        report.packed_manifest, report.shards, more = _check_packed(
            packed_dir, cfg.node_rank, int(cfg["tp_size"])
        )
        problems += more
    report.model_config, more = _check_model_config(cfg["model_path"])
    problems += more
    if roce8_enabled(env) and int(cfg["tp_size"]) != ROCE8_WORLD:
        problems.append(f"RoCEnante: {ROCE8_SWITCH}=1 needs the eight-rank TP group, this rank's "
                        f"tp_size is {cfg['tp_size']} (SG17's overlay raises at group creation)")
    if problems:
        raise KitCheckFailed(problems)
    return report


def resident_engram(env: Mapping[str, str]) -> bool:
    """SG17's resident-Engram hook set is on (its sitecustomize installs it only at exactly "1")."""
    return env.get(RESIDENT_SWITCH, "").strip() == "1"


def _check_resident(cfg: ServerConfig, env: Mapping[str, str]) -> list[str]:
    """What the resident hook set refuses at model load: another TP size, or an Engram host table."""
    problems = []
    tp = int(cfg["tp_size"])
    if tp != RESIDENT_TP:
        problems.append(f"resident Engram: {RESIDENT_SWITCH}=1 needs --tp-size {RESIDENT_TP} (owned-row "
                        f"shards of the eight-rank group), this rank has {tp}")
    if env.get(HOST_TABLE_SWITCH, "").strip() == "1":
        problems.append(f"resident Engram: {HOST_TABLE_SWITCH}=1 puts the tables in a host table; "
                        f"{RESIDENT_SWITCH}=1 needs them device-resident (set it to 0)")
    return problems


# -- build products ---------------------------------------------------------------------------


def _read_json(path: str, what: str) -> tuple[Any, str | None]:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh), None
    except OSError as exc:
        return None, f"{what} {path}: unreadable ({_why(exc)})"
    except ValueError as exc:
        return None, f"{what} {path}: not JSON ({exc})"


def _digest_problem(what: str, path: str, want: str, source: str) -> str | None:
    """None when ``path`` hashes to ``want``; else one line naming the file and both sides."""
    try:
        got = sha256_file(path)
    except FileNotFoundError:
        return f"{what} {path} is missing ({source} records sha256 {want})"
    except OSError as exc:
        return f"{what} {path} unreadable ({_why(exc)}; {source} records sha256 {want})"
    if got != want:
        return f"{what} {path} has sha256 {got}, {source} records {want}"
    return None


def _check_row_store(kit_dir: str) -> list[str]:
    record = os.path.join(kit_dir, ROW_STORE_RECORD)
    doc, problem = _read_json(record, "row store build record")
    if problem:
        return [problem + " (the kit's stage-time build writes it)"]
    want = doc.get(ROW_STORE_KEY) if isinstance(doc, dict) else None
    if not isinstance(want, str) or not HEX64.fullmatch(want):
        return [f"row store build record {record}: no {ROW_STORE_KEY} (64 lower-case hex)"]
    problem = _digest_problem("row store library", os.path.join(kit_dir, ROW_STORE_LIBRARY), want, record)
    return [problem] if problem else []


def _check_b12x(kit_dir: str) -> tuple[int, list[str]]:
    manifest = os.path.join(kit_dir, B12X_MANIFEST)
    doc, problem = _read_json(manifest, "b12x source manifest")
    if problem:
        return 0, [problem]
    if not isinstance(doc, dict) or not doc:
        return 0, [f"b12x source manifest {manifest}: expected a non-empty object {{name: sha256}}"]
    problems = []
    for name, want in doc.items():
        parts = name.split("/")
        if os.path.isabs(name) or ".." in parts or not name.strip("/."):
            problems.append(f"b12x source manifest {manifest}: {name!r} is not a path inside {B12X_DIR}/")
        elif not isinstance(want, str) or not HEX64.fullmatch(want):
            problems.append(f"b12x source manifest {manifest}: {name} has no sha256 (64 lower-case hex)")
        else:
            more = _digest_problem("b12x source", os.path.join(kit_dir, B12X_DIR, name), want, manifest)
            problems += [more] if more else []
    return len(doc), problems


def check_build_products(kit_dir: str) -> tuple[str, list[str]]:
    """The kit's stage-time build products, as the Engram backend's import needs them.

    Returns (one log line saying what was checked, problems: one line per file, each naming it).
    """
    problems = _check_row_store(kit_dir)
    count, more = _check_b12x(kit_dir)
    problems += more
    summary = (
        f"simulated Engram backend import: {os.path.join(kit_dir, ROW_STORE_LIBRARY)} matches "
        f"{ROW_STORE_RECORD}; {count} b12x sources in {os.path.join(kit_dir, B12X_DIR)} match {B12X_MANIFEST}"
    )
    return summary, problems


# -- markers ------------------------------------------------------------------------------------


def _dump(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), sort_keys=False)


def roce_enabled(env: Mapping[str, str]) -> bool:
    """The pynccl overlay's switch; only an explicit 0 turns the RoCE route off in the simulator."""
    return env.get("SGLANG4_ROCE_ALLREDUCE", "").strip() != "0"


def roce8_enabled(env: Mapping[str, str]) -> bool:
    """SG17's pynccl overlay routes over RoCEnante only at exactly SGLANG8_ROCE_ALLREDUCE=1."""
    return env.get(ROCE8_SWITCH, "").strip() == "1"


def roce_markers(cfg: ServerConfig, env: Mapping[str, str]) -> list[str]:
    """Logged once the TP group formed (the overlay builds its all-reduce on the TP group)."""
    rank, world = cfg.node_rank, int(cfg["tp_size"])
    if roce8_enabled(env):
        return [
            "ROCE_TP8_READY " + _dump({"rank": rank, "world_size": world}),
            f"ROCE_TP8_ROUTE rank={rank} dtype=torch.bfloat16 bytes={ROCE_ROUTE_BYTES}",
        ]
    if not roce_enabled(env):
        return []
    return [
        "ROCE_TP4_READY " + _dump({"rank": rank, "world_size": world}),
        f"ROCE_TP4_ROUTE rank={rank} dtype=torch.bfloat16 bytes={ROCE_ROUTE_BYTES}",
    ]


def post_result_markers(cfg: ServerConfig, env: Mapping[str, str]) -> list[str]:
    """SG17's result-boundary health check, once per rank (nothing without its RoCE switch)."""
    if not roce8_enabled(env):
        return []
    return ["ROCE_POST_RESULT_HEALTH " + _dump({"rank": cfg.node_rank, "world_size": int(cfg["tp_size"]),
                                                "healthy": True})]


def _env_number(env: Mapping[str, str], name: str) -> float:
    try:
        return float(env.get(name, "").strip() or 0)
    except ValueError:
        return 0.0


def engram_markers(report: KitReport, cfg: ServerConfig, env: Mapping[str, str]) -> list[str]:
    """One line per packed layer, as the kit's Engram backend logs it when the table is mapped."""
    cache_bytes = int(_env_number(env, "DSV41_CACHE_GIB") * (1 << 30))
    resident_scales = env.get("DSV41_RESIDENT_SCALES", "").strip().lower() in ("1", "true", "yes", "on")
    out = []
    for shard in report.shards:
        doc = {
            "layer": shard.layer,
            "rank": cfg.node_rank,
            "tp_size": int(cfg["tp_size"]),
            "packed": True,
            "empty_weight_parameters": True,
            "cache_bytes": cache_bytes,
            "scale_bytes": shard.rows * 8 if resident_scales else 0,
            "rows": [shard.lo, shard.hi],
            "path": os.path.join(report.packed_dir, shard.name),
        }
        out.append("NVME_ENGRAM_READY " + _dump(doc))
    return out


def _moe_entry(cfg: ServerConfig, experts_total: int, backend: str | None) -> dict[str, Any]:
    tp, ep = int(cfg["tp_size"]), max(1, int(cfg["ep_size"]))
    moe_tp = max(1, tp // ep)
    experts = experts_total // ep
    inter = MOE_INTERMEDIATE // moe_tp
    return {
        "method": MOE_METHODS.get(str(backend), str(backend)),
        "local_experts": experts,
        "intermediate": inter,
        "ep_size": ep,
        "ep_rank": cfg.node_rank // moe_tp,
        "tp_size": moe_tp,
        "tp_rank": cfg.node_rank % moe_tp,
        "w13_shape": [experts, 2 * inter, HIDDEN // 2],
        "w2_shape": [experts, HIDDEN, inter // 2],
    }


def moe_layout_marker(cfg: ServerConfig) -> str:
    """``DSPARK_MOE_LAYOUT {target: {layer: entry} ×40, draft: {stage: entry} ×3}``.

    The published checker counts entries per role and compares their values; the layer keys are
    the simulator's own names. No speculative algorithm means no draft stages.
    """
    target = _moe_entry(cfg, TARGET_EXPERTS, cfg["moe_runner_backend"])
    doc: dict[str, Any] = {
        "target": {f"model.layers.{i}.mlp.experts": target for i in range(TARGET_LAYERS)},
        "draft": {},
    }
    if str(cfg["speculative_algorithm"] or "").upper() == "DSPARK":
        draft = _moe_entry(cfg, DRAFT_EXPERTS, cfg["speculative_moe_runner_backend"])
        doc["draft"] = {f"draft.stages.{j}.mlp.experts": draft for j in range(DRAFT_STAGES)}
    return "DSPARK_MOE_LAYOUT " + _dump(doc)
