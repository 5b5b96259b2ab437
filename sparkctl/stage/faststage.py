"""The fast path of `sparkctl stage`: "nothing to stage", said after one SSH check round per node.

A `stage` with nothing to move still costs the playbook's ~90 tasks (30–40 s on the lab) before it
says so. When every node already holds what the playbook would leave there, one check round per
node (:func:`check`) says the same in seconds. The check (``sparkctl.nodeside.stagecheck``) runs
the roles' own code on the node (shipped by ``sparkctl.nodeside.ship``):

* the serving kit: every file against the kit's manifest, and ``current`` pointing at the
  configured version (``nodeside.kit.verify_tree``, what spark_kit's switch verifies);
* the engine image: the same ID on every node, equal to the pin when there is one
  (``stage.image.node_image``). An unpinned image built from the kit (``image_source: build``)
  must also carry the label the last build put on it (``stage.image.built_from``), so a kit or
  base image that changed since means a rebuild. An unpinned pull or archive is read by the
  playbook;
* the checkpoint (a directory on the controller): the controller's manifest built as the playbook
  builds it (stat only once its manifest is saved), every node's files confirmed against it by
  their own manifest (``stage.manifest.verify``, quick), and no extra file on the head;
* the Engram shards: ``stage.dsv41en1.check_rank`` (quick) clean, the test pack keeps files by.

Anything else is a reason (node, what differs) and `stage` runs the playbook, which moves,
repairs or refuses as it always did. A checkpoint kept on the head or pulled from the Hub is
always the playbook's: only the head can tell whether its source changed.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from sparkctl.nodeside import images as images_
from sparkctl.nodeside import kit as nodekit
from sparkctl.nodeside import kitbuild, ship
from sparkctl.render.kit import build_steps as kit_build_steps
from sparkctl.render.kit import kit_facts
from sparkctl.render.rank import run_image
from sparkctl.stage import manifest as mf
from sparkctl.stage import shards

if TYPE_CHECKING:
    from sparkctl.model import Cluster, Node
    from sparkctl.ssh.fleet import Fleet

# Shipped to the node, dependencies first; the last is the check it runs.
NODE_MODULES = ("nodeside.kit", "nodeside.kitbuild", "nodeside.images", "nodeside.manifests",
                "nodeside.progress", "stage.manifest", "stage.image", "stage.safetensors", "stage.writeback",
                "stage.dsv41en1", "nodeside.stagecheck")
SHOWN = 3


class KitReference(Protocol):
    """The configured kit's reference as the CLI builds it (``serve.fastup.KitReference``): where
    the kit is stored, its version and its file manifest."""

    @property
    def store(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def manifest(self) -> dict[str, Any]: ...


def check_script(params: Mapping[str, Any]) -> str:
    """Shell text that runs the node check with ``params`` under python3 (on stdin, not in argv)."""
    return ship.python_script(NODE_MODULES, params, "SPARKCTL_STAGECHECK_EOF")


# --- what each `what` stages (playbooks/stage.yml's conditions) ---------------------------------


def parts(cluster: Cluster, what: str) -> list[str]:
    """The parts `stage WHAT` stages, in the playbook's order."""
    out = []
    # `stage image` also builds the kit's products in the image it stages: they are checked too.
    builds = what == "image" and cluster.kit is not None and bool(kit_build_steps(cluster))
    if what == "kit" or (what == "all" and cluster.kit is not None) or builds:
        out.append("kit")
    if what == "image" or (what == "all" and cluster.runtime.kind == "container"):
        out.append("image")
    if what in ("weights", "all"):
        out.append("weights")
    if what in ("engram", "all"):
        out.append("engram")
    return out


def controller_manifest(cluster: Cluster) -> dict[str, Any] | str:
    """The manifest the playbook builds of a checkpoint kept on the controller (digests reused from
    its saved manifest for unchanged files), or a string saying why the fast path cannot have one."""
    ck = cluster.checkpoint
    if ck.source != "dir" or (ck.location or "head") != "controller":
        where = "the Hugging Face Hub" if ck.source == "hf" else "a directory on the head"
        return f"the checkpoint comes from {where}: the playbook reads its source there"
    root = str(ck.path)
    if not os.path.isdir(root):
        return f"the controller has no checkpoint directory {root}"
    try:
        previous = mf.load(root)
    except mf.ManifestError:
        previous = None
    built = mf.build(root, previous)
    if not built["files"]:
        return f"{root} holds no checkpoint files"
    return built


