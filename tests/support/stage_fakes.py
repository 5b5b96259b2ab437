"""The stage fast path's fakes (sparkctl.stage.faststage): a container site with a kit, the kit
reference the controller holds, what a node holding everything answers to the check, and a fleet
that answers each node's check with given JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkctl.ssh.fleet import HostResult
from support.gates_fakes import KIT_VERSION, container_site

HEAD_ID = "sha256:" + "1" * 64
OTHER_ID = "sha256:" + "2" * 64
EXPECTED = {"files": [{"path": "config.json", "size": 10, "sha256": "0" * 64}]}  # the controller's manifest


class Kit:
    def __init__(self, store: str, version: str, manifest: dict[str, Any]) -> None:
        self.store, self.version, self.manifest = store, version, manifest


def stage_site(tmp: Path, image_id: str | None = None, source: str = "build") -> Any:
    """``container_site``'s cluster, its image coming from ``source``."""
    tmp.mkdir(parents=True, exist_ok=True)
    cluster, _doc = container_site(tmp, image_id)
    if source != "build":
        runtime = cluster.runtime.model_copy(update={"image_source": source})
        cluster = cluster.model_copy(update={"runtime": runtime})
    return cluster


def kit_reference() -> Kit:
    return Kit("/srv/sparkctl/kit", KIT_VERSION, {"files": [{"path": "a", "size": 1, "sha256": "0" * 64}],
                                                  "source": {"tree_sha256": "f" * 64}})


def clean_stagecheck(cluster: Any, expected: dict[str, Any]) -> dict[str, Any]:
    """Per node, the check's answer on a node holding the kit, the image, the weights and its shards."""
    out = {}
    for n in cluster.nodes:
        ans: dict[str, Any] = {
            "mode": "stagecheck",
            "kit": {"version": KIT_VERSION, "current": KIT_VERSION, "problems": [], "count": 0},
            "image": {"found": {"id": HEAD_ID, "size": 1, "by": "ref"}},
            "weights": {"problems": [], "count": 0, "extra": []},
            "engram": {"present": True, "verified": True, "problems": [],
                       "files": [{"name": f"engram-l1-r{n.rank}of4.bin"}]},
        }
        if n.rank == 0:
            ans["image"]["build"] = {"current": True, "why": ""}
        out[n.name] = ans
    return out


class AnswerFleet:
    """Answers each node's check with the given JSON (or makes it unreachable); records the scripts."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers: dict[str, Any] = answers
        self.scripts: dict[str, str] = {}

    def run(self, scripts: Any, timeout: float = 10.0, only: Any = None) -> dict[str, HostResult]:
        self.scripts = dict(scripts)
        return {n: HostResult(n, error=a) if isinstance(a, str) else HostResult(n, 0, json.dumps(a) + "\n")
                for n, a in self.answers.items() if n in only}

    def close(self) -> None: ...
