"""The one fake ``sparkctl.ansible.runner.execute`` (and ``Tools.execute``): it records every plan
(and run directory), feeds the events it is given, and answers with a canned ``RunResult`` built
per playbook and per node.

What a run reports is set on the runner and may be changed between runs:

- ``failures`` (every run) and ``fail_on[playbook]`` (that playbook's runs): a failure on a host
  counts one failed task there (an unreachable one counts the host unreachable); status and exit
  code follow;
- ``reported``: ``set_stats`` keys as they come back, and ``per_node[key]``: a function of the host
  for every host that did not fail (a failed node reports nothing), as playbooks/*.yml report
  through ``set_stats``;
- ``results``: module results by task name;
- ``ok``, ``changed``: the task counts of every host;
- ``events``: a function of the run's ``Outcome`` giving the events fed to ``on_event``;
- ``on_run`` and ``on_playbook[playbook]``: hooks that change the ``Outcome`` of one run before it
  is answered (side effects on a fake fleet, a playbook's own reports, a switch's own stats).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkctl.ansible import runner
from sparkctl.ansible.plan import Plan

NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]
RUN_DIR = Path("/tmp/fake-run")
ARTIFACT_DIR = RUN_DIR / "artifacts" / "ansible"


@dataclass
class Outcome:
    """One run's answer while it is built; hooks may change any field."""

    plan: Plan
    hosts: list[str]
    failures: list[runner.Failure]
    reported: dict[str, Any]
    results: dict[str, dict[str, Any]]
    ok: int
    changed: int
    stats: dict[str, runner.HostStats] = field(default_factory=dict)  # hosts given here keep theirs

    @property
    def failed_hosts(self) -> set[str]:
        return {f.host for f in self.failures}

    @property
    def unreachable_hosts(self) -> set[str]:
        return {f.host for f in self.failures if f.unreachable}


Hook = Callable[[Outcome], None]


class FakeRunner:
    """Stands in for ``runner.execute``: records plans, feeds events, returns canned results."""

    def __init__(
        self,
        hosts: Iterable[str] = NODES,
        *,
        ok: int = 1,
        changed: int = 0,
        duration_s: float = 1.0,
        failures: Iterable[runner.Failure] = (),
        fail_on: dict[str, list[runner.Failure]] | None = None,
        reported: dict[str, Any] | None = None,
        per_node: dict[str, Callable[[str], Any]] | None = None,
        results: dict[str, dict[str, Any]] | None = None,
        events: Callable[[Outcome], Iterable[runner.RunnerEvent]] | None = None,
        on_run: Hook | None = None,
        on_playbook: dict[str, Hook] | None = None,
    ) -> None:
        self.hosts = list(hosts)
        self.ok, self.changed, self.duration_s = ok, changed, duration_s
        self.failures: list[runner.Failure] = list(failures)
        self.fail_on: dict[str, list[runner.Failure]] = dict(fail_on or {})
        self.reported: dict[str, Any] = dict(reported or {})
        self.per_node: dict[str, Callable[[str], Any]] = dict(per_node or {})
        self.results: dict[str, dict[str, Any]] = dict(results or {})
        self.events = events
        self.on_run = on_run
        self.on_playbook: dict[str, Hook] = dict(on_playbook or {})
        self.plans: list[Plan] = []
        self.run_dirs: list[Path | None] = []

    def books(self) -> list[str]:
        """The playbooks run so far, in order."""
        return [p.playbook for p in self.plans]

    def __call__(self, plan: Plan, on_event: Any = None, run_dir: Path | None = None,
                 **_: Any) -> runner.RunResult:
        self.plans.append(plan)
        self.run_dirs.append(run_dir)
        out = Outcome(
            plan=plan,
            hosts=list(self.hosts),
            failures=[*self.failures, *self.fail_on.get(plan.playbook, [])],
            reported=copy.deepcopy(self.reported),
            results=copy.deepcopy(self.results),
            ok=self.ok,
            changed=self.changed,
        )
        for key, answer in self.per_node.items():
            out.reported[key] = {h: answer(h) for h in out.hosts if h not in out.failed_hosts}
        for hook in (self.on_run, self.on_playbook.get(plan.playbook)):
            if hook is not None:
                hook(out)
        if on_event is not None and self.events is not None:
            for ev in self.events(out):
                on_event(ev)
        return result(out, self.duration_s)


def result(out: Outcome, duration_s: float = 1.0) -> runner.RunResult:
    """The ``RunResult`` of an ``Outcome``: per-host stats, status and exit code from the failures."""
    dark = out.unreachable_hosts
    bad = out.failed_hosts - dark
    stats = {h: runner.HostStats(ok=out.ok, changed=out.changed, failed=int(h in bad),
                                 unreachable=int(h in dark))
             for h in out.hosts}
    stats.update(out.stats)
    return runner.RunResult(
        plan=out.plan,
        rc=2 if out.failures else 0,
        status="failed" if out.failures else "successful",
        stats=stats,
        failures=list(out.failures),
        artifact_dir=ARTIFACT_DIR,
        run_dir=RUN_DIR,
        duration_s=duration_s,
        results=out.results,
        reported=out.reported,
    )


def task_events(task: str) -> Callable[[Outcome], list[runner.RunnerEvent]]:
    """Events: ``task`` starting on every host."""
    return lambda out: [runner.RunnerEvent(runner.TASK, host=h, task=task) for h in out.hosts]


def ansible_failures(raw_events: Iterable[dict[str, Any]]) -> list[runner.Failure]:
    """The failures a stream of ansible-runner's own events makes, read by the runner's collector
    (what ``runner.execute`` records): a canned event stream becomes a FakeRunner's ``failures``."""
    collector = runner._Collector(None)
    for raw in raw_events:
        collector(raw)
    return list(collector.failures)


def unreachable_event(host: str, msg: str, task: str = "Gathering Facts") -> dict[str, Any]:
    """ansible-runner's event for a host the connection could not reach."""
    return {"event": "runner_on_unreachable",
            "event_data": {"host": host, "task": task,
                           "res": {"unreachable": True, "changed": False, "msg": msg}}}


def failed_event(host: str, task: str, **res: Any) -> dict[str, Any]:
    """ansible-runner's event for a task that failed on ``host`` (``res``: the module's result)."""
    return {"event": "runner_on_failed",
            "event_data": {"host": host, "task": task, "ignore_errors": None, "res": {"failed": True, **res}}}


def failure_events(out: Outcome) -> list[runner.RunnerEvent]:
    """Each failure of the run as the runner hands it to ``on_event`` (a task starting, then failing
    or unreachable), in the order of ``failures``."""
    events: list[runner.RunnerEvent] = []
    for f in out.failures:
        events.append(runner.RunnerEvent(runner.TASK, host=f.host, task=f.task))
        kind = runner.UNREACHABLE if f.unreachable else runner.FAILED
        events.append(runner.RunnerEvent(kind, host=f.host, task=f.task, msg=f.msg))
    return events
