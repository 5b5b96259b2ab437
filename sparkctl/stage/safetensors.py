"""Read a safetensors header without torch (standard library only; also runs on the nodes).

A safetensors file is ``<u64 little-endian N><N bytes of JSON header><data>``. Each tensor entry
gives ``dtype``, ``shape`` and ``data_offsets`` [begin, end) relative to the data section, which
starts at byte ``8 + N``. :class:`TensorInfo` carries *absolute* file offsets.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

# Bytes per element of the dtypes the checkpoint uses (others are accepted without a size check).
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F64": 8,
    "I64": 8,
    "U64": 8,
}
MAX_HEADER_BYTES = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    """The file is not a well-formed safetensors file (the message names the file)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute file offset of the first byte
    end: int  # absolute file offset one past the last byte

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def read_header(path: str | os.PathLike[str]) -> dict[str, TensorInfo]:
    """Every tensor of one safetensors file, by name, with absolute offsets; checked against the file size."""
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise SafetensorsError(f"{path}: too short for a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise SafetensorsError(f"{path}: header length {n} is not plausible (file is {size} B)")
            raw = f.read(n)
    except OSError as exc:
        raise SafetensorsError(f"{path}: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SafetensorsError(f"{path}: header is not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    base = 8 + n
    out: dict[str, TensorInfo] = {}
    for name, entry in doc.items():
        if name == "__metadata__":
            continue
        try:
            dtype = str(entry["dtype"])
            shape = tuple(int(d) for d in entry["shape"])
            begin, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SafetensorsError(f"{path}: tensor {name!r} has a malformed entry") from exc
        if not 0 <= begin <= end or base + end > size:
            raise SafetensorsError(f"{path}: tensor {name!r} offsets [{begin}, {end}) lie outside the file")
        elems = 1
        for d in shape:
            elems *= d
        width = DTYPE_BYTES.get(dtype)
        if width is not None and elems * width != end - begin:
            raise SafetensorsError(
                f"{path}: tensor {name!r} is {end - begin} B but {dtype}{list(shape)} needs {elems * width} B"
            )
        out[name] = TensorInfo(name, dtype, shape, base + begin, base + end)
    return out


def read_index(model_dir: str | os.PathLike[str]) -> dict[str, str]:
    """``weight_map`` of ``model.safetensors.index.json``: tensor name -> shard file name."""
    path = os.path.join(os.fspath(model_dir), "model.safetensors.index.json")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise SafetensorsError(f"{path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise SafetensorsError(f"{path}: not JSON ({exc})") from exc
    wmap = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wmap, dict):
        raise SafetensorsError(f"{path}: no weight_map")
    return {str(k): str(v) for k, v in wmap.items()}
