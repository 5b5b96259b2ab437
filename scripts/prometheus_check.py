#!/usr/bin/env python3
"""Wait until a Prometheus scrapes every target up, then check it has every series sparkctl's Grafana
dashboard queries (the demo's monitoring step; tests/integration/test_monitoring_lab.py checks the same).

    python3 scripts/prometheus_check.py http://127.0.0.1:19090 --targets 5 [--timeout 90]

Prints one line per target and per series; exit 0 when all are there, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
import urllib.request
from typing import Any

from sparkctl.render import monitoring


def get(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())["data"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url", help="Prometheus base URL")
    ap.add_argument("--targets", type=int, required=True, help="how many targets must be up")
    ap.add_argument("--timeout", type=float, default=90, help="seconds to wait for the targets")
    args = ap.parse_args()
    deadline = time.monotonic() + args.timeout
    targets: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        try:
            targets = get(args.url, "/api/v1/targets", state="active")["activeTargets"]
        except OSError:
            targets = []
        if len(targets) >= args.targets and all(t["health"] == "up" for t in targets):
            break
        time.sleep(1)
    for t in targets:
        print(f"target {t['labels']['job']:<15} {t['labels'].get('node', '?'):<8} {t['scrapeUrl']:<40} "
              f"{t['health']} ({t['lastScrapeDuration'] * 1000:.1f} ms) {t.get('lastError', '')}")
    ok = len(targets) >= args.targets and all(t["health"] == "up" for t in targets)
    for series in monitoring.dashboard_series(monitoring.dashboard()):
        result = get(args.url, "/api/v1/query", query=series)["result"]
        nodes = sorted({r["metric"].get("node", "?") for r in result})
        print(f"series {series:<45} {len(result):>3} ({', '.join(nodes) or 'none'})")
        ok = ok and bool(result)
    print("every target up and every dashboard series present" if ok else "MISSING targets or series")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
