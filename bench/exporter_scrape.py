#!/usr/bin/env python3
"""The node exporter's scrape time per node, against the same HTTP server answering without a read.

For every node of an inventory (default: the lab's), N interleaved rounds, each over one kept-alive
connection as Prometheus scrapes:
  * scrape: GET http://<mgmt>:<exporter port>/metrics, the whole exchange timed on the controller;
  * collect: the exporter's own ``sparkctl_exporter_collect_seconds`` from that body (reading the
    node: systemctl, /health, shards, sysfs, NVML, meminfo, statvfs);
  * baseline: GET /favicon.ico on the same server (prometheus_client answers it with no body and
    reads nothing), i.e. the HTTP and network cost alone.
Per node: medians with min–max, and the ratio scrape / baseline; every section must have been read
(``sparkctl_exporter_section_ok``), else the node is reported as failing. ``--json`` prints one
document.

    python bench/exporter_scrape.py [-i inventory/lab] [-n 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from _stats import spread  # the one median/min/max summary of bench/
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def timed_get(client: httpx.Client, url: str) -> tuple[float, httpx.Response]:
    t0 = time.perf_counter()
    resp = client.get(url)
    resp.read()
    return time.perf_counter() - t0, resp


def timed_raw_get(host: str, port: int, path: str) -> float:
    """One HTTP/1.0 GET over a raw socket, read to the server's close. prometheus_client answers
    /favicon.ico with an empty header line (``: ``) that httpx refuses to parse; the exporter's
    server speaks HTTP/1.0 and closes every connection, as it does after /metrics."""
    t0 = time.perf_counter()
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        while sock.recv(65536):
            pass
    return time.perf_counter() - t0


def parse(body: str) -> tuple[float | None, list[str]]:
    """The exporter's collect time and the sections it could not read."""
    collect, failed = None, []
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            if s.name == "sparkctl_exporter_collect_seconds":
                collect = s.value
            elif s.name == "sparkctl_exporter_section_ok" and s.value != 1:
                failed.append(s.labels["section"])
    return collect, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory", default=str(REPO / "inventory" / "lab"))
    ap.add_argument("-n", "--rounds", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.rounds < 5:
        ap.error("--rounds: at least 5 (the medians need them)")

    from sparkctl.model import load_inventory

    cluster = load_inventory(args.inventory)
    nodes = sorted(cluster.nodes, key=lambda n: n.rank)
    base = {n.name: f"http://{n.mgmt_ip}:{cluster.ports.exporter}" for n in nodes}
    mgmt, port = {n.name: str(n.mgmt_ip) for n in nodes}, int(cluster.ports.exporter)
    clients = {n.name: httpx.Client(timeout=10.0) for n in nodes}
    samples: dict[str, dict[str, list[float]]] = {n.name: {"scrape": [], "collect": [], "baseline": []}
                                                  for n in nodes}
    failures: dict[str, list[str]] = {n.name: [] for n in nodes}
    size: dict[str, int] = {}
    try:
        for name, url in base.items():  # one warm-up exchange each: the connection, the first NVML init
            clients[name].get(url + "/metrics").read()
        for r in range(args.rounds):
            order = ("metrics", "baseline") if r % 2 == 0 else ("baseline", "metrics")
            for name, url in (base.items() if r % 2 == 0 else reversed(base.items())):
                for what in order:
                    if what == "baseline":
                        samples[name]["baseline"].append(timed_raw_get(mgmt[name], port, "/favicon.ico"))
                        continue
                    t, resp = timed_get(clients[name], url + "/metrics")
                    if resp.status_code != 200:
                        failures[name].append(f"/metrics {resp.status_code}")
                        continue
                    collect, failed = parse(resp.text)
                    samples[name]["scrape"].append(t)
                    if collect is not None:
                        samples[name]["collect"].append(collect)
                    failures[name] += [f"section {s} not read" for s in failed]
                    size[name] = len(resp.content)
    finally:
        for c in clients.values():
            c.close()

    report: dict[str, Any] = {"inventory": args.inventory, "rounds": args.rounds, "nodes": {}}
    for name, s in samples.items():
        entry: dict[str, Any] = {k: spread(v, digits=None) for k, v in s.items() if v}
        entry["bytes"] = size.get(name)
        if s["scrape"] and s["baseline"]:
            scrape, baseline = statistics.median(s["scrape"]), statistics.median(s["baseline"])
            entry["ratio_scrape_to_baseline"] = scrape / baseline
        entry["failures"] = sorted(set(failures[name]))
        report["nodes"][name] = entry
    all_scrapes = [t for s in samples.values() for t in s["scrape"]]
    report["scrape_median_s"] = statistics.median(all_scrapes) if all_scrapes else None
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"exporter scrape per node ({args.rounds} interleaved rounds; ms median [min–max])")
        print(f"{'node':<10}{'scrape':>22}{'collect':>22}{'baseline':>22}{'ratio':>8}{'bytes':>8}")
        for name, e in report["nodes"].items():
            def ms(key: str, e: dict[str, Any] = e) -> str:
                v = e.get(key)
                return f"{v['median'] * 1e3:.1f} [{v['min'] * 1e3:.1f}–{v['max'] * 1e3:.1f}]" if v else "—"
            ratio = e.get("ratio_scrape_to_baseline")
            print(f"{name:<10}{ms('scrape'):>22}{ms('collect'):>22}{ms('baseline'):>22}"
                  f"{(f'{ratio:.1f}×' if ratio else '—'):>8}{e['bytes'] or 0:>8}"
                  + (f"  FAILED: {', '.join(e['failures'])}" if e["failures"] else ""))
    return 1 if any(e["failures"] for e in report["nodes"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
