"""`bundle`: the support tarball — versions, identity table, rendered config, unit states, journals,
link counters — with every secret value and bearer token redacted.

On a site of several serving groups ``status.json`` holds each group's status (and the router's
when the bundle covers every group), and ``--group`` keeps the bundle to the named groups' nodes:
their plan entries, their status, their journals (``serve.groups.targets``)."""

from __future__ import annotations

import io
import json
import platform
import tarfile
import time
from collections.abc import Iterable, Mapping
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

import httpx

from sparkctl import __version__
from sparkctl.ansible import failures
from sparkctl.serve import groups as serve_groups
from sparkctl.serve import probe, redact, router_status, sitestatus, verdict
from sparkctl.serve.probe import FleetLike
from sparkctl.serve.tools import api_key_or_none, secrets
from sparkctl.ssh import fleet as remote

if TYPE_CHECKING:
    from sparkctl.model import Cluster

BUNDLE_SCRIPT = """\
echo '--- uname'; uname -a
echo '--- os-release'; cat /etc/os-release 2>/dev/null
echo '--- python'; python3 --version 2>&1
echo '--- unit'; systemctl status {unit} --no-pager -n 0 2>&1
echo '--- unit-file'; systemctl cat {unit} --no-pager 2>&1
echo '--- files'; ls -l /etc/sparkctl 2>&1
echo '--- journal'; journalctl -u {unit} -n {lines} --no-pager -o short-iso 2>&1
echo '--- links'; ip -s -d link show 2>&1
echo '--- addresses'; ip -br addr 2>&1
echo '--- rdma'; (rdma link show 2>&1 || echo 'no rdma tool')
echo '--- gpu'; (nvidia-smi 2>&1 || echo 'no nvidia-smi')
echo '--- meminfo'; cat /proc/meminfo
echo '--- docker'; (docker ps -a 2>&1 || echo 'no docker')
"""


def build_bundle(
    cluster: Cluster, doc: dict[str, Any], fleet: FleetLike, http: httpx.Client, identity: Mapping[str, Any],
    lines: int = 300, groups: Iterable[str] | None = None,
) -> tuple[bytes, list[str]]:
    """The support tarball (gzip) as bytes, every secret value and bearer token redacted, and the
    nodes that did not answer (each has ``nodes/<name>/unreachable.txt`` saying why, in rank order).
    ``identity``: the identity table as `cluster show --json` prints it; ``groups``: the serving
    groups it covers (default: all)."""
    values = secrets(cluster)
    found = serve_groups.targets(cluster, doc, groups)
    if serve_groups.several(found):
        if groups:  # the named groups' nodes only (without --group, spare nodes stay in)
            keep = {e["name"] for t in found for e in t.doc["nodes"]}
            doc = {**doc, "nodes": [e for e in doc["nodes"] if e["name"] in keep]}
        snaps = {t.group: verdict.snapshot(t.cluster, t.doc, fleet, http, api_key_or_none(t.cluster))
                 for t in found}
        router = (router_status.probe(doc, fleet, http, api_key_or_none(cluster))
                  if router_status.covers(doc) else None)
        status = sitestatus.SiteSnapshot(snaps, router).as_dict(cluster.name)
    else:
        status = verdict.snapshot(cluster, doc, fleet, http, api_key_or_none(cluster)).as_dict()
    unit = {e["name"]: probe.unit_name(t.doc) for t in found for e in t.doc["nodes"]}
    spare = probe.unit_name(doc)  # a node in no group (none when --group names some)
    scripts = {e["name"]: BUNDLE_SCRIPT.format(unit=unit.get(e["name"], spare), lines=int(lines))
               for e in doc["nodes"]}
    node_out = fleet.run(scripts, timeout=60, only=list(scripts))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = f"sparkctl-bundle-{cluster.name}-{stamp}"
    files: dict[str, str] = {
        "versions.json": json.dumps(versions(), indent=2),
        "identity.json": json.dumps(identity, indent=2, default=str),
        "plan.json": json.dumps(doc, indent=2),
        "status.json": json.dumps(status, indent=2, default=str),
    }
    unreachable: list[str] = []
    for name, res in node_out.items():
        if not res.reachable:
            files[f"nodes/{name}/unreachable.txt"] = failures.ssh_line(cluster, name, str(res.error)) + "\n"
            unreachable.append(name)
            continue
        parsed = remote.parse_sections(res.stdout)
        for section, text in parsed.blocks.items():
            files[f"nodes/{name}/{section}.txt"] = text + "\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, text in sorted(files.items()):
            data = redact.redact(text, values).encode()
            info = tarfile.TarInfo(f"{root}/{rel}")
            info.size = len(data)
            info.mtime = int(time.time())
            info.mode = 0o600
            tar.addfile(info, io.BytesIO(data))
    ranks = {n.name: n.rank for n in cluster.nodes}
    return buf.getvalue(), sorted(unreachable, key=lambda n: ranks.get(n, len(ranks)))


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {"sparkctl": __version__, "python": platform.python_version(),
                           "platform": platform.platform()}
    for pkg in ("ansible-core", "ansible-runner", "paramiko", "httpx"):
        try:
            out[pkg] = version(pkg)
        except Exception:
            out[pkg] = None
    return out
