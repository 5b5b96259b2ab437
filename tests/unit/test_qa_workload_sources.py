"""The built-in workloads come from the publishers' pinned files: their provenance, and the script
that extracts them (scripts/extract_workloads.py) reading the upstream files, never a re-typed copy."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from pathlib import Path
from types import ModuleType

import pytest

from sparkctl.qa import published
from sparkctl.qa.workload import load_builtin

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "extract_workloads.py"
WORKLOADS = ROOT / "sparkctl" / "qa" / "workloads"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("extract_workloads", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", published.WORKLOADS)
def test_each_carried_workload_names_its_upstream_file_and_digest(name: str) -> None:
    w = load_builtin(name)
    src = w.source
    assert src is not None
    assert re.fullmatch(r"[0-9a-f]{40}", src["commit"]) and re.fullmatch(r"[0-9a-f]{64}", src["sha256"])
    assert src["repository"] and src["path"] and src["extractor"] == "scripts/extract_workloads.py"
    # The carried file hashes to the digest the published figures were measured with.
    raw = (WORKLOADS / f"{name}.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == published.WORKLOAD_SHA256[name] == w.sha256
    # The file is exactly what the script writes (its serialisation), so a hand edit shows.
    assert _script().dump(json.loads(raw)) == raw


def test_the_pinned_sources_are_the_ones_the_publishers_pin() -> None:
    script = _script()
    # R4 bench/repeat-client.py: want = 'e0d6b2d2…'; R8's sparkDash lock: src/shared/llmPrompts.js.
    for name, pinned in (("coding", script.V41BENCH), ("prose", script.SPARKDASH)):
        source = load_builtin(name).source
        assert source is not None and {k: source[k] for k in pinned} == pinned
    assert script.V41BENCH["sha256"].startswith("e0d6b2d25bd585d1")
    assert script.SPARKDASH["sha256"].startswith("a4a5b300411779de")
    assert script.SPARKDASH["commit"] == "d0c7f71296a1071d0d75f95b14c21413d4d06321"


RUNNER = """PROMPT_SET_VERSION = "v1"
CATEGORIES = [
    ("coding", "Write merge_intervals.", 200),
    ("json", "Return JSON.", 200),
    ("narrative", "Tell a story.", 200),
    ("summary", "Summarize." + PASSAGE, 150),
]
"""

PROMPTS_JS = """export const DECODE_PROSE_PROMPT =
  "Explain a \\"hash map\\", " +
  "step by step.";
