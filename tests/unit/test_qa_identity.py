"""The source identity block of bench and qualify results: the node-side reader on real files, the
fan-out over a fleet, the schema every result's block validates against, and the sanitized measured
profile (no secrets, no addresses)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from support.gates_fakes import API_KEY, lab_cluster

from sparkctl.nodeside import benchid
from sparkctl.qa import identity
from sparkctl.qa.identity import SourceIdentity
from sparkctl.qa.workload import load_builtin
from sparkctl.ssh.fleet import HostResult


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_node_reader_digests_the_checkpoint_and_the_kit_the_ranks_mount(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "deepseek_v4"}\n')
    (model / "model.safetensors.index.json").write_text('{"weight_map": {}}\n')
    version = tmp_path / "kit" / "abc123"
    (version / "adapter").mkdir(parents=True)
    (version / "adapter" / "sitecustomize.py").write_text("# hooks\n")
    (version / "patches" / "source" / "python").mkdir(parents=True)
    overlay = version / "patches" / "source" / "python" / "pynccl.py"
    overlay.write_text("# RoCEnante\n")
    (version / "patches" / "manifest.json").write_text("{}\n")
    (version / ".sparkctl-build.json").write_text('{"image": "sha256:feed", "products": {"a.so": "00"}}\n')
    os.symlink("abc123", tmp_path / "kit" / "current")
    answer = benchid.identify(
        {
            "model_dir": str(model),
            "kit_store": str(tmp_path / "kit"),
            "adapters": ["adapter", "missing"],
            "overlay_source": "patches/source",
            "overlays": ["python/pynccl.py"],
            "manifest": "patches/manifest.json",
        }
    )
    assert answer["checkpoint"] == {
        "config_sha256": _sha(model / "config.json"),
        "index_sha256": _sha(model / "model.safetensors.index.json"),
    }
    kit = answer["kit"]
    assert kit["version"] == "abc123" and kit["build_record"]["products"] == {"a.so": "00"}
    assert re.fullmatch(r"[0-9a-f]{64}", kit["adapters"]["adapter"]) and kit["adapters"]["missing"] is None
    assert kit["overlays"] == {"python/pynccl.py": _sha(overlay)}
    assert answer["kernel"] == platform.release() and answer["image_id"] is None


class LocalFleet:
    """Runs each node's shipped script on this machine (the reader only reads) with an
    ``nvidia-smi`` on PATH that notes every call; ``down`` answers nothing."""

    def __init__(self, down: set[str], tmp: Path) -> None:
        self.down = down
        self.scripts: dict[str, str] = {}
        self.smi_calls = tmp / "nvidia-smi-calls"
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f'#!/bin/sh\necho "$@" >> {self.smi_calls}\n')
        smi.chmod(0o755)
        self.env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def run(self, script: Any, timeout: float = 10.0, only: Any = None) -> dict[str, HostResult]:
        out = {}
        for name, text in script.items():
            self.scripts[name] = text
            if name in self.down:
                out[name] = HostResult(name, error="timed out connecting to 10.250.0.12:22")
                continue
            proc = subprocess.run(
                ["bash", "-c", text], capture_output=True, text=True, timeout=60, env=self.env
            )
            out[name] = HostResult(name, proc.returncode, proc.stdout, proc.stderr)
        return out

    def close(self) -> None:
        pass


def test_every_node_is_identified_and_one_that_does_not_answer_is_named(tmp_path: Path) -> None:
    cluster, _doc = lab_cluster(tmp_path)
    fleet = LocalFleet({"spark-2"}, tmp_path)
    marks = {"spark-0": {"invocation": "4f2a", "started_at": "2026-12-05T09:18:02Z"}}  # up's ready.json
    block = identity.gather(
        cluster, [load_builtin("coding"), load_builtin("prose")], fleet=fleet, ready=marks
    )
    parsed = SourceIdentity.model_validate(block)
    assert [n.name for n in parsed.nodes] == ["spark-0", "spark-1", "spark-2", "spark-3"]
    down = parsed.nodes[2]
    assert down.error is not None and "timed out" in down.error and down.kernel is None
    assert all(n.kernel == platform.release() for n in parsed.nodes if n.name != "spark-2")
    assert parsed.profile.name == cluster.profile.name and re.fullmatch(
        r"[0-9a-f]{64}", parsed.profile.resolved_sha256
    )
    assert [(w.name, w.source["sha256"][:8]) for w in parsed.workloads if w.source] == [
        ("coding", "e0d6b2d2"),
        ("prose", "a4a5b300"),
    ]
    assert "no GPU query" in parsed.gathered and parsed.ready == marks
    # The reader asks no GPU: nvidia-smi was never run (and NVML is never loaded by it).
    assert not fleet.smi_calls.exists()
    assert not any("import pynvml" in t for t in fleet.scripts.values())


def test_the_measured_profile_holds_no_secret_and_no_address(tmp_path: Path) -> None:
    cluster, _doc = lab_cluster(tmp_path)
    measured = identity.measured_profile(cluster, [API_KEY])
    text = json.dumps(measured)
    assert API_KEY not in text
    assert not re.search(r"\b(?:\d{1,3}\.){3}\d{1,3}\b", text)
    assert measured["profile"] == cluster.profile.name and "--tp-size" in measured["argv"]


def test_the_summary_is_the_headline_of_each_result_kind() -> None:
    bench_doc: dict[str, Any] = {
        "started": "t",
        "simulator": True,
        "profile": "lab",
        "errors": [],
        "workloads": {"coding": {"sha256": "ab"}},
        "levels": [
            {
                "workload": "coding",
                "concurrency": 1,
                "definition": "decode-per-stream",
                "headline_tps": {"mean": 80.0, "n": 5},
                "ttft_s": {"mean": 0.2},
                "published": [{"label": "R4 suite 2", "value": 82.73}],
            }
        ],
    }
    summary = identity.summary("bench", bench_doc)
    assert summary["levels"] == [
        {
            "workload": "coding",
            "suite": None,
            "concurrency": 1,
            "definition": "decode-per-stream",
            "mean": 80.0,
            "n": 5,
            "ttft_mean_s": 0.2,
            "published": {"R4 suite 2": 82.73},
        }
    ]
    assert summary["protocols"] == {"after_long": None, "arrivals": None, "ab": None}
    # The protocols' headlines: the second suite's levels, the schedule's, the A/B's differences.
    level = bench_doc["levels"][0]
    bench_doc["protocols"] = {
        "after_long": {"long_request": {"prompt_tokens": 299_101}, "levels": [{**level, "suite": 2}]},
        "arrivals": {"sha256": "cd", "cohorts": 3, "throughput_tps": 100.4,
                     "median_latency_mean_of_cohorts_s": 10.8, "latency_s": {"mean": 10.2}, "trials": []},
        "ab": {"variant": {"name": "k7"}, "differences": [{"value": "coding C1", "difference_pct": 6.2}]},
    }
    summary = identity.summary("bench", bench_doc)
    assert [lvl["suite"] for lvl in summary["levels"]] == [None, 2]
    assert summary["protocols"] == {
        "after_long": 299_101,
        "arrivals": {"sha256": "cd", "cohorts": 3, "throughput_tps": 100.4,
                     "median_latency_mean_of_cohorts_s": 10.8, "latency_s": {"mean": 10.2}},
        "ab": {"variant": "k7", "differences": [{"value": "coding C1", "difference_pct": 6.2}]},
    }
    qualify_doc = {
        "passed": False,
        "failed": ["needle"],
        "skipped": [],
        "checks": [{"name": "text", "passed": True}, {"name": "needle", "passed": False}],
    }
    assert identity.summary("qualify", qualify_doc)["checks"] == {"text": True, "needle": False}


def test_through_the_router_each_group_has_its_own_identity_beside_the_sites(tmp_path: Path) -> None:
    """Measured through the router, the results name what stood behind it: each group's own block
    (its nodes, its profile), read without the router, which sits on a node of group a."""
    from sparkctl.model import load_inventory
    from sparkctl.qa.verbs import QaTools, identities

    site = load_inventory(Path(__file__).resolve().parents[2] / "inventory" / "examples" / "switch-2xtp4")
    assert site.router is not None and site.router.node in site.groups[0].nodes
    fleet = LocalFleet(set(), tmp_path)
    asked: list[str] = []

    def ident(cluster: Any, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        asked.append(cluster.name)
        return identity.gather(cluster, fleet=fleet, **kwargs), identity.measured_profile(cluster)

    unused: Any = None
    tools = QaTools(guard=unused, thermals=unused, server_check=unused, identity=ident, cycle=unused)
    block, measured = identities(tools, site, True, workloads=[load_builtin("coding")])
    parsed = SourceIdentity.model_validate(block)
    assert parsed.groups is not None and sorted(parsed.groups) == ["a", "b"]
    for g in site.groups:
        own = parsed.groups[g.name]
        assert [n.name for n in own.nodes] == list(g.nodes) and own.profile.name == g.profile.name
        assert [w.name for w in own.workloads] == ["coding"] and own.groups is None
    assert sorted(measured["groups"]) == ["a", "b"]
    # On a group's own rank 0 (no router): its block alone.
    asked.clear()
    alone, _ = identities(tools, site, False)
    assert alone["groups"] is None and asked == [site.name]
