"""`sparkctl plan`, `profiles` and `switch show` through the real console entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkctl.cli import main

EXAMPLE = str(Path(__file__).resolve().parents[2] / "inventory" / "example")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def test_plan_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "-i", EXAMPLE, "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"cluster", "profile", "nodes", "switch"}
    assert (doc["cluster"], doc["profile"]) == ("example", "r4-nvme")
    assert [n["rank"] for n in doc["nodes"]] == [0, 1, 2, 3]
    r3 = doc["nodes"][3]
    argv = r3["rank_launch"]["argv"]
    assert argv[argv.index("--node-rank") + 1] == "3"
    assert argv[argv.index("--dist-init-addr") + 1] == "10.77.0.10:29649"
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--min-free-slots-delay") + 1] == "1"
    assert r3["rank_launch"]["env"]["NCCL_IB_HCA"] == "=rocep1s0f0:1,roceP2p1s0f0:1"
    assert r3["rank_launch"]["runtime"] == "container"
    assert "[Service]" in r3["rank_launch"]["unit"]
    assert "/etc/netplan/40-sparkctl-fabric.yaml" in r3["files"]
    assert doc["switch"]["type"] == "routeros" and "/interface ethernet" in doc["switch"]["config"]


def test_plan_global_options_before_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--json", "-i", EXAMPLE, "plan", "--node", "spark-1")
    assert code == 0
    doc = json.loads(out)
    assert [n["name"] for n in doc["nodes"]] == ["spark-1"]


def test_plan_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "-i", EXAMPLE, "--node", "spark-0")
    assert code == 0
    assert "nothing contacted" in out
    assert "spark-0" in out and "rank 0 (head)" in out
    assert "SGLANG_HOST_IP" in out and "10.77.0.10" in out
    assert "/etc/sparkctl/rank-secrets.yaml" in out


def test_plan_never_shows_a_secret(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKCTL_API_KEY", "sk-plan-must-not-print-me")
    for argv in (("plan", "-i", EXAMPLE, "--json"), ("--verbose", "plan", "-i", EXAMPLE)):
        code, out, err = run(capsys, *argv)
        assert code == 0
        assert "sk-plan-must-not-print-me" not in out + err
        assert "<secret:api_key>" in out


def test_plan_unknown_node_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "-i", EXAMPLE, "--node", "spark-9")
    assert code == 2
    assert "spark-9" in err


def test_plan_bad_inventory_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text("all: [1, 2]\n")
    code, _, _ = run(capsys, "plan", "-i", str(tmp_path), "--json")
    assert code == 2


def test_profiles_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--json", "profiles")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == {"lab", "m1-1m", "mia-ring-tp4", "mia-tp3", "mia-tp8", "r4-nvme", "sg17-tp8"}
    assert rows["m1-1m"]["context_length"] == 1_048_576
    code, out, _ = run(capsys, "profiles", "show", "r4-nvme")
    assert code == 0
    assert out.startswith("---\n# r4-nvme") and "--min-free-slots-delay: 1" in out
    code, out, _ = run(capsys, "profiles", "show", "m1-1m", "--json")
    assert json.loads(out)["derived"]["memory_problems"] == []
    code, _, err = run(capsys, "profiles", "show", "r9")
    assert code == 2 and "r4-nvme" in err


def test_switch_show(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "switch", "show", "-i", EXAMPLE)
    assert code == 0
    assert out.startswith("# Rendered by sparkctl") and "qos-hw-offloading=yes" in out
    assert "crs812" in err
    code, out, _ = run(capsys, "switch", "show", "-i", EXAMPLE, "--json")
    assert json.loads(out)["file"] == "sparkctl-fabric.rsc"
