#!/usr/bin/env python3
"""The lab nodes' zip-import cache (sparkctl_lab/zipcache.py): the CPU a Python process spends
importing ``ansible.module_utils.basic`` from a zip, as every Ansible task does on a node.

Measured in the same run, rounds interleaved, each a fresh interpreter (its user+system CPU):
  * baseline: the zip imported as Ansible ships it (Python compiles every source, every run);
  * cached: the same zip with the lab's ``.pth`` hook installed and its cache filled once.
Prints the medians, min–max and the ratio cached / baseline; `--json` prints one document.
Runs on the controller (no lab needed): its Python is the nodes' 3.11, the zip the venv's Ansible.

    python bench/lab_zipcache.py [-n 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _zip_module_utils(dest: Path) -> Path:
    """A zip holding ansible/module_utils the way AnsiballZ does: sources only."""
    import ansible

    root = Path(ansible.__file__).parent
    archive = dest / "payload.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("ansible/__init__.py", "")
        for path in sorted((root / "module_utils").rglob("*.py")):
            z.write(path, str(path.relative_to(root.parent)))
    return archive


def _cpu_of(argv: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--rounds", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from sparkctl_lab import machines

    work = Path(tempfile.mkdtemp(prefix="sparkctl-zipcache-bench-"))
    try:
        archive = _zip_module_utils(work)
        machines.install_zipcache(work / "upper")
        site_dir = (work / "upper" / machines.ZIPCACHE_MODULE).parent
        importer = f"import sys; sys.path.insert(0, {str(archive)!r}); import ansible.module_utils.basic"
        env = {**os.environ, "SPARKCTL_LAB_ZIPCACHE_DIR": str(work / "cache")}
        baseline_argv = [sys.executable, "-S", "-c", importer]
        with_hook = f"import site; site.addsitedir({str(site_dir)!r}); {importer}"
        cached_argv = [sys.executable, "-S", "-c", with_hook]
        _cpu_of(cached_argv, env)  # fills the cache, as a node's first task does
        baseline: list[float] = []
        cached: list[float] = []
        for _ in range(args.rounds):
            baseline.append(_cpu_of(baseline_argv, env))
            cached.append(_cpu_of(cached_argv, env))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def summary(xs: list[float]) -> dict[str, float]:
        return {"median_s": round(statistics.median(xs), 4), "min_s": round(min(xs), 4),
                "max_s": round(max(xs), 4)}

    doc = {
        "what": "CPU of one interpreter importing ansible.module_utils.basic from an AnsiballZ-like zip",
        "rounds": args.rounds,
        "baseline": summary(baseline),
        "cached": summary(cached),
        "ratio_cached_over_baseline": round(statistics.median(cached) / statistics.median(baseline), 3),
        "samples": {"baseline": [round(x, 4) for x in baseline], "cached": [round(x, 4) for x in cached]},
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        for name in ("baseline", "cached"):
            s = doc[name]
            print(f"{name:9s} median {s['median_s'] * 1000:7.1f} ms CPU  (min {s['min_s'] * 1000:.1f}, "
                  f"max {s['max_s'] * 1000:.1f}, {args.rounds} rounds)")
        print(f"cached / baseline: {doc['ratio_cached_over_baseline']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