"""


def test_the_runner_is_parsed_not_copied() -> None:
    script = _script()
    version, cats = script.v41bench_categories(RUNNER)
    assert version == "v1" and cats == [
        ("coding", "Write merge_intervals.", 200),
        ("json", "Return JSON.", 200),
        ("narrative", "Tell a story.", 200),
    ]
    assert script.js_constant(PROMPTS_JS, "DECODE_PROSE_PROMPT") == 'Explain a "hash map", step by step.'
    with pytest.raises(script.ExtractError, match="not a sum of string literals"):
        script.js_constant('export const X =\n  "a" + base;\n', "X")


def test_a_file_that_is_not_the_pinned_one_is_refused_naming_both_digests(tmp_path: Path) -> None:
    script = _script()
    runner, prompts = tmp_path / "v41bench.py", tmp_path / "llmPrompts.js"
    runner.write_text(RUNNER)
    prompts.write_text(PROMPTS_JS)
    out = tmp_path / "out"
    assert (
        script.main(["--v41bench", str(runner), "--sparkdash-prompts", str(prompts), "--out", str(out)]) == 2
    )
    assert not out.exists()  # nothing written
    with pytest.raises(
        script.ExtractError,
        match=f"{hashlib.sha256(RUNNER.encode()).hexdigest()} is not the pinned {script.V41BENCH['sha256']}",
    ):
        script.coding_workload(RUNNER.encode())


UPSTREAM = os.environ.get("SPARKCTL_UPSTREAM_DIR")


@pytest.mark.skipif(not UPSTREAM, reason="SPARKCTL_UPSTREAM_DIR (v41bench.py, llmPrompts.js) not set")
def test_the_carried_workloads_are_what_the_upstream_files_give(tmp_path: Path) -> None:
    assert UPSTREAM is not None
    up = Path(UPSTREAM)
    rc = _script().main(
        [
            "--v41bench",
            str(up / "v41bench.py"),
            "--sparkdash-prompts",
            str(up / "llmPrompts.js"),
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    for name in published.WORKLOADS:
        assert (tmp_path / f"{name}.json").read_bytes() == (WORKLOADS / f"{name}.json").read_bytes()
    client = up / "generalization-client.py"
    if client.exists():
        argv = ["--v41bench", str(up / "v41bench.py"), "--sparkdash-prompts", str(up / "llmPrompts.js"),
                "--r4-arrivals", str(client), "--out", str(tmp_path)]
        assert _script().main(argv) == 0
        name = "r4-arrivals.jsonl"
        assert (tmp_path / name).read_bytes() == (WORKLOADS / name).read_bytes()


def test_the_mix_is_the_runners_eight_categories_with_their_budgets() -> None:
    script = _script()
    # A category's prompt may add a top-level string constant (the runner's summary passage).
    cats = script.v41bench_all_categories('PASSAGE = "A passage."\n' + RUNNER)
    assert [c[0] for c in cats] == ["coding", "json", "narrative", "summary"]
    assert cats[3] == ("summary", "Summarize." + "A passage.", 150)
    with pytest.raises(script.ExtractError, match="is not the pinned"):
        script.mixed_workload(RUNNER.encode())
    mixed = load_builtin("mixed")
    assert mixed.kind == "mixed" and mixed.sha256 == published.WORKLOAD_SHA256["mixed"]
    assert [c.category for c in mixed.categories] == [
        "coding", "json", "narrative", "prose", "math", "reasoning", "summary", "format"]
    assert {c.category: c.max_tokens for c in mixed.categories}["summary"] == 150
    # The same bytes as the coding workload's prompt, from the same pinned runner.
    coding = load_builtin("coding")
    assert mixed.categories[0].prompt == coding.prompts[0]
    assert mixed.source is not None and coding.source is not None
    assert {k: mixed.source[k] for k in ("repository", "commit", "path", "sha256")} == {
        k: coding.source[k] for k in ("repository", "commit", "path", "sha256")}
    # Each category's batch is tagged with its own category, as run_batch tags it.
    batches = mixed.batches_for(2)
    assert [b[0] for b in batches][:2] == ["coding", "json"] and batches[6][2] == 150
    assert batches[1][1][1].startswith("[bench v1 run json c2 s1] Return only a JSON object")


def test_r4s_arrival_schedule_is_carried_from_its_pinned_client() -> None:
    from sparkctl.qa.protocols import load_schedule

    script = _script()
    # R4 results/trace-iteration-02/frozen-generalization-protocol.json pins the client.
    assert script.R4_ARRIVALS["sha256"].startswith("9ebc8eca0df7174f")
    raw = (WORKLOADS / "r4-arrivals.jsonl").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == published.ARRIVALS_SHA256["r4"]
    schedule = load_schedule("r4")
    assert schedule.source is not None
    assert {k: schedule.source[k] for k in ("repository", "commit", "path", "sha256")} == {
        k: script.R4_ARRIVALS[k] for k in ("repository", "commit", "path", "sha256")}
    assert len(schedule.arrivals) == 12 and max(a.at for a in schedule.arrivals) == 6.4
    assert [a.label for a in schedule.arrivals][:3] == ["scene", "interval_code", "arithmetic"]
    assert {a.label: a.max_tokens for a in schedule.arrivals}["technical_design"] == 384
    assert all(a.extra == {} for a in schedule.arrivals)  # max_new_tokens only: nothing forces the length
    shown = schedule.describe()["published"]
    assert [(f["label"], f["throughput_tps"], f["mean_latency_s"]) for f in shown] == [
        ("R4 static five", 100.44, 10.22), ("R4 adaptive five", 106.16, 9.36)]
    with pytest.raises(script.ExtractError, match="is not the pinned"):
        script.r4_arrivals(b"CASES = []\n")
    # A case is read from the client's dict(...) calls, never re-typed.
    cases = script.r4_arrival_cases("CASES = [dict(id='a', at=0.5, budget=8, prompt='Hi.')]\n")
    assert cases == [{"id": "a", "at": 0.5, "budget": 8, "prompt": "Hi."}]
