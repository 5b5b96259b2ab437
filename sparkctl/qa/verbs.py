"""`qualify` and `bench` as objects: each serving group in turn against its own rank 0, inside the
memory guard and the GPU sampler, the source identity gathered before anything is timed, the record
written beside the results, one verdict over the groups; with ``--via-router`` (``via_router``) the
whole site once through its router instead, each group's rank 0 read behind it for idleness and
``/server_info``.

qa and serve are siblings (neither imports the other), so what serve provides — the memory guard,
the GPU sampler, the boot watch's ``/server_info`` comparison, the ready marks behind the source
identity, the down and up between the arms of ``--ab`` — comes in as ``QaTools`` (the CLI builds
them, ``sparkctl.cli.qa.tools``; tests hand in fakes). ``QaOutput`` is how a verb shows its progress
and its results: the CLI draws it (qa prints nothing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sparkctl.errors import InputError, SparkctlError
from sparkctl.qa.qualify import ProgressFn, QualifyReport, new_results_dir, run_qualify
from sparkctl.qa.quiet import Windows
from sparkctl.qa.records import memory_report, qualify_record, write_bench

if TYPE_CHECKING:
    from sparkctl.model import Cluster
    from sparkctl.qa.bench import BenchReport
    from sparkctl.qa.endpoint import Endpoint
    from sparkctl.qa.idle import Compare, ServerCheck
    from sparkctl.qa.workload import Workload

# (group name, the cluster it is served as): name None for the site itself on a site of one group.
Targets = Sequence[tuple[str | None, "Cluster"]]
Identity = tuple[dict[str, Any], dict[str, Any]]


class Guard(Protocol):
    """The memory guard around a run (``serve.guard.MemoryGuard``): its records go to ``record_dir``."""

    record_dir: Path | None

    def summary(self) -> dict[str, Any]: ...


class Heat(Protocol):
    """The GPU sampler (``serve.thermals.ThermalSampler``), read at the checkpoints between the timed
    windows (``qa.quiet.Windows``), never while a batch is timed; its maxima go with the results."""

    def sample_once(self) -> None: ...

    def summary(self) -> dict[str, Any]: ...


@dataclass
class QaTools:
    """What qualify and bench take from serve: ``guard`` and ``thermals`` open around one cluster's
    run; ``server_check`` the boot watch's comparison of ``/server_info`` with the rendered flags;
    ``identity(cluster, workloads=…)`` the source identity and the sanitized measured profile
    (``identity`` below, with the ready marks `up` left); ``cycle`` the group down and up serving a
    cluster (``--ab``'s switch between its arms)."""

    guard: Callable[[Cluster], AbstractContextManager[Guard]]
    thermals: Callable[[Cluster], AbstractContextManager[Heat]]
    server_check: Callable[[Cluster], ServerCheck]
    identity: Callable[..., Identity]
    cycle: Callable[[Cluster], Mapping[str, Any]]


class QaOutput(Protocol):
    """How qualify and bench tell the person what they do (the CLI draws it; under --json nothing)."""

    def group(self, name: str, cluster: Cluster) -> None:
        """A serving group's run begins (on a site of several groups)."""

    def qualifying(self) -> AbstractContextManager[ProgressFn | None]:
        """Around the checks; yields what to call as each starts and ends (None: nothing shown)."""
        ...

    def qualified(self, report: QualifyReport, memory: dict[str, Any]) -> None:
        """The checks' table, the memory guard's and the GPUs' summaries, the verdict."""

    def benching(self) -> AbstractContextManager[Callable[[str], None] | None]:
        """Around the measurement; yields what to call with each step (None: nothing shown)."""
        ...

    def benched(self, report: BenchReport, memory: dict[str, Any], json_path: Path, plot_path: Path) -> None:
        """The memory guard's and the GPUs' summaries, the tables, where the results are."""


def identity(cluster: Cluster, ready: Mapping[str, Any] | None, **kwargs: Any) -> Identity:
    """The source identity block of a result and the sanitized measured profile (``qa.identity``),
    gathered before anything is timed; ``ready``: the marks `up` left at readiness."""
    from sparkctl.qa.identity import gather, measured_profile

    secrets: list[str] = []
    if "api_key" in cluster.secrets:
        with contextlib.suppress(SparkctlError):  # unresolvable here: the endpoint will say so
            secrets.append(cluster.secrets["api_key"].resolve())
    return gather(cluster, ready=ready, **kwargs), measured_profile(cluster, secrets)


def via_router(site: Cluster, groups: Sequence[str] | None) -> Targets:
    """``--via-router``'s one target: the whole site, measured once through its router (its
    groups' rank 0 read behind it for idleness and identity). Bad input (exit 2) with ``--group``
    (one group is measured on its own rank 0) or on a site without a router."""
    if groups:
        raise InputError(f"--via-router measures the whole site through its router; it does not combine "
                         f"with --group ({', '.join(groups)})",
                         hint="drop --group to measure every group through the router, or drop --via-router "
                              "to measure the named groups on their own rank 0")
    if site.router is None:
        raise InputError(f"--via-router: the site {site.name} has no router (sparkctl_router in "
                         f"{site.inventory_dir})",
                         hint="measure each group on its own rank 0 (without --via-router), or put the "
                              "router in front of the groups (sparkctl_router, docs/router.md)")
    return [(None, site)]


def identities(tools: QaTools, cluster: Cluster, router: bool, **kwargs: Any) -> Identity:
    """The source identity and the measured profile of what a run measures: the cluster's; through
    the router, the site's with each group's own under ``groups`` (each group its own profile, kit,
    ranks and readiness, read without the router, which may sit on another group's node)."""
    ident, measured = tools.identity(cluster, **kwargs)
    if not router:
        return ident, measured
    from sparkctl.render.groups import view

    per = {g.name: tools.identity(view(cluster, g).model_copy(update={"router": None}), **kwargs)
           for g in cluster.groups}
    return ({**ident, "groups": {name: i for name, (i, _) in per.items()}},
            {**measured, "groups": {name: m for name, (_, m) in per.items()}})


def _through(tools: QaTools, cluster: Cluster, router: bool) -> tuple[Endpoint | None, Compare]:
    """Where a run measures and what its ``/server_info`` is compared with: rank 0 (None: the verb
    finds it) and the cluster's check, or the site's router and each group's own check by name."""
    if not router:
        return None, tools.server_check(cluster)
    from sparkctl.qa.endpoint import for_router
    from sparkctl.render.groups import view

    # Each group's rank 0 is compared with its own rendered flags; the group's view without the
    # router (which may sit on another group's node: the view holds only its own nodes).
    checks = {g.name: tools.server_check(view(cluster, g).model_copy(update={"router": None}))
              for g in cluster.groups}
    return for_router(cluster), checks


def _memory(guard: Guard, out_dir: Path | None) -> dict[str, Any]:
    guard.record_dir = out_dir
    return memory_report(guard.summary(), out_dir)


@dataclass
class Outcome:
    """A verb's documents by group ("" for the site itself), and whether every group passed."""

    docs: dict[str, dict[str, Any]]
    passed: bool
    single: bool
    overall: dict[str, Any]

    def document(self) -> dict[str, Any]:
        """The --json document: the site's own, or every group's under ``groups``."""
        return self.docs[""] if self.single else {**self.overall, "groups": self.docs}


class Qualify:
    """`qualify`: ``suite`` against each of ``targets``, its evidence under ``results``."""

    def __init__(self, targets: Targets, tools: QaTools, out: QaOutput, suite: str, results: Path, *,
                 router: bool = False):
        self.targets, self.tools, self.out, self.suite, self.results = targets, tools, out, suite, results
        self.router = router  # --via-router: the site (``via_router``) through its router

    def run(self) -> Outcome:
        docs: dict[str, dict[str, Any]] = {}
        verdicts: list[bool] = []
        for name, cluster in self.targets:
            if name is not None:
                self.out.group(name, cluster)
            doc, passed = self.one(cluster)
            docs[name or ""] = doc
            verdicts.append(passed)
        return Outcome(docs, all(verdicts), self.targets[0][0] is None, {"passed": all(verdicts)})

    def one(self, cluster: Cluster) -> tuple[dict[str, Any], bool]:
        """One cluster's (one group's) qualify run: its record and verdict."""
        with self.tools.guard(cluster) as guard, self.tools.thermals(cluster) as heat:
            ident, measured = identities(self.tools, cluster, self.router)
            endpoint, check = _through(self.tools, cluster, self.router)
            # The suite is one quiet stretch: the GPUs are read before and after it, never during a check.
            windows = Windows(sample=heat.sample_once, when="before and after the suite")
            windows.checkpoint("before the suite", force=True)
            with windows.timed("qualify"), self.out.qualifying() as progress:
                report = run_qualify(cluster, self.suite, self.results, on_progress=progress,
                                     thermals=heat.summary, server_check=check, endpoint=endpoint)
            windows.checkpoint("after the suite", force=True)
            report.thermals = heat.summary()
        memory = _memory(guard, report.results_dir)
        extra = {"memory_guard": memory, "telemetry": windows.describe(), "source_identity": ident,
                 "measured_profile": measured}
        doc = qualify_record(report, extra)
        passed = report.passed and not memory.get("breach")
        self.out.qualified(report, memory)
        return doc, bool(passed)


class Bench:
    """`bench`: ``workloads`` with ``options`` (``records.bench_options``) on each of ``targets`` in
    turn, never two groups at once; ``after_long``, ``arrivals`` (``r4`` or FILE@SHA256) and ``ab``
    (a variant of the site ``inventory``) are the publishers' protocols, every file checked before
    anything is measured."""

    def __init__(self, targets: Targets, tools: QaTools, out: QaOutput, workloads: list[Workload],
                 options: dict[str, Any], results: Path, *, plot: Path | None = None,
                 inventory: Path | None = None, after_long: bool = False, arrivals: str | None = None,
                 ab: str | None = None, router: bool = False):
        self.targets, self.tools, self.out, self.router = targets, tools, out, router
        self.workloads, self.options, self.results, self.plot = workloads, options, results, plot
        self.inventory, self.after_long, self.arrivals, self.ab = inventory, after_long, arrivals, ab

    def run(self) -> Outcome:
        protocol = self.protocols()
        # A schedule instead of the ladder: no workload suite runs.
        loaded = [] if self.arrivals is not None else self.workloads
        docs: dict[str, dict[str, Any]] = {}
        failed = False
        for name, cluster in self.targets:
            if name is not None:
                self.out.group(name, cluster)
            # --plot names one file: each group's gets the group's name beside it.
            plot = self.plot
            if plot is not None and name is not None:
                plot = plot.with_name(f"{plot.stem}-{name}{plot.suffix}")
            doc, bad = self.one(cluster, loaded, {**self.options, **protocol}, plot)
            docs[name or ""] = doc
            failed = failed or bad
        return Outcome(docs, not failed, self.targets[0][0] is None, {})

    def protocols(self) -> dict[str, Any]:
        """run_bench's protocol arguments, every file checked before anything is measured."""
        from sparkctl.qa.protocols import load_schedule

        out: dict[str, Any] = {"after_long": self.after_long}
        if self.arrivals is not None:
            out["arrivals"] = load_schedule(self.arrivals)
        if self.ab is not None:
            if self.router:
                raise InputError("--ab switches one serving group between two profiles; it does not combine "
                                 "with --via-router", hint="measure the lever on a site of one group")
            if len(self.targets) != 1 or self.targets[0][0] is not None:
                raise InputError("--ab switches the whole site between two profiles: it needs a site of one "
                                 "serving group", hint="measure a lever on a site of one group")
            from sparkctl.qa.variant import ab_plan

            assert self.inventory is not None, "--ab needs the site's inventory directory"
            out["ab"] = ab_plan(self.inventory, self.targets[0][1], self.ab, self.tools.server_check,
                                self.tools.cycle)
        return out

    def one(self, cluster: Cluster, loaded: list[Workload], options: dict[str, Any],
            plot: Path | None) -> tuple[dict[str, Any], bool]:
        """One cluster's (one group's) bench: its document and whether it failed."""
        from sparkctl.qa.bench import run_bench
        from sparkctl.qa.endpoint import for_cluster

        with self.tools.guard(cluster) as guard, self.tools.thermals(cluster) as heat:
            ident, measured = identities(self.tools, cluster, self.router, workloads=loaded)
            endpoint, check = _through(self.tools, cluster, self.router)
            windows = Windows(sample=heat.sample_once)
            with self.out.benching() as progress:
                report = run_bench(endpoint or for_cluster(cluster), loaded, profile=cluster.profile.name,
                                   on_progress=progress, windows=windows, server_check=check, **options)
            report.thermals = heat.summary()
            report.source_identity = ident
        out_dir = new_results_dir(self.results, "bench")
        memory = _memory(guard, out_dir)
        doc, json_path, plot_path = write_bench(report, memory, out_dir, plot, measured)
        self.out.benched(report, memory, json_path, plot_path)
        return ({**doc, "results_json": str(json_path), "plot": str(plot_path)},
                bool(report.errors or memory.get("breach")))


__all__ = ["Bench", "Guard", "Heat", "Outcome", "QaOutput", "QaTools", "Qualify", "identities", "identity",
           "via_router"]
