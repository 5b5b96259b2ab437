#!/usr/bin/env python3
"""Build the sparkctl wheel on the controller, once per source state, and describe it as JSON.

The lab nodes have no network access, so the rank simulator (standard library only) travels as a
wheel the controller builds and pushes. The wheel is cached under --out by a hash of what the
simulator runs on a node (pyproject.toml, sparkctl/__init__.py, sparkctl_sim/ — it imports nothing
else), so re-running a provision reuses the same file and the copy to the nodes is a no-op; an
edit elsewhere in the package does not make every node "changed".

Output (stdout, one JSON object): {"wheel": path, "hash": 16 hex digits, "entry": "module:function"}
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--script", default="sparkctl-sim-rank")
    args = ap.parse_args()
    src = args.src.resolve()
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
