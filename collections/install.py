#!/usr/bin/env python3
"""Install the pinned collections of collections/requirements.yml into collections/ansible_collections/.

Galaxy is often unreachable (air-gapped labs, CI mirrors), while a Python package index is always
there for the venv. The community `ansible` package on PyPI carries exact versions of the
collections we need, so this script downloads that one wheel (``pip download --no-deps``, through
pip's own configuration) and unpacks just the pinned collections from it, checking each version
against requirements.yml. Anything the bundle lacks, or carries at another version, is handed to
``ansible-galaxy collection install``. Re-running is a no-op when everything is in place.

An installed sparkctl (a wheel, no clone) runs this on first use with ``--dest`` and ``--cache``
pointing into its state directory (``sparkctl.ansible.content.ensure_collections``).

Usage: python3 collections/install.py [--python PATH] [--dest DIR] [--cache DIR] [--check]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEST = HERE  # the collections path; the collections themselves go to DEST/ansible_collections/
REQUIREMENTS = HERE / "requirements.yml"
# The `ansible` release whose bundled collections match requirements.yml (ansible 12 = core 2.19).
BUNDLE = "ansible==12.3.0"
CACHE = HERE.parent / ".sparkctl" / "cache" / "wheels"


def read_requirements() -> dict[str, str]:
    import yaml  # PyYAML is a sparkctl dependency, present in the venv

    data = yaml.safe_load(REQUIREMENTS.read_text()) or {}
    out: dict[str, str] = {}
    for item in data.get("collections") or []:
        out[str(item["name"])] = str(item["version"])
    return out


def installed_version(name: str, target: Path) -> str | None:
    ns, coll = name.split(".", 1)
    manifest = target / ns / coll / "MANIFEST.json"
    if not manifest.is_file():
        return None
    return str(json.loads(manifest.read_text())["collection_info"]["version"])


def bundle_wheel(python: str, cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    name, version = BUNDLE.split("==")
    found = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if found:
        return found[0]
    subprocess.run(
        [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(cache), BUNDLE],
        check=True,
    )
    found = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip download {BUNDLE} produced no wheel in {cache}")
    return found[0]


def extract(wheel: Path, wanted: dict[str, str], target: Path) -> list[str]:
    """Unpack the wanted collections at the pinned version; return the names not satisfied."""
    missing: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        for name, version in wanted.items():
            ns, coll = name.split(".", 1)
            prefix = f"ansible_collections/{ns}/{coll}/"
            manifest = prefix + "MANIFEST.json"
            if manifest not in names:
                missing.append(name)
                continue
            have = json.loads(zf.read(manifest))["collection_info"]["version"]
            if have != version:
                print(f"  {name}: the bundle has {have}, requirements.yml pins {version}")
                missing.append(name)
                continue
            dest = target / ns / coll
            with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                for member in names:
                    if member.startswith(prefix) and not member.endswith("/"):
                        zf.extract(member, tmp)
                if dest.exists():
                    shutil.rmtree(dest)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(Path(tmp) / prefix), str(dest))
            print(f"  {name} {version} (from {wheel.name})")
    return missing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="interpreter whose pip downloads the bundle")
    ap.add_argument("--dest", type=Path, default=DEST, help="collections path (default: this directory)")
    ap.add_argument("--cache", type=Path, default=CACHE, help="where the downloaded bundle wheel is kept")
    ap.add_argument("--check", action="store_true", help="only report; exit 1 if something is missing")
    args = ap.parse_args()
    target = args.dest.resolve() / "ansible_collections"

    wanted = read_requirements()
    todo = {n: v for n, v in wanted.items() if installed_version(n, target) != v}
    if not todo:
        print(f"collections: all {len(wanted)} pinned collections present in {target}")
        return 0
    if args.check:
        for name, version in todo.items():
            print(f"missing: {name} {version} (installed: {installed_version(name, target) or 'none'})")
        return 1
    print(f"collections: installing {', '.join(f'{n} {v}' for n, v in todo.items())}")
    target.mkdir(parents=True, exist_ok=True)
    left = extract(bundle_wheel(args.python, args.cache), todo, target)
    if left:
        galaxy = Path(args.python).parent / "ansible-galaxy"
        cmd = [str(galaxy) if galaxy.exists() else "ansible-galaxy", "collection", "install",
               "-p", str(target.parent)]
        cmd += [f"{n}:=={todo[n]}" for n in left]
        print("  from Galaxy: " + " ".join(cmd))
        subprocess.run(cmd, check=True)
    bad = {n: v for n, v in wanted.items() if installed_version(n, target) != v}
    if bad:
        print(f"collections: still missing {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
