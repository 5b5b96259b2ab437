"""`logs`: the rank units' journals over SSH, each line prefixed by rank and node, secrets redacted.

On a site of several serving groups the ranks are each group's own (0..n-1 within the group), every
line also names its group, and ``--group`` keeps the journals to the nodes of the groups it names
(``serve.groups.targets``)."""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from sparkctl.ansible import failures
from sparkctl.errors import EXIT_UNREACHABLE, InputError, SparkctlError
from sparkctl.serve import groups as serve_groups
from sparkctl.serve import probe, redact
from sparkctl.serve.tools import Tools, secrets

if TYPE_CHECKING:
    from sparkctl.model import Cluster


def journal_command(unit: str, lines: int | None, since: str | None, follow: bool) -> str:
    # The node is in each line's own prefix ([r0 spark-0]), so journalctl leaves its hostname out.
    cmd = ["journalctl", "-u", unit, "--no-pager", "-o", "short-iso", "--no-hostname"]
    if since:
        cmd += ["--since", since]
    if lines is not None:
        cmd += ["-n", str(lines)]
    if follow:
        cmd.append("-f")
    return " ".join(shlex.quote(w) for w in cmd)


def show_logs(cluster: Cluster, doc: dict[str, Any], tools: Tools, write: Callable[[str], None],
              rank: int | None = None, follow: bool = False, since: str | None = None,
              lines: int = 100, groups: Iterable[str] | None = None) -> None:
    """Write each journal line (``write`` gets whole lines, newline included) of ``rank`` (default:
    all; on a site of several groups the rank within each group) of the groups ``groups`` names
    (default: all); ``follow`` keeps going until Ctrl-C. Nodes that could not be read: exit 3, named."""
    found = serve_groups.targets(cluster, doc, groups)
    tagged = serve_groups.several(found)
    label: dict[str, str] = {}
    units: dict[str, str] = {}
    for target in found:
        for n in target.cluster.nodes:
            if rank is None or n.rank == rank:
                label[n.name] = f"[{target.group} r{n.rank} {n.name}]" if tagged else f"[r{n.rank} {n.name}]"
                units[n.name] = probe.unit_name(target.doc)
    if not label:
        sizes = sorted({len(target.cluster.nodes) for target in found})
        where = ("in this cluster" if not tagged
                 else f"in group {', '.join(x.group for x in found)} (each group's own ranks)")
        raise InputError(f"no rank {rank} {where}", hint=f"ranks are 0..{sizes[-1] - 1}")
    order = {n.name: i for i, n in enumerate(cluster.nodes)}
    nodes = sorted((n for n in cluster.nodes if n.name in label), key=lambda n: order[n.name])
    values = secrets(cluster)
    fleet = tools.fleet(cluster)
    lock = threading.Lock()

    def emit(node: str, line: str) -> None:
        with lock:
            write(f"{label[node]} {redact.redact(line, values)}\n")

    try:
        if not follow:
            cmds = {n.name: journal_command(units[n.name], lines, since, False) + "\n" for n in nodes}
            results = fleet.run(cmds, timeout=30, only=[n.name for n in nodes])
            bad = []
            for n in nodes:
                res = results[n.name]
                if not res.reachable:
                    bad.append(failures.ssh_line(cluster, n.name, str(res.error)))
                    continue
                for line in res.stdout.splitlines():
                    emit(n.name, line)
            if bad:
                names = [line.split(" ", 1)[0] for line in bad]
                raise SparkctlError(f"the logs of {', '.join(names)} could not be read: they did not answer",
                                    exit_code=EXIT_UNREACHABLE, details=bad, nodes=names)
            return
        stop = threading.Event()
        follows = {n.name: journal_command(units[n.name], lines, since, True) for n in nodes}
        threads = [threading.Thread(target=fleet.stream, args=(name, cmd, emit, stop), daemon=True)
                   for name, cmd in follows.items()]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                time.sleep(0.2)
        except KeyboardInterrupt:
            stop.set()
    finally:
        fleet.close()
