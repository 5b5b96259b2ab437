"""What `sparkctl bootstrap` reports: one result per node (changed / ok / failed, each step, the
host key, Docker and the NVIDIA runtime), the JSON document and run record made of them, and the
error a run with failed nodes exits with (one line per node).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sparkctl.errors import EXIT_FAILED, EXIT_USAGE, InputError, SparkctlError

DOCKER_INSTALL = ("install Docker Engine and start it: `sudo apt install docker-ce` (Docker's apt "
                  "repository; DGX OS ships it), then `sudo systemctl enable --now docker`")
TOOLKIT_INSTALL = ("install the NVIDIA Container Toolkit: `sudo apt install nvidia-container-toolkit` "
                   "(DGX OS ships it), then `sudo nvidia-ctk runtime configure --runtime=docker` and "
                   "`sudo systemctl restart docker`")

@dataclass(frozen=True)
class Address:
    host: str
    port: int = 22

    @property
    def label(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str, default_port: int = 22) -> Address:
        """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; InputError (exit 2) otherwise."""
        t = text.strip()
        bracketed = re.fullmatch(r"\[([^\]\s]+)\](?::(.*))?", t)
        if bracketed:
            host, port = bracketed.group(1), bracketed.group(2)
        elif t.count(":") > 1:  # a bare IPv6 address
            host, port = t, None
        else:
            host, sep, rest = t.partition(":")
            port = rest if sep else None
        if not host or any(c.isspace() or c in "[]" for c in host):
            raise InputError(f"address {text!r} is not host or host:port",
                             hint="e.g. 10.0.0.11 or spark-1:2222")
        if port is None:
            return cls(host, default_port)
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise InputError(f"address {text!r}: port {port!r} is not a number from 1 to 65535",
                             hint="ADDR is host or host:port")
        return cls(host, int(port))


@dataclass
class NodeResult:
    address: Address
    status: str = "pending"  # changed | ok | failed
    steps: dict[str, str] = field(default_factory=dict)  # user, authorized_keys, sudoers: changed | ok
    host_key: str | None = None  # how it was accepted: pinned, confirmed, from FILE, trusted on first use
    fingerprint: str | None = None
    sudo: bool = False  # `sudo -n true` as the operator, logged in by key
    docker: str | None = None
    gpu_runtime: str | None = None
    warnings: list[str] = field(default_factory=list)
    failed_at: str | None = None
    cause: str | None = None
    check: str | None = None
    exit_code: int = 0

    def fail(self, stage: str, cause: str, check: str, code: int) -> None:
        self.status, self.failed_at, self.exit_code = "failed", stage, code
        self.cause, self.check = cause, check

    def line(self) -> str:
        return f"{self.address.label}: {self.cause} — check {self.check}"

    def observe(self, docker: str, runtime: str, require: bool) -> None:
        """What the node runs containers with; a missing piece is a warning, or with ``require`` a failure."""
        self.docker, self.gpu_runtime = docker, runtime
        missing = []
        if docker != "running":
            missing.append(f"Docker is {docker}: {DOCKER_INSTALL}")
        if runtime == "missing":
            missing.append(f"NVIDIA container toolkit missing: {TOOLKIT_INSTALL}")
        self.status = "changed" if "changed" in self.steps.values() else "ok"
        if missing and require:
            self.fail("check", "; ".join(m.split(":")[0] for m in missing) + " (--require-gpu-runtime)",
                      "; ".join(missing), EXIT_FAILED)
        else:
            self.warnings.extend(missing)

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["address"] = self.address.label
        return doc


class Asked(Protocol):
    """What the document says of the request (``bootstrap.Request`` is one): never its password."""

    @property
    def login(self) -> str: ...

    @property
    def operator(self) -> str: ...

    @property
    def known_hosts(self) -> Path: ...


def document(req: Asked, results: list[NodeResult]) -> dict[str, Any]:
    """What `bootstrap --json` prints and the run record keeps (never the password)."""
    return {"ok": all(r.status != "failed" for r in results), "login": req.login, "operator": req.operator,
            "known_hosts": str(req.known_hosts.absolute()), "nodes": [r.as_dict() for r in results]}


def record(doc: dict[str, Any]) -> Path:
    """``doc`` as ``bootstrap.json`` in a new run directory (0600); its path."""
    from sparkctl.ansible.runner import new_run_dir

    path = new_run_dir("bootstrap") / "bootstrap.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(doc, indent=2) + "\n")
    return path


def failure(results: list[NodeResult]) -> SparkctlError | None:
    """None when every node came through; else the error to exit with, one line per failed node:
    2 when every node was refused as bad input (no host key confirmed: nothing touched anywhere),
    else 1 (a node not reached or refusing access is EXIT_UNREACHABLE, the same code)."""
    failed = [r for r in results if r.status == "failed"]
    if not failed:
        return None
    code = EXIT_USAGE if all(r.exit_code == EXIT_USAGE for r in results) else EXIT_FAILED
    nodes = f"{len(results)} node{'s' if len(results) > 1 else ''}"
    return SparkctlError(f"bootstrap failed on {len(failed)} of {nodes}",
                         "fix what each line says, then run the same command again (what is right stays "
                         "as it is)", code, [r.line() for r in failed], [r.address.label for r in failed])


def error_document(error: SparkctlError) -> dict[str, Any]:
    """``error`` in the shape ``ui.json_error`` prints, for the document that carries it."""
    return {"code": error.exit_code, "message": error.message, "hint": error.hint, "details": error.details,
            "nodes": error.nodes}
