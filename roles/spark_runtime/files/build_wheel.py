#!/usr/bin/env python3
"""Build the rank simulator's wheel on the controller, once per source state, and describe it as JSON.

The lab nodes have no network access, so the rank simulator (standard library only) travels as a
wheel the controller builds and pushes. The wheel holds the simulator's package and its dist-info
only (what a node unpacks onto its PYTHONPATH and imports); it is assembled with zipfile, with
fixed timestamps (same content, same bytes), and written under a temporary name then renamed, so
two provisions building at once (two sites from one checkout) never meet half a file, and no
build backend writes into the checkout.

It is cached under --out by a hash of what the simulator runs on a node (from a source tree:
pyproject.toml, sparkctl/__init__.py, sparkctl_sim/ — it imports nothing else), so re-running a
provision reuses the same file and the copy to the nodes is a no-op; an edit elsewhere in the
package does not make every node "changed". From an installed sparkctl (no source tree: --src is
the packaged Ansible content), the installed simulator package is the source.

Output (stdout, one JSON object): {"wheel": path, "hash": 16 hex digits, "entry": "module:function"}
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

SOURCES = ("pyproject.toml", "sparkctl/__init__.py", "sparkctl_sim")
EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: reproducible bytes


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


def package_files(pkg: Path) -> list[Path]:
    return sorted(p for p in pkg.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in (".pyc", ".pyo"))


def assemble(pkg: Path, name: str, version: str, script: str, entry: str, digest: str,
             out: Path) -> dict[str, str]:
    """The wheel of package directory ``pkg`` under ``out/digest`` (made once), described."""
    stem = f"{name.replace('-', '_')}-{version}"
    wheel = out / digest / f"{stem}-py3-none-any.whl"
    if not wheel.is_file():
        wheel.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
            "WHEEL": "Wheel-Version: 1.0\nGenerator: sparkctl build_wheel\nRoot-Is-Purelib: true\n"
                     "Tag: py3-none-any\n",
            "entry_points.txt": f"[console_scripts]\n{script} = {entry}\n",
        }
        fd, tmp = tempfile.mkstemp(prefix=".", suffix=".partial", dir=wheel.parent)
        try:
            with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
                for p in package_files(pkg):
                    zf.writestr(zipfile.ZipInfo(str(p.relative_to(pkg.parent)), EPOCH), p.read_bytes())
                for fname, text in meta.items():
                    zf.writestr(zipfile.ZipInfo(f"{stem}.dist-info/{fname}", EPOCH), text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, wheel)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return {"wheel": str(wheel), "hash": digest, "entry": entry}


def source_wheel(src: Path, out: Path, script: str) -> dict[str, str]:
    """The simulator's wheel from a source tree: name and entry point from pyproject.toml, the
    version from sparkctl/__init__.py (what pyproject.toml's dynamic version reads)."""
    project = tomllib.loads((src / "pyproject.toml").read_text())["project"]
    entry = project.get("scripts", {}).get(script)
    if entry is None:
        raise SystemExit(f"pyproject.toml names no script {script}")
    init = (src / "sparkctl" / "__init__.py").read_text()
    found = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', init, re.MULTILINE)
    version = found.group(1) if found else "0"
    pkg = src / entry.split(":")[0].split(".")[0]
    return assemble(pkg, project["name"], version, script, entry, source_hash(src), out)


def installed_wheel(out: Path, script: str) -> dict[str, str]:
    """A wheel of the installed package that provides ``script`` (the simulator), cached by content."""
    ep = next(e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == script)
    top = ep.value.split(":")[0].split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{top} (the package behind {script}) is not importable")
    pkg = Path(spec.origin).parent
    name, version = (ep.dist.name, ep.dist.version) if ep.dist else (top, "0")
    h = hashlib.sha256(f"{name} {version} {ep.value}\0".encode())
    for p in package_files(pkg):
        h.update(str(p.relative_to(pkg.parent)).encode() + b"\0" + p.read_bytes() + b"\0")
    return assemble(pkg, name, version, script, ep.value, h.hexdigest()[:16], out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--script", default="sparkctl-sim-rank")
    args = ap.parse_args()
    src = args.src.resolve()
    if (src / "pyproject.toml").is_file():
        desc = source_wheel(src, args.out, args.script)
    else:
        desc = installed_wheel(args.out, args.script)
    print(json.dumps(desc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
