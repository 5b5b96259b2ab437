"""``serve.up.Up`` and ``serve.down.Down`` without the CLI: every collaborator is a constructor
argument (the lab-shaped fake site of support.serve_site), every line goes to the ``Output`` given."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.serve_site import Site

from sparkctl.errors import InputError
from sparkctl.serve import bootwatch
from sparkctl.serve.down import Down
from sparkctl.serve.tools import OK
from sparkctl.serve.up import Up


class Recorded:
    """An ``Output`` that keeps what it is told."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []
        self.notes: list[str] = []
        self.fallbacks: list[str] = []
        self.checks: list[Any] = []
        self.states: list[bootwatch.BootState] = []

    def say(self, text: str, mark: str = "") -> None:
        self.said.append((mark, text))

    def note(self, text: str, mark: str = "") -> None:
        self.notes.append(text)

    def falling_back(self, why: str) -> None:
        self.fallbacks.append(why)

    def preflight(self, checks: list[Any]) -> None:
        self.checks += checks

    def playbook_event(self, ev: Any) -> None: ...

    @contextlib.contextmanager
    def watching(self, state: bootwatch.BootState) -> Iterator[Callable[[bootwatch.BootState], None]]:
        yield self.states.append


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    return Site(tmp_path, monkeypatch)


def test_up_starts_through_its_collaborators_into_one_run_directory(site: Any, tmp_path: Path) -> None:
    out = Recorded()
    result = Up(site.cluster, site.doc, site.tools, out, full=True, verbose=True).run()
    assert result.changed and result.run_dir == tmp_path / "run-up"
    assert site.books() == ["up.yml"] and site.run_dirs == [tmp_path / "run-up"]
    assert out.checks and all(c.ok for c in out.checks)  # --verbose: every preflight check
    assert (OK, f"preflight: {len(out.checks)} checks passed on 4 nodes") in out.said
    assert out.states and out.states[-1].rows[site.cluster.head.name].phases["ready"] == bootwatch.OK
    t = result.timeline
    order = ["snapshot_s", "preflight_s", "check_s", "last_start_s", "ready_s", "server_info_s", "chat_s",
             "done_s"]
    assert set(order) <= set(t) and [t[k] for k in order] == sorted(t[k] for k in order), t
    assert result.as_dict(site.cluster.name)["records"] == str(tmp_path / "run-up")


def test_up_asks_through_its_collaborator_and_refuses_without_one(site: Any) -> None:
    for st in site.nodes.state.values():
        st.unit = "active"
    site.tools.interactive = lambda: False
    with pytest.raises(InputError, match="would stop 4 running rank"):
        Up(site.cluster, site.doc, site.tools, Recorded(), restart=True).run()
    asked: list[str] = []
    site.tools.interactive = lambda: True
    site.tools.ask = lambda question: asked.append(question) or True
    out = Recorded()
    assert Up(site.cluster, site.doc, site.tools, out, restart=True).run().changed
    assert asked == ["Stop the running ranks and start them again (restarting)?"]
    assert out.notes and out.notes[0].startswith("running: rank 0 on spark-0 (active)")


def test_down_stops_over_ssh_then_has_nothing_to_stop(site: Any) -> None:
    for st in site.nodes.state.values():
        st.unit = "active"
    first = Down(site.cluster, site.doc, site.tools, Recorded()).run()
    assert (first.path, first.stopped) == ("ssh", True) and site.stop_rounds() == 1
    again = Down(site.cluster, site.doc, site.tools, Recorded()).run()
    assert again.path == "fast" and site.books() == [] and site.stop_rounds() == 1


def test_up_groups_and_down_groups_take_each_group_in_turn_on_its_own_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from support.groups_site import TwoGroupSite

    from sparkctl.serve.down import down_groups
    from sparkctl.serve.up import up_groups

    site = TwoGroupSite(tmp_path, monkeypatch)
    out = Recorded()
    started = [(t.group, per, r.changed) for t, per, r in up_groups(site.cluster, site.tools, out)]
    assert started == [("a", True, True), ("b", True, True)]
    assert [p.limit for p in site.plans if p.playbook == "up.yml"] == ["spark-0,spark-1", "spark-2,spark-3"]
    headers = [text for _, text in out.said if text.startswith("[bold]group ")]
    assert headers == ["[bold]group a[/bold] (spark-0,spark-1)", "[bold]group b[/bold] (spark-2,spark-3)"]
    stopped = [(t.group, per_group, r.path) for t, per_group, r in
               down_groups(site.cluster, site.tools, Recorded(), ["b"])]
    assert stopped == [("b", True, "ssh")]


def test_a_site_of_one_group_is_one_target_the_site_itself(site: Any) -> None:
    from sparkctl.serve.down import down_groups

    ((target, per_group, result),) = list(down_groups(site.cluster, site.tools, Recorded()))
    assert (target.cluster, target.limit, per_group, result.path) == (site.cluster, None, False, "fast")
