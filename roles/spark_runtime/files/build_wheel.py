#!/usr/bin/env python3
"""Build the sparkctl wheel on the controller, once per source state, and describe it as JSON.

The lab nodes have no network access, so the rank simulator (standard library only) travels as a
wheel the controller builds and pushes. The wheel is cached under --out by a hash of what the
simulator runs on a node (pyproject.toml, sparkctl/__init__.py, sparkctl_sim/ — it imports nothing
else), so re-running a provision reuses the same file and the copy to the nodes is a no-op; an
edit elsewhere in the package does not make every node "changed".

From an installed sparkctl (no source tree: --src is the packaged Ansible content), the wheel is
assembled from the installed simulator package instead (zip + dist-info, no build backend needed).

Output (stdout, one JSON object): {"wheel": path, "hash": 16 hex digits, "entry": "module:function"}
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SOURCES = ("pyproject.toml", "sparkctl/__init__.py", "sparkctl_sim")


def source_hash(src: Path) -> str:
    h = hashlib.sha256()
    for top in SOURCES:
        base = src / top
        paths = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for p in paths:
            if "__pycache__" in p.parts or p.suffix in (".pyc", ".pyo"):
                continue
            h.update(str(p.relative_to(src)).encode() + b"\0")
            h.update(p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def entry_point(wheel: Path, script: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt"))
        cp = configparser.ConfigParser()
        cp.read_string(zf.read(name).decode())
    return cp["console_scripts"][script].strip()


def installed_wheel(out: Path, script: str) -> dict[str, str]:
    """A wheel of the installed package that provides ``script`` (the simulator), cached by content."""
    ep = next(e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == script)
    top = ep.value.split(":")[0].split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{top} (the package behind {script}) is not importable")
    pkg = Path(spec.origin).parent
    files = sorted(p for p in pkg.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and p.suffix not in (".pyc", ".pyo"))
    name, version = (ep.dist.name, ep.dist.version) if ep.dist else (top, "0")
    h = hashlib.sha256(f"{name} {version} {ep.value}\0".encode())
    for p in files:
        h.update(str(p.relative_to(pkg.parent)).encode() + b"\0" + p.read_bytes() + b"\0")
    digest = h.hexdigest()[:16]
    stem = f"{name.replace('-', '_')}-{version}"
    wheel = out / digest / f"{stem}-py3-none-any.whl"
    if not wheel.is_file():
        wheel.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
            "WHEEL": "Wheel-Version: 1.0\nGenerator: sparkctl build_wheel\nRoot-Is-Purelib: true\n"
                     "Tag: py3-none-any\n",
            "entry_points.txt": f"[console_scripts]\n{script} = {ep.value}\n",
        }
        tmp = wheel.with_suffix(".partial")
        epoch = (1980, 1, 1, 0, 0, 0)  # reproducible: same content, same bytes
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in files:
                zf.writestr(zipfile.ZipInfo(str(p.relative_to(pkg.parent)), epoch), p.read_bytes())
            for fname, text in meta.items():
                zf.writestr(zipfile.ZipInfo(f"{stem}.dist-info/{fname}", epoch), text)
        os.replace(tmp, wheel)
    return {"wheel": str(wheel), "hash": digest, "entry": ep.value}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--script", default="sparkctl-sim-rank")
    args = ap.parse_args()
    src = args.src.resolve()
    if not (src / "pyproject.toml").is_file():
        print(json.dumps(installed_wheel(args.out, args.script)))
        return 0
    digest = source_hash(src)
    dest = args.out / digest
    found = sorted(dest.glob("*.whl")) if dest.is_dir() else []
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, SOURCE_DATE_EPOCH="315532800")
        with tempfile.TemporaryDirectory() as tmp:
            # Build from a copy, so the checkout gets no build/ or *.egg-info droppings.
            cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                   "-w", str(dest), str(src)]
            proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                cmd.remove("--no-build-isolation")
                proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            return proc.returncode
        found = sorted(dest.glob("*.whl"))
        if not found:
            sys.stderr.write(f"pip wheel wrote no wheel into {dest}\n")
            return 1
    wheel = found[0]
    print(json.dumps({"wheel": str(wheel), "hash": digest, "entry": entry_point(wheel, args.script)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
