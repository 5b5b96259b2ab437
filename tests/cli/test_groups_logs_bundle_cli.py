"""`logs` and `bundle` on a site of two serving groups: every line and file names its group and the
rank within it, and --group keeps them to the named group's nodes."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from support import gates_fakes as fakes
from support.groups_site import TwoGroupSite

from sparkctl.errors import EXIT_OK, EXIT_USAGE


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TwoGroupSite:
    s = TwoGroupSite(tmp_path, monkeypatch)
    for name, st in s.nodes.state.items():
        st.journal = f"hello from {name}\nkey {fakes.API_KEY}\n"
    return s


def _journal_nodes(site: TwoGroupSite) -> list[str]:
    """The nodes a journalctl command was sent to."""
    return [node for node, what in site.nodes.calls if what == "journalctl"]


def test_logs_name_each_group_and_its_own_ranks(run_cli: Any, site: TwoGroupSite) -> None:
    res = run_cli("-i", str(site.inventory), "logs", "-n", "5")
    assert res.code == EXIT_OK, res.out + res.err
    assert res.out.splitlines() == [
        "[a r0 spark-0] hello from spark-0", "[a r0 spark-0] key <redacted>",
        "[a r1 spark-1] hello from spark-1", "[a r1 spark-1] key <redacted>",
        "[b r0 spark-2] hello from spark-2", "[b r0 spark-2] key <redacted>",
        "[b r1 spark-3] hello from spark-3", "[b r1 spark-3] key <redacted>",
    ]


def test_logs_group_reads_only_that_groups_nodes(run_cli: Any, site: TwoGroupSite) -> None:
    res = run_cli("-i", str(site.inventory), "logs", "--group", "b")
    assert res.code == EXIT_OK, res.out + res.err
    assert _journal_nodes(site) == ["spark-2", "spark-3"]
    assert res.out.splitlines()[0] == "[b r0 spark-2] hello from spark-2"
    # RANK is the group's own: rank 1 of every group, then of group a alone.
    site.nodes.calls.clear()
    res = run_cli("-i", str(site.inventory), "logs", "1")
    assert res.code == EXIT_OK, res.out + res.err
    assert _journal_nodes(site) == ["spark-1", "spark-3"]
    site.nodes.calls.clear()
    res = run_cli("-i", str(site.inventory), "logs", "1", "--group", "a", "--follow")
    assert res.code == EXIT_OK, res.out + res.err
    assert res.out.splitlines() == ["[a r1 spark-1] hello from spark-1", "[a r1 spark-1] key <redacted>"]


def test_logs_bad_group_or_rank_is_bad_input(run_cli: Any, site: TwoGroupSite) -> None:
    res = run_cli("-i", str(site.inventory), "logs", "--group", "c")
    assert res.code == EXIT_USAGE and "--group c" in res.err and "a, b" in res.err
    res = run_cli("-i", str(site.inventory), "logs", "2", "--group", "a")
    assert res.code == EXIT_USAGE, res.out + res.err
    assert "no rank 2 in group a" in " ".join(res.err.replace("│", " ").split())
    assert _journal_nodes(site) == []


def _members(path: Path) -> dict[str, str]:
    with tarfile.open(path) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                for m in tar.getmembers()}


def test_bundle_group_holds_only_that_groups_nodes(run_cli: Any, site: TwoGroupSite, tmp_path: Path) -> None:
    for st in site.nodes.state.values():
        st.unit = "active"
    out = tmp_path / "b.tar.gz"
    res = run_cli("-i", str(site.inventory), "--json", "bundle", "--group", "b", "-o", str(out))
    assert res.code == EXIT_OK, res.out + res.err
    files = _members(out)
    nodes = {name.split("/")[1] for name in files if name.startswith("nodes/")}
    assert nodes == {"spark-2", "spark-3"}
    assert [e["name"] for e in json.loads(files["plan.json"])["nodes"]] == ["spark-2", "spark-3"]
    status = json.loads(files["status.json"])
    assert list(status["groups"]) == ["b"]
    assert [n["name"] for n in status["groups"]["b"]["nodes"]] == ["spark-2", "spark-3"]
    assert "hello from spark-2" in files["nodes/spark-2/journal.txt"]
    assert fakes.API_KEY not in "".join(files.values())
    # No node of group a was asked anything.
    assert not [node for node, _ in site.nodes.calls if node in ("spark-0", "spark-1")]


def test_bundle_of_the_whole_site_holds_each_groups_status(run_cli: Any, site: TwoGroupSite,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "b.tar.gz"
    res = run_cli("-i", str(site.inventory), "bundle", "-o", str(out))
    assert res.code == EXIT_OK, res.out + res.err
    files = _members(out)
    assert {f"nodes/{n}/journal.txt" for n in ("spark-0", "spark-1", "spark-2", "spark-3")} <= set(files)
    status = json.loads(files["status.json"])
    assert sorted(status["groups"]) == ["a", "b"]
    assert status["groups"]["b"]["head"]["url"].startswith("http://10.250.0.12:")
