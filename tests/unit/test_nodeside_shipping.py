"""The node-side readers as they reach a node: inside the probe script (one SSH round, nothing
installed) and inside Ansible modules (AnsiballZ packing the ``module_utils/sparkctl`` symlinks)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from support.modrun import needs_ansible, run_module

from sparkctl.nodeside.ship import MAX_REASONS, Verdict
from sparkctl.serve import probe

REPO = Path(__file__).resolve().parents[2]


def _run_probe(params: dict[str, Any]) -> dict[str, Any]:
    script = probe.probe_script(params)
    proc = subprocess.run(["/bin/sh", "-s"], input=script, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc


def test_status_probe_carries_its_readers(tmp_path: Path) -> None:
    (tmp_path / "manifest-r0of4.json").write_text(json.dumps({"format": "DSV41EN1", "rank": 0, "tp": 4,
                                                              "files": []}))
    doc = _run_probe({"mode": "status", "unit": "sparkctl-none.service", "netdevs": ["lo", "absent9"],
                      "unit_file": str(tmp_path / "unit"), "hash_files": [], "engram_dir": str(tmp_path),
                      "rank": 0, "tp": 4})
    assert doc["links"]["lo"]["present"] and doc["links"]["lo"]["mtu"] > 0
    assert doc["links"]["absent9"] == {"present": False}
    assert doc["shards"] == {"verified": False, "problem": "manifest-r0of4.json lists no files"}


def test_probe_script_names_every_module_it_imports() -> None:
    """Each relative import of the shipped modules resolves to a module shipped before it."""
    shipped: list[str] = []
    for name, source in probe.probe_sources():
        for line in source.splitlines():
            if line.startswith("from . import "):
                wanted = [w.strip() for w in line[len("from . import "):].split(",")]
                assert set(wanted) <= set(shipped), f"{name} needs {wanted}, shipped before it: {shipped}"
        shipped.append(name)
    assert shipped[-1] == "probe"


def _module(role: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    failed, res = run_module(role, name, args)
    assert not failed, res
    return res


@needs_ansible
def test_fabric_probe_module_reads_links_through_module_utils() -> None:
    res = _module("spark_fabric", "sparkctl_fabric_probe",
                  {"ports": [{"netdev": "lo", "hca": "", "address": "127.0.0.1/8"},
                             {"netdev": "absent9", "hca": "", "address": "10.9.9.9/24"}]})
    lo, absent = res["ports"]
    assert lo["present"] and "127.0.0.1/8" in lo["addresses"] and lo["mtu"] > 0
    assert (lo["rdma"], lo["gid_index"]) == (False, None)
    assert absent["present"] is False


@needs_ansible
def test_identity_module_reads_links_through_module_utils() -> None:
    res = _module("spark_preflight", "sparkctl_identity", {"netdevs": ["lo", "absent9"], "hcas": []})
    assert res["missing_netdevs"] == ["absent9"]
    assert res["identity"]["kernel"] == os.uname().release and res["identity"]["cx7_firmware"] == "n/a"


def test_a_verdict_says_why_the_playbook_runs_inline_listed_or_cut_short() -> None:
    assert Verdict().ok
    assert Verdict(["x"]).playbook_lines("playbooks/up.yml") == ["running playbooks/up.yml: x"]
    assert Verdict(["a", "b"]).playbook_lines("p.yml") == ["running p.yml:", "  • a", "  • b"]
    many = Verdict([f"r{i}" for i in range(MAX_REASONS + 3)]).playbook_lines("p.yml")
    assert many[0] == "running p.yml:" and many[-1] == "  • and 3 more" and len(many) == MAX_REASONS + 2


def test_a_reason_several_nodes_share_is_one_line_naming_them() -> None:
    """A first `up` on four nodes listed the same eight reasons once per node (32 lines, 12 shown)."""
    nodes = {f"spark-{i}": {} for i in range(4)}
    missing = ["/etc/sparkctl/rank.env is not installed", "the rank unit is not-found"]
    reasons = [f"{n}: {why}" for n in nodes for why in missing]
    reasons += ["spark-2: /opt/sparkctl/rank/prestart.py differs",
                "spark-3: /opt/sparkctl/rank/prestart.py differs",
                "kit: the kit's commit is not fetched on this controller yet"]
    assert Verdict(reasons, 0.0, nodes).playbook_lines("playbooks/up.yml") == [
        "running playbooks/up.yml:",
        "  • every node: /etc/sparkctl/rank.env is not installed",
        "  • every node: the rank unit is not-found",
        "  • spark-2, spark-3: /opt/sparkctl/rank/prestart.py differs",
        "  • kit: the kit's commit is not fetched on this controller yet",
    ]
    # One node's reasons keep its name; a name the verdict did not ask is not a node.
    assert Verdict(["spark-1: x", "spark-9: y"], 0.0, nodes).playbook_lines("p.yml") == [
        "running p.yml:", "  • spark-1: x", "  • spark-9: y"]


def test_provisions_verdict_groups_by_the_nodes_it_asked_and_those_that_did_not_answer() -> None:
    from sparkctl.serve.provfast import ProvisionCheck

    applied = {"spark-0": {}, "spark-1": {}}
    check = ProvisionCheck(["spark-0: base: never recorded", "spark-1: base: never recorded",
                            "spark-2: unreachable"], 0.0, applied, ["spark-2"])
    assert check.playbook_lines("p.yml") == ["running p.yml:", "  • spark-0, spark-1: base: never recorded",
                                             "  • spark-2: unreachable"]
