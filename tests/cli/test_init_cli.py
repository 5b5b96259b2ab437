"""`sparkctl init`: flags to a site `validate` accepts, --json, a re-run without a terminal showing
the diff and refusing, usage errors with exit 2, --example. SSH is faked (tests/support)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.spark_discovery import FakeNodes, answer

from sparkctl.cli import init_cmd
from sparkctl.errors import EXIT_OK, EXIT_USAGE
from sparkctl.site import init as site_init

NODES = [f"192.168.7.{10 + r}" for r in range(4)]
FLAGS = [a for n in NODES for a in ("--node", n)] + ["--switch", "192.168.7.2", "--switch-kind", "routeros",
                                                     "--switch-name", "crs812", "--trust-on-first-use"]


@pytest.fixture
def nodes(monkeypatch: pytest.MonkeyPatch) -> FakeNodes:
    fake = FakeNodes.sparks()
    real = init_cmd.make_tools

    def tools(json_out: bool) -> site_init.Tools:
        t = real(json_out)
        t.scan, t.discover = fake.scan, fake.discover
        return t

    monkeypatch.setattr(init_cmd, "make_tools", tools)
    return fake


def test_init_writes_a_site_that_validates(tmp_path: Path, run_cli: Any, nodes: FakeNodes) -> None:
    site = tmp_path / "rack1"
    res = run_cli("--json", "init", str(site), *FLAGS)
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)
    assert doc["ok"] and doc["cluster"] == "rack1" and doc["profile"] == "r4-nvme"
    assert sorted(doc["written"]) == [".api_key", "group_vars/all/sparkctl.yml", "hosts.yml", "known_hosts"]
    assert [h["how"] for h in doc["host_keys"]] == ["trusted on first use"] * 5
    assert doc["nodes"][1]["cx7_ports"][0]["halves"][1] == {
        "netdev": "enP2p1s0f0np0", "hca": "roceP2p1s0f0", "pci": "0002:01:00.0", "link": "up",
        "firmware": "28.45.1020"}
    assert (site / ".api_key").read_text().strip() not in res.out + res.err
    res = run_cli("-i", str(site), "--json", "validate")
    assert res.code == EXIT_OK, res.out
    assert json.loads(res.out)["switch"]["name"] == "crs812"


def test_a_rerun_without_a_terminal_shows_the_diff_and_refuses(tmp_path: Path, run_cli: Any,
                                                                 nodes: FakeNodes) -> None:
    site = tmp_path / "rack1"
    assert run_cli("init", str(site), *FLAGS).code == EXIT_OK
    before = (site / "hosts.yml").read_text()
    nodes.answers[NODES[0]] = answer(0, nvme_gib=1000)
    res = run_cli("init", str(site), *FLAGS)
    assert res.code == EXIT_USAGE
    assert "sparkctl_nvme_gib: 1000" in res.err and "refusing without a confirmation" in res.err
    assert (site / "hosts.yml").read_text() == before
    res = run_cli("--json", "init", str(site), *FLAGS)
    assert res.code == EXIT_USAGE and json.loads(res.out)["error"]["details"] == ["would change hosts.yml"]
    assert "sparkctl_nvme_gib: 1000" in res.err  # the diff the hint points at, beside the document
    res = run_cli("init", str(site), *FLAGS, "--yes")
    assert res.code == EXIT_OK, res.err
    assert "sparkctl_nvme_gib: 1000" in (site / "hosts.yml").read_text()


@pytest.mark.parametrize(("args", "says"), [
    (["--switch-kind", "cisco", "--switch", "10.0.0.2"], "--switch-kind 'cisco'"),
    (["--node", "10.0.0.1:99999"], "is not a port"),
    (["--switch-port", "spark-0=p1"], "need --switch ADDR"),
    ([], "no node given"),
    (["--node", "10.0.0.1", "--from", "/nonexistent/defaults.yml"], "--from /nonexistent/defaults.yml"),
])
def test_bad_flags_exit_2_before_any_contact(tmp_path: Path, run_cli: Any, nodes: FakeNodes,
                                             args: list[str], says: str) -> None:
    res = run_cli("--json", "init", str(tmp_path / "s"), *args)
    assert res.code == EXIT_USAGE
    assert says in json.loads(res.out)["error"]["message"]
    assert nodes.scanned == [] and not (tmp_path / "s").exists()


def test_a_site_dir_that_is_a_file_is_refused(tmp_path: Path, run_cli: Any, nodes: FakeNodes) -> None:
    (tmp_path / "f").write_text("")
    for extra in ([*FLAGS], ["--example"]):
        res = run_cli("--json", "init", str(tmp_path / "f"), *extra)
        assert res.code == EXIT_USAGE and "is not a directory" in json.loads(res.out)["error"]["message"]
    assert nodes.scanned == []


def test_example_writes_the_shipped_example(tmp_path: Path, run_cli: Any) -> None:
    site = tmp_path / "ex"
    res = run_cli("init", str(site), "--example")
    assert res.code == EXIT_OK, res.err
    assert run_cli("-i", str(site), "validate").code == EXIT_OK
    assert run_cli("init", str(site), "--example").code == EXIT_OK  # nothing differs: nothing to confirm


def test_a_relative_site_dir_and_the_staged_site_left_beside_it(tmp_path: Path, run_cli: Any,
                                                                  nodes: FakeNodes,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """init SITE_DIR relative to the working directory (the staged copy once missed every file); a
    site that did not validate stays in a hidden staging directory beside it, and `sparkctl` without
    -i still finds the one site under ./inventory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPARKCTL_INVENTORY", raising=False)
    res = run_cli("init", "inventory/site", *FLAGS)
    assert res.code == EXIT_OK, res.err
    bad = [a for a in FLAGS if a not in ("--switch", "192.168.7.2", "--switch-kind", "routeros",
                                         "--switch-name", "crs812")]
    assert run_cli("init", "inventory/other", *bad).code == EXIT_USAGE  # four nodes, no switch
    assert [p.name for p in Path("inventory").iterdir() if p.name.startswith(".other.init-")]
    res = run_cli("validate")
    assert res.code == EXIT_OK, res.err
