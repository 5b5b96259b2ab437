"""A lab-shaped site for the serving verbs (`up`, `down`, `status`, `logs`, `bundle`, `watch`): the
fake fleet, the fake API and the fake runner wired into ``sparkctl.cli.common.tools()``; the nodes
follow the playbooks the runner is asked to run (up.yml starts every rank unit, down.yml stops them)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from sparkctl.ansible import runner
from sparkctl.ansible.plan import Plan
from sparkctl.cli import common
from support import gates_fakes as fakes
from support.runner import FakeRunner, Outcome

START_FAILED = runner.Failure("spark-2", "Start the ranks of this wave", "unit failed to start")


class Site:
    """``cluster``, ``doc``, ``inventory``; ``nodes`` (FakeNodes), ``api`` (FakeApi), ``runner``
    (FakeRunner) and ``tools``, the collaborators ``common.tools()`` hands out for this test."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch, overrides: dict[str, Any] | None = None):
        self.cluster, self.doc = fakes.lab_cluster(tmp, overrides)
        self.inventory = Path(self.cluster.inventory_dir)
        names = [n.name for n in self.cluster.nodes]
        self.nodes = fakes.FakeNodes(names, {n.name: n.rank for n in self.cluster.nodes})
        self.api = fakes.FakeApi(self.cluster, self.doc)
        for st in self.nodes.state.values():
            st.markers = {"The server is fired up and ready to roll!": 1}
        self.after_up: Any = None
        self.runner = FakeRunner(names, ok=3, duration_s=0.1,
                                 on_playbook={"up.yml": self._up, "down.yml": self._down})
        self.plans: list[Plan] = self.runner.plans
        self.run_dirs: list[Path | None] = self.runner.run_dirs
        # The serving verbs' collaborators: the real ones (kit reference, question) but for these.
        self.tools = dataclasses.replace(
            common.tools(), execute=self.runner, fleet=lambda cluster: self.nodes, http=self.api.client,
            new_run_dir=lambda verb: tmp / f"run-{verb}",
            qualify=lambda cluster, run_dir: lambda: (True, "passed"),
        )
        monkeypatch.setattr(common, "tools", lambda: self.tools)

    @property
    def fail_playbook(self) -> str | None:
        """The playbook whose runs fail on spark-2 (the ranks of a wave do not start)."""
        return next(iter(self.runner.fail_on), None)

    @fail_playbook.setter
    def fail_playbook(self, playbook: str | None) -> None:
        self.runner.fail_on = {playbook: [START_FAILED]} if playbook else {}

    def _up(self, out: Outcome) -> None:
        if out.failures:
            return
        for st in self.nodes.state.values():
            st.unit = "active"
        if self.after_up:
            self.after_up(self.nodes.state)
        out.changed = 1

    def _down(self, out: Outcome) -> None:
        if out.failures:
            return
        out.changed = int(any(st.unit != "inactive" for st in self.nodes.state.values()))
        for st in self.nodes.state.values():
            st.unit = "inactive"

    def books(self) -> list[str]:
        return self.runner.books()

    def stop_rounds(self) -> int:
        """How many times every node was sent the stop script (sparkctl.serve.faststop)."""
        stops = [n for n, what in self.nodes.calls if what == "stop"]
        assert len(stops) % len(self.nodes.state) == 0, stops
        return len(stops) // len(self.nodes.state)
