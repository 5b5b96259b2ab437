"""A synthetic DeepSeek-V4.1-shaped checkpoint for the staging tests and the benchmark.

Safetensors shards written byte by byte here (no torch, no safetensors package, and none of
sparkctl's code, so the tests check sparkctl against an independent writer):

* ``filler_shards`` shards of BF16 filler tensors (stand-ins for the experts),
* two Engram shards at the end, holding ``layers.1.engram.embed.{weight,scale}`` and
  ``layers.14.engram.embed.{weight,scale}`` as ``F8_E4M3 [rows, 256]`` and ``F8_E8M0 [rows, 8]``,
  each after a small norm tensor so the offsets are not trivial,
* ``config.json``: the same bytes whatever the sizes (the lab kit's ``versions.lock.json`` pins its
  digest, ``sparkctl_lab.kit.MODEL_CONFIG``), and ``model.safetensors.index.json`` (weight_map,
  total_size, and the arguments and layout of this checkpoint in its metadata).

The bytes come from ``random.Random(seed)``, so the same arguments give the same checkpoint.
Small by default; ``--engram-rows`` and ``--filler-mib`` scale it to several GiB.

    python tests/fixtures/synth_checkpoint.py OUT_DIR [--engram-rows N] [--filler-mib M] [--filler-shards K]
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
from pathlib import Path

CHUNK = 16 << 20
ENGRAM_LAYERS = (1, 14)
# config.json, independent of the sizes: the lab kit's lock pins its digest (a unit test compares it
# with sparkctl_lab.kit.MODEL_CONFIG).
MODEL_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "engram_layers": list(ENGRAM_LAYERS),
}


def _header(tensors: list[tuple[str, str, list[int], int]]) -> tuple[bytes, list[tuple[str, int, int]]]:
    """Header bytes for (name, dtype, shape, nbytes) in order; returns the data offsets too."""
    doc: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offsets = []
    pos = 0
    for name, dtype, shape, nbytes in tensors:
        doc[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + nbytes]}
        offsets.append((name, pos, pos + nbytes))
        pos += nbytes
    raw = json.dumps(doc, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned, as the reference writer does
    return struct.pack("<Q", len(raw)) + raw, offsets


def _write_random(f, rng: random.Random, nbytes: int) -> None:
    left = nbytes
    while left:
        n = min(CHUNK, left)
        f.write(rng.randbytes(n))
        left -= n


def write_shard(
    path: Path, tensors: list[tuple[str, str, list[int], int]], rng: random.Random
) -> dict[str, int]:
    """Write one shard; returns {tensor name: absolute file offset of its first byte}."""
    head, offsets = _header(tensors)
    with path.open("wb") as f:
        f.write(head)
        for _name, _dtype, _shape, nbytes in tensors:
            _write_random(f, rng, nbytes)
    return {name: len(head) + start for name, start, _ in offsets}


def write_checkpoint(
    out_dir: Path | str,
    engram_rows: tuple[int, int] = (5003, 4999),
    filler_shards: int = 2,
    filler_mib: float = 1.0,
    seed: int = 1234,
) -> dict[str, object]:
    """Write the checkpoint; returns where each Engram table lives (for reference computations).

    A directory that already holds the checkpoint of the same arguments is left as it is.
    """
    out = Path(out_dir)
    params = {
        "engram_rows": list(engram_rows),
        "filler_shards": filler_shards,
        "filler_mib": filler_mib,
        "seed": seed,
    }
    existing = existing_checkpoint(out, params)
    if existing is not None:
        return existing
    out.mkdir(parents=True, exist_ok=True)
    # the index goes last, so a half-written checkpoint never looks complete; older shards go first
    for old in [out / "config.json", out / "model.safetensors.index.json", *out.glob("model-*.safetensors")]:
        old.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    total_shards = filler_shards + len(ENGRAM_LAYERS)
    weight_map: dict[str, str] = {}
    total = 0
    filler_bytes = int(filler_mib * (1 << 20)) // 2 * 2
    for i in range(filler_shards):
        name = f"model-{i + 1:05d}-of-{total_shards:05d}.safetensors"
        half = filler_bytes // 4 * 2
        tensors = [
            (f"layers.{i + 2}.mlp.experts.w1", "BF16", [half // 2], half),
            (f"layers.{i + 2}.mlp.experts.w2", "BF16", [(filler_bytes - half) // 2], filler_bytes - half),
        ]
        write_shard(out / name, tensors, rng)
        for t in tensors:
            weight_map[t[0]] = name
            total += t[3]
    engram: dict[str, dict[str, object]] = {}
    for j, (layer, rows) in enumerate(zip(ENGRAM_LAYERS, engram_rows, strict=True)):
        name = f"model-{filler_shards + j + 1:05d}-of-{total_shards:05d}.safetensors"
        tensors = [
            (f"layers.{layer}.engram.norm.weight", "BF16", [256], 512),
            (f"layers.{layer}.engram.embed.weight", "F8_E4M3", [rows, 256], rows * 256),
            (f"layers.{layer}.engram.embed.scale", "F8_E8M0", [rows, 8], rows * 8),
        ]
        offs = write_shard(out / name, tensors, rng)
        for t in tensors:
            weight_map[t[0]] = name
            total += t[3]
        engram[str(layer)] = {
            "file": name,
            "rows": rows,
            "weight_offset": offs[f"layers.{layer}.engram.embed.weight"],
            "scale_offset": offs[f"layers.{layer}.engram.embed.scale"],
        }
    (out / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=2) + "\n")
    metadata = {
        "total_size": total,
        "synthetic": params,
        "synthetic_layout": {"engram": engram, "total_tensor_bytes": total},
    }
    index = {"metadata": metadata, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return {"dir": str(out), "engram": engram, "total_tensor_bytes": total}


def existing_checkpoint(out: Path, params: dict[str, object]) -> dict[str, object] | None:
    """The info of a complete checkpoint written earlier with the same parameters, else None."""
    try:
        config = json.loads((out / "config.json").read_text())
        index = json.loads((out / "model.safetensors.index.json").read_text())
    except (OSError, ValueError):
        return None
    metadata = index.get("metadata") if isinstance(index, dict) else None
    if config != MODEL_CONFIG or not isinstance(metadata, dict) or metadata.get("synthetic") != params:
        return None
    shards = set(index.get("weight_map", {}).values())
    if not shards or not all((out / s).is_file() for s in shards):
        return None
    return {"dir": str(out), **metadata["synthetic_layout"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument(
        "--engram-rows",
        type=int,
        nargs="+",
        default=[5003, 4999],
        help="rows of the layer-1 and layer-14 tables (one value: both)",
    )
    ap.add_argument("--filler-shards", type=int, default=2)
    ap.add_argument("--filler-mib", type=float, default=1.0, help="MiB per filler shard")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)
    rows = args.engram_rows * 2 if len(args.engram_rows) == 1 else args.engram_rows[:2]
    info = write_checkpoint(args.out_dir, (rows[0], rows[1]), args.filler_shards, args.filler_mib, args.seed)
    json.dump(info, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
