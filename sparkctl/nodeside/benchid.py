"""What a node says about itself for a bench or qualify result's source identity: OS, DGX OS,
kernel, NVIDIA driver, CX-7 firmware, BIOS, the engine image's ID, the checkpoint's config and index
digests, and the serving kit the ranks mount (the version ``current`` points at, sparkctl's build
record ``.sparkctl-build.json`` and a digest of each adapter tree and each overlay file).

Standard library only (shipped by ``nodeside.ship`` with ``system``, ``links``, ``rdma``,
``discover`` and ``kit``); it only reads, and it reads no GPU: the driver version comes from
``/proc/driver/nvidia/version``, never NVML or nvidia-smi, so it may run at any time around a timed
window. Anything absent is reported as None, never guessed.
"""

import json
import os
import platform

from . import discover, kit, rdma, system

MODE = "benchid"
CHECKPOINT_FILES = {"config_sha256": "config.json", "index_sha256": "model.safetensors.index.json"}


def _file_digest(path):
    return kit.file_sha256(path) if os.path.isfile(path) else None


def image_id(image):
    if not image:
        return None
    rc, out, err = system.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], 15)
    return out.strip() if rc == 0 else "missing: " + ((err.strip().splitlines() or ["no image"])[-1])[:160]


def checkpoint(model_dir):
    return {key: _file_digest(os.path.join(model_dir, name)) for key, name in CHECKPOINT_FILES.items()}


def serving_kit(store, adapters, overlay_source=None, overlays=(), manifest=None):
    """The kit version the ranks mount, sparkctl's build record there, each adapter tree's digest,
    the overlay manifest's digest and each overlay file's SHA-256 as bound into the engine."""
    if not store:
        return None
    current = os.path.join(store, kit.CURRENT)
    version = kit.current_version(store)
    record = None
    path = os.path.join(current, kit.OWN_PREFIX + "build.json")
    text = system.read_text(path)
    if text:
        try:
            record = json.loads(text)
        except ValueError:
            record = {"error": "unreadable " + path}
    trees = {}
    for rel in adapters:
        root = os.path.join(current, rel)
        try:
            trees[rel] = kit.tree_digest(root) if os.path.isdir(root) else _file_digest(root)
        except (OSError, kit.KitError) as exc:
            trees[rel] = "error: " + str(exc)[:200]
    files = {}
    for rel in overlays:
        files[rel] = _file_digest(os.path.join(current, overlay_source or "", rel))
    return {
        "version": version,
        "build_record": record,
        "adapters": trees,
        "overlays": files,
        "manifest_sha256": _file_digest(os.path.join(current, manifest)) if manifest else None,
    }


def identify(params):
    os_fields = discover.os_release()
    return {
        "mode": MODE,
        "hostname": platform.node(),
        "os": os_fields.get("PRETTY_NAME"),
        "dgx_os": (discover.dgx_release() or {}).get("DGX_SWBUILD_VERSION"),
        "kernel": platform.release(),
        "nvidia_driver": discover.nvidia_driver(),
        "cx7_firmware": ",".join(rdma.firmware(params.get("hcas") or [])) or None,
        "bios": discover.bios(),
        "image_id": image_id(params.get("image")),
        "checkpoint": checkpoint(params["model_dir"]),
        "kit": serving_kit(
            params.get("kit_store"),
            params.get("adapters") or [],
            params.get("overlay_source"),
            params.get("overlays") or [],
            params.get("manifest"),
        ),
    }


def main(params, shipped):
    """Print the answer as one JSON line."""
    print(json.dumps(identify(params)))


__all__ = ["MODE", "checkpoint", "identify", "main", "serving_kit"]
