#!/usr/bin/env python3
"""Where a person waits on sparkctl itself: `--version`, a <TAB>, `--help` (goal: a <TAB> < 0.2 s).

Each case is one whole process, timed from start to exit, N rounds, the cases interleaved round by
round (a load that comes and goes touches every case alike):
  * baseline: `python -c pass` and `python -c 'import click'` (the floor any click program pays);
  * `sparkctl --version`;
  * completion of a command name, as bash asks for it on <TAB>:
    `_SPARKCTL_COMPLETE=complete_bash COMP_WORDS='sparkctl st' COMP_CWORD=1 sparkctl`;
  * `sparkctl --help`.
Before the rounds, each case runs once untimed (the command index and the byte-code are built).
Prints each median (with min and max) and its ratio to both baselines; `--json` prints one
document. `--tree DIR` adds the same cases for another checkout of sparkctl (e.g. the commit before
a change, from `git archive`), run with the same Python, so both are measured in the same run.

    python bench/startup_bench.py [-n 15] [--tree /tmp/sparkctl-before] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _stats import spread  # the one median/min/max summary of bench/

REPO = Path(__file__).resolve().parents[1]
GOAL_TAB_S = 0.2
COMPLETE_ENV = {"_SPARKCTL_COMPLETE": "complete_bash", "COMP_WORDS": "sparkctl st", "COMP_CWORD": "1"}


def cases(tree: Path | None, label: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The sparkctl cases of one checkout (None: the one this interpreter imports)."""
    env = {} if tree is None else {"PYTHONPATH": str(tree)}
    run = [sys.executable, "-m", "sparkctl"]
    return {
        f"{label}--version": ([*run, "--version"], env),
        f"{label}tab": (run, {**env, **COMPLETE_ENV}),
        f"{label}--help": ([*run, "--help"], env),
    }


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", *COMPLETE_ENV)}
    environ.update(env)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=environ, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return seconds


def ratios(medians: dict[str, float], name: str) -> dict[str, float]:
    return {f"over_{b}": round(medians[name] / medians[b], 2) for b in ("python", "click")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--rounds", type=int, default=15)
    ap.add_argument("--tree", type=Path, help="another sparkctl checkout, measured beside this one")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    todo: dict[str, tuple[list[str], dict[str, str]]] = {
        "python": ([sys.executable, "-c", "pass"], {}),
        "click": ([sys.executable, "-c", "import click"], {}),
        **cases(None, ""),
    }
    if args.tree is not None:
        todo.update(cases(args.tree.resolve(), "tree:"))
    samples: dict[str, list[float]] = {name: [] for name in todo}
    # Outside the clone and with no inventory: nothing but sparkctl itself is measured; the state
    # directory (the command index) is the run's own.
    with tempfile.TemporaryDirectory(prefix="sparkctl-startup-") as tmp:
        os.environ["SPARKCTL_STATE_DIR"] = str(Path(tmp) / "state")
        os.environ.pop("SPARKCTL_INVENTORY", None)
        for argv, env in todo.values():
            timed(argv, env, Path(tmp))
        for _ in range(args.rounds):
            for name, (argv, env) in todo.items():
                samples[name].append(timed(argv, env, Path(tmp)))

    summary: dict[str, Any] = {name: spread(xs, digits=3, unit="_s") for name, xs in samples.items()}
    medians = {name: s["median_s"] for name, s in summary.items()}
    for name in todo:
        if name not in ("python", "click"):
            summary[name].update(ratios(medians, name))
    result = {"rounds": args.rounds, "cases": summary, "goal_tab_under_0_2_s": medians["tab"] < GOAL_TAB_S}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.rounds} rounds, medians (min–max), ratios to `python -c pass` and `import click`:")
    for name, s in summary.items():
        base = name in ("python", "click")
        extra = "" if base else f"  {s['over_python']:.1f}x python, {s['over_click']:.1f}x click"
        print(f"  {name:<16} {s['median_s']:.3f} s ({s['min_s']:.3f}–{s['max_s']:.3f}){extra}")
    print(f"  <TAB> under {GOAL_TAB_S} s: {'yes' if result['goal_tab_under_0_2_s'] else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