def check_params(cluster: Cluster, node: Node, todo: list[str], kit: KitReference | None,
                 expected: dict[str, Any] | None) -> dict[str, Any]:
    params: dict[str, Any] = {"mode": "stagecheck"}
    if "kit" in todo and kit is not None:
        params["kit"] = {"store": kit.store, "version": kit.version, "expected": kit.manifest}
        steps = kit_build_steps(cluster)
        if steps:  # the kit's build products, against each node's build record and image
            params["kit"].update(build_steps=steps, build_image=run_image(cluster))
    if "image" in todo:
        rt = cluster.runtime
        params["image"] = {"ref": rt.image, "want_id": rt.image_id}
        facts = (kit_facts(cluster) or {}) if rt.image_source == "build" and node.rank == 0 else {}
        if facts.get("dockerfile"):  # the head builds the image: its build label is checked there
            params["image"]["build"] = {"context": facts["current"], "dockerfile": facts["dockerfile"]}
    paths = cluster.paths
    if "weights" in todo and expected is not None:
        params["weights"] = {"model_dir": str(paths.model_dir), "expected": expected}
    own = shards.of(cluster, node)  # r{rank}of{tp} of the node's serving group
    if "engram" in todo and own.packed:
        params["engram"] = {"model_dir": str(paths.model_dir), "engram_dir": str(paths.engram_dir),
                            "rank": own.rank, "tp": own.tp}
    return params


# --- the verdict ---------------------------------------------------------------------------------


class StageCheck(ship.Verdict):
    """Whether `stage` has nothing to do (then ``nodes`` holds the summary the table shows)."""


def _shown(items: list[Any], count: int, text: Any = str) -> str:
    more = f" (and {count - SHOWN} more)" if count > SHOWN else ""
    return "; ".join(text(p) for p in items[:SHOWN]) + more


