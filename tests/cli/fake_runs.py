"""What a faked ``runner.execute`` returns for a playbook that reports per node through set_stats:
the status and exit code follow the failures, a failed node counts one failed task."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sparkctl.ansible import runner
from sparkctl.ansible.plan import Plan


def reported_run(plan: Plan, hosts: Iterable[str], failures: list[runner.Failure],
                 reported: dict[str, Any], ok: int, duration_s: float) -> runner.RunResult:
    bad = {f.host for f in failures}
    return runner.RunResult(
        plan=plan,
        rc=2 if failures else 0,
        status="failed" if failures else "successful",
        stats={h: runner.HostStats(ok=ok, failed=int(h in bad)) for h in hosts},
        failures=list(failures),
        artifact_dir=Path("/tmp/fake-run/artifacts/ansible"),
        run_dir=Path("/tmp/fake-run"),
        duration_s=duration_s,
        reported=reported,
    )
