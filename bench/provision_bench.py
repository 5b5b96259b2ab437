#!/usr/bin/env python3
"""Provision wall time on the lab, as ratios measured in one run.

  1. first run      sparkctl's runner on freshly booted lab nodes (tuned SSH: pipelining,
                    ControlPersist, no compression — ansible.cfg)
  2. no-op re-run   the same, immediately again (0 changed expected)
  3. no-op, Ansible defaults   the same playbook through plain `ansible-playbook` with Ansible's
                    own SSH defaults (no pipelining, `-C -o ControlMaster=auto -o ControlPersist=60s`)
  4. no-op, plain   plain `ansible-playbook`, no pipelining and no connection reuse
                    (`-C -o ControlMaster=no`)

Prints a table and one JSON line; ratios are against the no-op re-run of step 2.
Usage (root, lab prerequisites installed): python3 bench/provision_bench.py [--keep-lab] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparkctl.ansible import runner  # noqa: E402
from sparkctl.ansible.plan import Plan  # noqa: E402

INVENTORY = REPO / "inventory" / "lab"
ANSIBLE_DEFAULT_SSH_ARGS = "-C -o ControlMaster=auto -o ControlPersist=60s"
PLAIN_SSH_ARGS = "-C -o ControlMaster=no"


def lab(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "sparkctl", "lab", *args], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)


def via_runner(label: str) -> tuple[float, int]:
    t0 = time.monotonic()
    res = runner.execute(Plan("provision.yml", INVENTORY))
    wall = time.monotonic() - t0
    if not res.ok:
        raise SystemExit(f"{label}: provision failed: {[str(f) for f in res.failures]}")
    return wall, res.changed_total


def via_ansible_playbook(label: str, ssh_args: str) -> tuple[float, int]:
    bin_dir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory(prefix="sparkctl-bench-") as tmp:
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_PIPELINING": "False",
            "ANSIBLE_SSH_ARGS": ssh_args,
            "ANSIBLE_HOME": tmp,
            "ANSIBLE_LOCAL_TEMP": tmp,
            "ANSIBLE_SSH_CONTROL_PATH_DIR": tmp,
        }
        t0 = time.monotonic()
        proc = subprocess.run(
            [str(bin_dir / "ansible-playbook"), "-i", str(INVENTORY), "playbooks/provision.yml"],
            cwd=REPO, env=env, capture_output=True, text=True, check=False,
        )
        wall = time.monotonic() - t0
        runner.close_masters(Path(tmp))
    if proc.returncode != 0:
        raise SystemExit(f"{label}: ansible-playbook exited {proc.returncode}:\n{proc.stdout[-3000:]}")
    recap = proc.stdout[proc.stdout.rindex("PLAY RECAP"):]
    changed = sum(int(part.split("=")[1]) for part in recap.split() if part.startswith("changed="))
    return wall, changed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep-lab", action="store_true", help="do not recycle the lab (first run is not fresh)")
    ap.add_argument("--repeat", type=int, default=1, help="no-op runs per variant (median reported)")
    args = ap.parse_args()

    if not args.keep_lab:
        lab("down")
        lab("up")
    results: dict[str, dict[str, float]] = {}
    wall, changed = via_runner("first run")
    first = "first run (sparkctl)" if not args.keep_lab else "first run (sparkctl, lab kept: not fresh)"
    results[first] = {"wall_s": wall, "changed": changed}
    print(f"measured {first}: {wall:.1f}s, {changed} changed", flush=True)

    def median(fn: Callable[..., tuple[float, int]], *a: str) -> tuple[float, int]:
        runs = [fn(*a) for _ in range(max(1, args.repeat))]
        return statistics.median(r[0] for r in runs), max(r[1] for r in runs)

    for label, fn, extra in (
        ("no-op re-run (sparkctl)", via_runner, ()),
        ("no-op, Ansible defaults", via_ansible_playbook, (ANSIBLE_DEFAULT_SSH_ARGS,)),
        ("no-op, no pipelining/ControlPersist", via_ansible_playbook, (PLAIN_SSH_ARGS,)),
    ):
        wall, changed = median(fn, label, *extra)
        results[label] = {"wall_s": wall, "changed": changed}
        print(f"measured {label}: {wall:.1f}s, {changed} changed", flush=True)

    base = results["no-op re-run (sparkctl)"]["wall_s"]
    print(f"{'run':40} {'wall s':>8} {'changed':>8} {'× no-op':>8}")
    for label, r in results.items():
        print(f"{label:40} {r['wall_s']:8.1f} {int(r['changed']):8d} {r['wall_s'] / base:8.2f}")
    summary = {
        "bench": "provision",
        "nodes": 4,
        "results": {
            k: {"wall_s": round(v["wall_s"], 2), "changed": int(v["changed"])} for k, v in results.items()
        },
        "fresh_lab": not args.keep_lab,
        "ratio_first_over_noop": round(results[first]["wall_s"] / base, 2),
        "ratio_ansible_defaults_over_noop": round(results["no-op, Ansible defaults"]["wall_s"] / base, 2),
        "ratio_plain_over_noop": round(results["no-op, no pipelining/ControlPersist"]["wall_s"] / base, 2),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
