"""Bench workloads: the built-in pinned prompt sets and user workloads pinned by digest.

A workload is a JSON object::

    {"name": "community-coding", "kind": "coding", "max_tokens": 200, "prompts": ["…", …]}

``kind`` chooses the timing definition (coding: R4's batch aggregate; prose: sparkDash's
post-first-token aggregate) and, with ``max_tokens``, which published figures the results are shown
beside. ``--workload FILE@SHA256`` loads a file only when its bytes hash to the digest given, so a
result always names exactly what produced it (name + sha256 of the file's bytes).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sparkctl.errors import InputError
from sparkctl.qa.published import KINDS, WORKLOADS

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str
    max_tokens: int
    prompts: tuple[str, ...]
    sha256: str
    version: int = 1
    origin: str = "built-in"  # "built-in" or the file it was read from

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "sha256": self.sha256,
            "max_tokens": self.max_tokens,
            "prompts": len(self.prompts),
            "version": self.version,
            "origin": self.origin,
        }


def parse_workload(raw: bytes, where: str, origin: str = "built-in") -> Workload:
    """A workload from its bytes; bad content is an InputError naming the field."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: a workload is a JSON object with name, kind, max_tokens and prompts")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{where}: name must be a non-empty string")
    kind = data.get("kind")
    if kind not in KINDS:
        raise InputError(
            f"{where}: kind must be one of {', '.join(KINDS)} (it chooses the timing definition), "
            f"got {kind!r}"
        )
    max_tokens = data.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 2:
        raise InputError(f"{where}: max_tokens must be an integer >= 2, got {max_tokens!r}")
    prompts = data.get("prompts")
    if (
        not isinstance(prompts, list)
        or not prompts
        or not all(isinstance(p, str) and p.strip() for p in prompts)
    ):
        raise InputError(f"{where}: prompts must be a non-empty list of non-empty strings")
    version = data.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(f"{where}: version must be an integer, got {version!r}")
    return Workload(
        name.strip(), kind, max_tokens, tuple(prompts), hashlib.sha256(raw).hexdigest(), version, origin
    )


def load_builtin(name: str) -> Workload:
    """A pinned prompt set from ``sparkctl/qa/workloads/<name>.json``."""
    if name not in WORKLOADS:
        raise InputError(f"unknown workload {name!r}", hint=f"choose one of: {', '.join(WORKLOADS)}, both")
    raw = resources.files("sparkctl.qa").joinpath("workloads", f"{name}.json").read_bytes()
    return parse_workload(raw, f"built-in workload {name}")


def load_pinned(spec: str) -> Workload:
    """``FILE@SHA256``: the file's bytes must hash to the digest, else InputError (exit 2)."""
    path_text, sep, digest = spec.rpartition("@")
    digest = digest.strip().lower().removeprefix("sha256:")
    if not sep or not path_text:
        raise InputError(
            f"--workload {spec!r}: a workload file needs its digest, FILE@SHA256",
            hint="e.g. --workload prompts.json@$(sha256sum prompts.json | cut -d' ' -f1)",
        )
    if not _DIGEST.match(digest):
        raise InputError(f"--workload {spec!r}: the digest after @ must be 64 hex digits (sha256)")
    path = Path(path_text).expanduser()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"--workload {path}: cannot read the file ({exc.strerror or exc})") from None
    actual = hashlib.sha256(raw).hexdigest()
    if actual != digest:
        raise InputError(
            f"--workload {path}: sha256 {actual} does not match the pinned {digest}",
            hint="the file changed since it was pinned; check it, then pin the new digest",
        )
    return parse_workload(raw, f"--workload {path}", origin=str(path))


def resolve(specs: list[str]) -> list[Workload]:
    """``coding``, ``prose``, ``both`` or ``FILE@SHA256`` (repeatable), in the order given, no repeats."""
    out: dict[str, Workload] = {}
    for spec in specs or ["both"]:
        if spec == "both":
            loaded = [load_builtin(n) for n in WORKLOADS]
        elif spec in WORKLOADS:
            loaded = [load_builtin(spec)]
        elif "@" in spec:
            loaded = [load_pinned(spec)]
        else:
            raise InputError(
                f"--workload {spec!r} is not coding, prose, both or FILE@SHA256",
                hint="a workload file is pinned by its digest: --workload FILE@SHA256",
            )
        for w in loaded:
            if w.name in out and out[w.name].sha256 != w.sha256:
                raise InputError(f"--workload: two different workloads are both named {w.name!r}")
            out[w.name] = w
    return list(out.values())
