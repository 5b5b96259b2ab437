"""What `stage` reports per node, read from playbooks/stage.yml's results (``set_stats`` keys)."""

from __future__ import annotations

from typing import Any

from sparkctl.ansible import failures, results, runner


def node_summaries(result: runner.RunResult) -> dict[str, dict[str, Any]]:
    """Per node: the staging summary (spark_stage_verify's ``stage``), transfer and packing figures.

    ``status`` can build the same per-node view by running the role's ``facts`` tasks
    (``include_role: {name: spark_stage, tasks_from: facts}``) and reading ``stage``.
    """
    out: dict[str, dict[str, Any]] = {}
    # playbooks/stage.yml reports {stage, transfer, pack} per node under results.STAGE (set_stats).
    for host, rep in results.per_host(result, results.STAGE).items():
        node = out.setdefault(host, {})
        if isinstance(rep.get("stage"), dict):
            node.update(rep["stage"])
        transfer, pack = rep.get("transfer") or {}, rep.get("pack") or {}
        if transfer and not transfer.get("skipped"):
            node["transfer"] = {
                k: transfer.get(k) for k in ("counts", "bytes_moved", "bytes_total", "seconds", "rate_mib_s")
            }
        if pack and not pack.get("skipped"):
            node["pack"] = {
                k: pack.get(k) for k in ("changed", "bytes_written", "seconds", "rate_mib_s", "actions")
            }
    # playbooks/stage.yml reports the serving kit per node under results.KIT (set_stats).
    for host, rep in results.per_host(result, results.KIT).items():
        kit = {k: rep.get(k) for k in ("version", "tree_sha256", "verified", "files", "current", "switched")}
        transfer, image = rep.get("transfer") or {}, rep.get("image") or {}
        if transfer and not transfer.get("skipped"):
            kit["transfer"] = {
                k: transfer.get(k) for k in ("counts", "bytes_moved", "bytes_total", "seconds")
            }
        if image and not image.get("skipped"):
            kit["image"] = {k: image.get(k) for k in ("checked", "image_id", "reason")}
        build = rep.get("build") or {}
        if build and not build.get("skipped"):  # the kit's build steps (spark_kit_build)
            kit["build"] = {"built": bool(build.get("built")), "products": build.get("products") or {},
                            "pending": bool(build.get("pending"))}
        out.setdefault(host, {})["kit"] = kit
    # playbooks/stage.yml reports the engine image per node under results.IMAGE (set_stats).
    for host, rep in results.per_host(result, results.IMAGE).items():
        if isinstance(rep, dict):
            out.setdefault(host, {})["image"] = dict(rep)
    # A failed node: the reason in words (ansible.failures, one per node) and its cause in a few words
    # for the table's cell; the whole line is printed once, with the error.
    for nf in failures.node_failures(result.failures):
        out.setdefault(nf.host, {}).update(error=nf.reason(), cause=nf.short())
    return out