def judge(cluster: Cluster, todo: list[str], answers: Mapping[str, Mapping[str, Any] | str],
          kit: KitReference | None,
          expected: dict[str, Any] | None) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """``(reasons, summaries)``: why the playbook must run (empty: it need not), and per node the
    summary ``stage`` shows (the playbook's set_stats shape). Pure."""
    reasons: list[str] = []
    nodes: dict[str, dict[str, Any]] = {}
    rt = cluster.runtime
    images: dict[str, str] = {}
    for node in sorted(cluster.nodes, key=lambda n: n.rank):
        name = node.name
        own = shards.of(cluster, node)
        ans = answers.get(name, "no answer")
        if isinstance(ans, str):
            reasons.append(f"{name}: {ans}")
            continue
        # The rank and TP of the node's Engram shards: its serving group's.
        summary: dict[str, Any] = {"node": name, "rank": own.rank, "tp": own.tp, "depth": "quick"}
        if "kit" in todo and kit is not None:
            k = ans.get("kit")
            if not isinstance(k, Mapping):
                reasons.append(f"{name}: the kit was not checked")
            else:
                if k.get("problems"):
                    shown = _shown(list(k["problems"]), int(k.get("count", 0)), nodekit.describe)
                    reasons.append(f"{name}: kit {kit.version} is not staged as configured: {shown}")
                elif k.get("current") != kit.version:
                    reasons.append(f"{name}: the kit's current points at {k.get('current') or 'nothing'}, "
                                   f"not {kit.version}")
                summary["kit"] = {
                    "version": kit.version,
                    "tree_sha256": (kit.manifest.get("source") or {}).get("tree_sha256"),
                    "verified": not k.get("problems"), "files": len(kit.manifest.get("files") or []),
                    "current": k.get("current"), "switched": False}
        if "image" in todo:
            img = ans.get("image")
            why, ident = images_.judge_answer(name, img, rt.image or "")
            if why:
                reasons.append(why)
            elif ident and isinstance(img, Mapping):
                images[name] = ident
                summary["image"] = {"id": ident, "bytes_moved": 0}
                build = img.get("build")
                if isinstance(build, Mapping) and not build.get("current"):
                    reasons.append(f"{name}: {build.get('why') or 'the image is not the staged kit build'}")
        if "weights" in todo and expected is not None:
            w = ans.get("weights")
            files = expected.get("files") or []
            weights = {"present": False, "verified": False, "files": len(files),
                       "bytes": sum(int(e["size"]) for e in files), "problems": []}
            if not isinstance(w, Mapping) or w.get("error"):
                why = w.get("error") if isinstance(w, Mapping) else "no answer"
                reasons.append(f"{name}: the checkpoint could not be read ({why})")
            else:
                problems = list(w.get("problems") or [])
                weights.update(problems=problems, verified=not problems,
                               present=not any(str(p).endswith(": missing") for p in problems))
                if problems:
                    reasons.append(f"{name}: checkpoint: {_shown(problems, int(w.get('count', 0)))}")
                if node.rank == 0 and w.get("extra"):
                    extra = list(w["extra"])
                    reasons.append(f"{name}: the checkpoint directory holds files the controller's does not: "
                                   f"{_shown(extra, len(extra))}")
            summary["weights"] = weights
        if "engram" in todo and own.packed:
            e = ans.get("engram")
            if not isinstance(e, Mapping) or e.get("error"):
                why = e.get("error") if isinstance(e, Mapping) else "no answer"
                reasons.append(f"{name}: the Engram shards could not be read ({why})")
            else:
                summary["engram"] = {k: e.get(k) for k in ("present", "verified", "files", "problems")}
                if not e.get("verified"):
                    problems = list(e.get("problems") or ["not packed"])
                    reasons.append(f"{name}: Engram shards: {_shown(problems, len(problems))}")
        nodes[name] = summary
    if "kit" in todo and kit is not None:  # the kit's build products, the same on every node
        kits: dict[str, Any] = {}
        for node in sorted(cluster.nodes, key=lambda n: n.rank):
            got = answers.get(node.name)
            if isinstance(got, Mapping):
                kits[node.name] = got.get("kit")
        reasons += kitbuild.product_reasons(kits)
    if "image" in todo:
        head = cluster.head.name
        want = rt.image_id or images.get(head)
        if not rt.image_id and rt.image_source != "build":
            reasons.append(f"the image is not pinned (sparkctl_runtime.image_id) and comes by "
                           f"{rt.image_source}: the playbook consults its source")
        else:
            reasons += images_.mismatches(images, want, bool(rt.image_id), rt.image or "")
    return reasons, nodes


def check(cluster: Cluster, what: str, fleet: Fleet, kit: KitReference | str | None,
          timeout: float = 120.0) -> StageCheck:
    """One check round on every node for `stage WHAT`. ``kit`` is the configured kit's reference
    (``store``, ``version``, ``manifest``), None without a kit, or a string saying why its
    reference could not be had (then the playbook runs)."""
    t0 = time.monotonic()
    todo = parts(cluster, what)
    reasons: list[str] = []
    ref = kit if "kit" in todo and not isinstance(kit, str) else None
    if "kit" in todo and ref is None:
        reasons.append(f"kit: {kit or 'no kit reference'}")
    expected: dict[str, Any] | None = None
    if "weights" in todo:
        built = controller_manifest(cluster)
        if isinstance(built, str):
            reasons.append(built)
        else:
            expected = {"files": [{k: e[k] for k in ("path", "size", "sha256")} for e in built["files"]]}
    if reasons:  # the playbook runs anyway: no node is asked
        return StageCheck(reasons, time.monotonic() - t0)
    scripts = {n.name: check_script(check_params(cluster, n, todo, ref, expected)) for n in cluster.nodes}
    try:
        results = fleet.run(scripts, timeout=timeout, only=list(scripts))
    except (OSError, subprocess.SubprocessError) as exc:
        return StageCheck([f"the nodes could not be checked over SSH: {exc}"], time.monotonic() - t0)
    found, nodes = judge(cluster, todo, ship.answers(results, "stagecheck"), ref, expected)
    return StageCheck(found, time.monotonic() - t0, nodes)


__all__ = ["KitReference", "StageCheck", "check", "check_script", "controller_manifest", "judge", "parts"]
