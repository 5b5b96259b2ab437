"""`bundle`: the support tarball — versions, identity table, rendered config, unit states, journals,
link counters — with every secret value and bearer token redacted."""

from __future__ import annotations

import io
import json
import platform
import tarfile
import time
from collections.abc import Mapping
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

import httpx

from sparkctl import __version__
from sparkctl.serve import probe, redact, verdict
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
    lines: int = 300,
) -> tuple[bytes, list[str]]:
    """The support tarball (gzip) as bytes, every secret value and bearer token redacted, and the
    nodes that did not answer (each has ``nodes/<name>/unreachable.txt`` saying why, in rank order).
    ``identity``: the identity table as `cluster show --json` prints it."""
    values = secrets(cluster)
    snap = verdict.snapshot(cluster, doc, fleet, http, api_key_or_none(cluster))
    node_out = fleet.run(BUNDLE_SCRIPT.format(unit=probe.unit_name(doc), lines=int(lines)), timeout=60)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = f"sparkctl-bundle-{cluster.name}-{stamp}"
    files: dict[str, str] = {
        "versions.json": json.dumps(versions(), indent=2),
        "identity.json": json.dumps(identity, indent=2, default=str),
        "plan.json": json.dumps(doc, indent=2),
        "status.json": json.dumps(snap.as_dict(), indent=2, default=str),
    }
    unreachable: list[str] = []
    for name, res in node_out.items():
        if not res.reachable:
            files[f"nodes/{name}/unreachable.txt"] = f"{res.error}\n"
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
