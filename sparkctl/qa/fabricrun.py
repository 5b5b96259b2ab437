"""`check fabric`: the verdict from a run of playbooks/check_fabric.yml (its ``set_stats`` keys)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.ansible import failures, results, runner
from sparkctl.qa import fabric as fabric_check

if TYPE_CHECKING:
    from sparkctl.model import Cluster


def _switch_mtus(result: runner.RunResult) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for lines in results.per_host(result, results.SWITCH_MTUS).values():
        for line in lines or []:
            name, _, value = line.partition(" ")
            out[name] = int(value) if value.isdigit() else None
    return out


def judge_run(cluster: Cluster, result: runner.RunResult) -> fabric_check.Verdict:
    """Every node's probe, the switch's MTUs and the RDMA checks judged; a probe task that failed
    (not an unreachable node, which the judgement names) is a problem of its own, listed first."""
    probes = results.per_host(result, results.FABRIC_PROBE)
    failed = failures.for_cluster(result.failures, cluster)
    unreachable = {nf.host: nf.line() for nf in failed if nf.unreachable}
    rdma = {h: r or {} for h, r in results.per_host(result, results.FABRIC_RDMA).items()}
    verdict = fabric_check.judge(cluster, probes, _switch_mtus(result), unreachable, rdma or None)
    for nf in reversed([nf for nf in failed if not nf.unreachable]):
        verdict.problems.insert(0, f"{nf.host}: probe {nf.reason()}")
    return verdict
