"""`logs`: the rank units' journals over SSH, each line prefixed by rank and node, secrets redacted."""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparkctl.errors import InputError, UnhealthyError
from sparkctl.serve import probe, redact
from sparkctl.serve.tools import Tools, secrets

if TYPE_CHECKING:
    from sparkctl.model import Cluster


def journal_command(unit: str, lines: int | None, since: str | None, follow: bool) -> str:
    cmd = ["journalctl", "-u", unit, "--no-pager", "-o", "short-iso"]
    if since:
        cmd += ["--since", since]
    if lines is not None:
        cmd += ["-n", str(lines)]
    if follow:
        cmd.append("-f")
    return " ".join(shlex.quote(w) for w in cmd)


def show_logs(cluster: Cluster, doc: dict[str, Any], tools: Tools, write: Callable[[str], None],
              rank: int | None = None, follow: bool = False, since: str | None = None,
              lines: int = 100) -> None:
    """Write each journal line (``write`` gets whole lines, newline included) of ``rank`` (default:
    all); ``follow`` keeps going until Ctrl-C. Nodes that could not be read: exit 3, named."""
    nodes = [n for n in cluster.nodes if rank is None or n.rank == rank]
    if not nodes:
        raise InputError(f"no rank {rank} in this cluster", hint=f"ranks are 0..{len(cluster.nodes) - 1}")
    unit = probe.unit_name(doc)
    values = secrets(cluster)
    fleet = tools.fleet(cluster)
    label = {n.name: f"[r{n.rank} {n.name}]" for n in nodes}
    lock = threading.Lock()

    def emit(node: str, line: str) -> None:
        with lock:
            write(f"{label[node]} {redact.redact(line, values)}\n")

    try:
        if not follow:
            cmd = journal_command(unit, lines, since, False) + "\n"
            results = fleet.run(cmd, timeout=30, only=[n.name for n in nodes])
            bad = []
            for n in nodes:
                res = results[n.name]
                if not res.reachable:
                    bad.append(f"{n.name}: {res.error}")
                    continue
                for line in res.stdout.splitlines():
                    emit(n.name, line)
            if bad:
                raise UnhealthyError("some nodes could not be read", details=bad)
            return
        stop = threading.Event()
        cmd = journal_command(unit, lines, since, True)
        threads = [threading.Thread(target=fleet.stream, args=(n.name, cmd, emit, stop), daemon=True)
                   for n in nodes]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                time.sleep(0.2)
        except KeyboardInterrupt:
            stop.set()
    finally:
        fleet.close()
