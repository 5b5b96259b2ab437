"""The node's half of `stage`'s fast path (``sparkctl.stage.faststage``): what is staged, read only.

``faststage.check_script`` ships this module, after the modules it reads with
(``faststage.NODE_MODULES``, ``sparkctl.nodeside.ship``), to every node in one SSH round; :func:`main`
prints one JSON line, ``{"mode": "stagecheck", …}``, that ``faststage.judge`` weighs, with a part for
each part asked about:

* ``kit``: the staged kit against its manifest, and its build products against their record
  (``nodeside.kitbuild.staged_check``);
* ``image``: the engine image under its reference, and its build label (``stage.image.staged_answer``);
* ``weights``: the checkpoint against the controller's manifest (``stage.manifest.verify``, quick,
  with the node's own manifest), and the files the node holds that the controller's does not;
* ``engram``: the rank's Engram shards (``stage.dsv41en1.check_rank``, quick).

A part that cannot be read answers ``{"error"}``, a reason for the playbook, never a pass.

Standard library only. The readers of ``sparkctl.stage`` are layered above this package, so
:func:`main` gets them from the loader by name (``shipped``) instead of importing them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from . import kitbuild

MODE = "stagecheck"
# Problems and extra files an answer carries at most (the count says how many there were).
LIMIT = 50


class ImageReader(Protocol):
    """What the check needs of ``sparkctl.stage.image``."""

    def staged_answer(
        self, ref: str, want_id: str | None, build: dict[str, str] | None = None
    ) -> dict[str, Any]: ...


class ManifestReader(Protocol):
    """What the check needs of ``sparkctl.stage.manifest``."""

    @property
    def ManifestError(self) -> type[Exception]: ...  # the module's class

    def load(self, root: str) -> dict[str, Any] | None: ...

    def verify(self, root: str, expected: dict[str, Any], full: bool = ...,
               local: dict[str, Any] | None = ...) -> list[str]: ...

    def list_files(self, root: str) -> list[str]: ...


class EngramReader(Protocol):
    """What the check needs of ``sparkctl.stage.dsv41en1``."""

    @property
    def LAYERS(self) -> tuple[int, ...]: ...  # the module's constant

    def check_rank(self, model_dir: str, engram_dir: str, rank: int, tp: int,
                   layers: tuple[int, ...] | list[int] = ..., depth: str = ...) -> Any: ...


def weights(w: Mapping[str, Any], mf: ManifestReader) -> dict[str, Any]:
    """The checkpoint under ``w["model_dir"]`` against ``w["expected"]`` (the controller's manifest)."""
    root = w["model_dir"]
    try:
        local = mf.load(root) if os.path.isdir(root) else None
        problems = mf.verify(root, w["expected"], full=False, local=local)
        wanted = {e["path"] for e in w["expected"].get("files", [])}
        extra = [r for r in mf.list_files(root) if r not in wanted] if os.path.isdir(root) else []
        return {"problems": problems[:LIMIT], "count": len(problems), "extra": extra[:LIMIT]}
    except (mf.ManifestError, OSError, ValueError) as exc:
        return {"error": str(exc)[:300]}


def engram(e: Mapping[str, Any], shards: EngramReader) -> dict[str, Any]:
    """This rank's Engram shards, checked quick."""
    try:
        res = shards.check_rank(e["model_dir"], e["engram_dir"], e["rank"], e["tp"], shards.LAYERS, "quick")
        return {"present": res.present, "verified": res.verified, "files": res.files,
                "problems": res.problems[:LIMIT]}
    except Exception as exc:  # any failure to read is a reason for the playbook, never a pass
        return {"error": str(exc)[:300]}


def check(
    p: Mapping[str, Any], image: ImageReader, mf: ManifestReader, shards: EngramReader
) -> dict[str, Any]:
    """The answer to ``p`` (``faststage.check_params``): each part asked about."""
    out: dict[str, Any] = {"mode": MODE}
    if p.get("kit"):
        out["kit"] = kitbuild.staged_check(**p["kit"])
    if p.get("image"):
        out["image"] = image.staged_answer(**p["image"])
    if p.get("weights"):
        out["weights"] = weights(p["weights"], mf)
    if p.get("engram"):
        out["engram"] = engram(p["engram"], shards)
    return out


def main(p: Mapping[str, Any], shipped: Callable[[str], Any]) -> None:
    """Print the answer as one JSON line; ``shipped`` names the loaded modules (``"stage.image"``)."""
    answer = check(p, image=shipped("stage.image"), mf=shipped("stage.manifest"),
                   shards=shipped("stage.dsv41en1"))
    print(json.dumps(answer))


__all__ = ["LIMIT", "MODE", "EngramReader", "ImageReader", "ManifestReader", "check", "engram", "main",
           "weights"]
