"""The readiness markers checked field by field as the publisher checks them (R4 scripts/cluster.py
``layout()``): each wrong field alone fails naming the rank, the marker, the field, expected and
actual; the RoCE marker follows SGLANG4_ROCE_ALLREDUCE; the boot watch fails on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.gates_fakes import (
    API_KEY,
    FakeApi,
    FakeClock,
    FakeNodes,
    container_site,
    engram_line,
    kit_lines,
    marker_reading,
)

from sparkctl.errors import InputError
from sparkctl.profiles import load_profile
from sparkctl.serve import bootwatch
from sparkctl.serve.bootwatch import RankContext, RankLog, marker_problems

ROCE_ON = {"SGLANG4_ROCE_ALLREDUCE": "1"}


def _engram(rank: int, layer: int, /, **changed: Any) -> str:
    return engram_line(rank, layer, **changed)


def _good_lines(rank: int, env: dict[str, str] | None = None) -> list[str]:
    return kit_lines(rank, roce=(env if env is not None else ROCE_ON).get("SGLANG4_ROCE_ALLREDUCE") == "1")


def _problems(lines: list[str], rank: int = 2, env: dict[str, str] | None = None,
              profile: str = "r4-nvme") -> list[str]:
    markers = list(load_profile(profile).gates.log_markers)
    counts, texts = marker_reading(markers, lines)  # the node probe's own reading
    ctx = RankContext(rank, 4, 4, env if env is not None else ROCE_ON)
    return marker_problems(markers, RankLog(counts, texts), ctx, has_kit=True)


def _layout(line: str) -> dict[str, Any]:
    return dict(json.loads(line.split("DSPARK_MOE_LAYOUT ", 1)[1]))


def _with_layout(lines: list[str], change: Any) -> list[str]:
    out = []
    for line in lines:
        if "DSPARK_MOE_LAYOUT " in line:
            doc = _layout(line)
            change(doc)
            line = "DSPARK_MOE_LAYOUT " + json.dumps(doc)
        out.append(line)
    return out


@pytest.mark.parametrize("profile", ["r4-nvme", "lab"])
@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_the_simulators_good_logs_pass_on_every_rank(profile: str, rank: int) -> None:
    assert _problems(_good_lines(rank), rank, profile=profile) == []


@pytest.mark.parametrize(("key", "value"), [
    ("rank", 3), ("tp_size", 8), ("packed", False), ("empty_weight_parameters", False),
    ("cache_bytes", 1 << 30), ("scale_bytes", 8),
])
def test_each_engram_field_wrong_alone_is_named(key: str, value: Any) -> None:
    lines = [_engram(2, 14, **{key: value}) if "NVME_ENGRAM_READY" in ln and '"layer": 14' in ln else ln
             for ln in _good_lines(2)]
    problems = _problems(lines)
    assert len(problems) == 1, problems
    want = json.dumps(2 if key == "rank" else 4 if key == "tp_size" else
                      True if key in ("packed", "empty_weight_parameters") else 0)
    assert problems[0] == (f"rank 2: NVME_ENGRAM_READY line 2: field {key} expected {want}, "
                           f"got {json.dumps(value)}")


def test_engram_layers_and_line_count() -> None:
    lines = [_engram(2, 13) if '"layer": 14' in ln else ln for ln in _good_lines(2)]
    assert _problems(lines) == ["rank 2: NVME_ENGRAM_READY: field layer expected [1, 14] across the lines, "
                                "got [1, 13]"]
    one = [ln for ln in _good_lines(2) if '"layer": 14' not in ln]
    assert _problems(one) == ["rank 2: 'NVME_ENGRAM_READY': 1 lines, want exactly 2"]
    three = [*_good_lines(2), _engram(2, 1)]
    assert _problems(three) == ["rank 2: 'NVME_ENGRAM_READY': 3 lines, want exactly 2"]


@pytest.mark.parametrize(("key", "value", "want"), [
    ("method", "Fp8MoEMethod", '"Mxfp4FlashinferCutlassMoEMethod"'),
    ("local_experts", 384, "96"), ("intermediate", 576, "2304"), ("ep_size", 1, "4"), ("ep_rank", 0, "2"),
    ("tp_size", 4, "1"), ("tp_rank", 2, "0"), ("w13_shape", [96, 1152, 2560], "[96, 4608, 2560]"),
    ("w2_shape", [96, 5120, 288], "[96, 5120, 1152]"),
])
def test_each_target_layout_field_wrong_alone_is_named(key: str, value: Any, want: str) -> None:
    def change(doc: dict[str, Any]) -> None:
        first = next(iter(doc["target"]))
        doc["target"][first] = {**doc["target"][first], key: value}

    problems = _problems(_with_layout(_good_lines(2), change))
    assert len(problems) == 1, problems
    assert problems[0] == (f"rank 2: DSPARK_MOE_LAYOUT: target model.layers.0.mlp.experts: field {key} "
                           f"expected {want}, got {json.dumps(value)}")


def test_draft_layout_counts_and_extra_fields_are_named() -> None:
    def draft(doc: dict[str, Any]) -> None:
        for k in doc["draft"]:
            doc["draft"][k] = {**doc["draft"][k], "local_experts": 128}

    problems = _problems(_with_layout(_good_lines(1), draft), rank=1)
    assert problems == ["rank 1: DSPARK_MOE_LAYOUT: draft draft.stages.0.mlp.experts: field local_experts "
                        "expected 32, got 128 (and 2 more draft entries differ)"]

    def fewer(doc: dict[str, Any]) -> None:
        doc["target"].pop(next(iter(doc["target"])))

    assert _problems(_with_layout(_good_lines(1), fewer), rank=1) == [
        "rank 1: DSPARK_MOE_LAYOUT: target: 39 entries, expected 40"]

    def extra(doc: dict[str, Any]) -> None:
        doc["draft"]["draft.stages.1.mlp.experts"] = {**doc["draft"]["draft.stages.1.mlp.experts"], "x": 1}

    assert _problems(_with_layout(_good_lines(1), extra), rank=1) == [
        "rank 1: DSPARK_MOE_LAYOUT: draft draft.stages.1.mlp.experts: field x not expected (got 1)"]

    def no_draft(doc: dict[str, Any]) -> None:
        doc["draft"] = {}

    assert _problems(_with_layout(_good_lines(1), no_draft), rank=1) == [
        "rank 1: DSPARK_MOE_LAYOUT: draft: 0 entries, expected 3"]


def test_only_the_last_layout_receipt_counts() -> None:
    good = _good_lines(3)
    stale = _with_layout(good, lambda doc: doc.update(target={}))
    layout_bad = next(ln for ln in stale if "DSPARK_MOE_LAYOUT" in ln)
    layout_good = next(ln for ln in good if "DSPARK_MOE_LAYOUT" in ln)
    assert _problems([*good[:-1], layout_bad, layout_good], rank=3) == []
    assert _problems([*good, layout_bad], rank=3) == [
        "rank 3: DSPARK_MOE_LAYOUT: target: 0 entries, expected 40"]
    broken = [ln if "DSPARK_MOE_LAYOUT" not in ln else "DSPARK_MOE_LAYOUT {truncated" for ln in good]
    assert _problems(broken, rank=3)[0].startswith("rank 3: DSPARK_MOE_LAYOUT line 1: not JSON")


def test_roce_on_needs_ready_for_this_rank_and_a_route_line() -> None:
    no_route = [ln for ln in _good_lines(2) if "ROCE_TP4_ROUTE" not in ln]
    assert _problems(no_route) == [
        "rank 2: ROCE_TP4_READY needs a 'ROCE_TP4_ROUTE' line as well: none logged"]
    other = [ln.replace('"rank":2', '"rank":1') if "ROCE_TP4_READY" in ln else ln for ln in _good_lines(2)]
    assert _problems(other) == ["rank 2: ROCE_TP4_READY: field rank expected 2, got 1"]
    world = [ln.replace('"world_size":4', '"world_size":2') if "ROCE_TP4_READY" in ln else ln
             for ln in _good_lines(2)]
    assert _problems(world) == ["rank 2: ROCE_TP4_READY: field world_size expected 4, got 2"]
    none = [ln for ln in _good_lines(2) if "ROCE_TP4" not in ln]
    assert _problems(none) == ["rank 2: 'ROCE_TP4_READY': 0 lines, want exactly 1"]


def test_roce_off_forbids_the_ready_line() -> None:
    off = {"SGLANG4_ROCE_ALLREDUCE": "0"}
    assert _problems(_good_lines(2, env=off), env=off) == []  # the simulator logs none with it off
    with_ready = _good_lines(2, env=ROCE_ON)
    assert _problems(with_ready, env=off) == [
        "rank 2: ROCE_TP4_READY: 1 line(s), expected none with SGLANG4_ROCE_ALLREDUCE=0 "
        "(it belongs to SGLANG4_ROCE_ALLREDUCE=1)"]


def test_expected_values_are_cross_checked_against_the_profile() -> None:
    with pytest.raises(InputError) as info:
        load_profile("r4-nvme", {"args": {"--ep-size": 3}})
    assert any("gates.log_markers.3.json: DSPARK_MOE_LAYOUT: ${128 / ep}: 128 / 3 is not a whole number" in d
               for d in info.value.details), info.value.details
    with pytest.raises(InputError) as info:
        load_profile("lab", {"gates": {"log_markers": [
            {"pattern": "X", "json": {"fields": {"rank": "${node}"}}}]}})
    assert any("unknown name 'node'" in d for d in info.value.details), info.value.details


# --- the boot watch on a site with the kit ----------------------------------------------------------


def _boot(tmp_path: Path, lines: dict[str, list[str]]) -> tuple[bootwatch.BootWatch, FakeNodes]:
    cluster, doc = container_site(tmp_path)
    nodes = FakeNodes([n.name for n in cluster.nodes], {n.name: n.rank for n in cluster.nodes})
    markers = list(cluster.profile.gates.log_markers)
    for name, st in nodes.state.items():
        st.unit = "active"
        st.markers, st.marker_lines = marker_reading(markers, lines[name])
    api = FakeApi(cluster, doc)
    clock = FakeClock()
    watch = bootwatch.BootWatch(cluster, doc, nodes, api.client(), API_KEY, record_dir=tmp_path / "rec",
                                clock=clock, sleep=clock.sleep, ready_file=tmp_path / "ready.json")
    return watch, nodes


def test_boot_watch_fails_naming_the_rank_marker_and_field(tmp_path: Path) -> None:
    lines = {f"spark-{r}": _good_lines(r) for r in range(4)}
    lines["spark-2"] = _with_layout(lines["spark-2"], lambda doc: doc["draft"].update(
        {k: {**v, "ep_rank": 0} for k, v in doc["draft"].items()}))
    watch, _nodes = _boot(tmp_path, lines)
    with pytest.raises(bootwatch.GateFailure) as info:
        watch.run()
    assert info.value.gate == "log markers" and info.value.node == "spark-2"
    assert info.value.detail == ("rank 2: DSPARK_MOE_LAYOUT: draft draft.stages.0.mlp.experts: field ep_rank "
                                 "expected 2, got 0 (and 2 more draft entries differ)")


def test_boot_watch_passes_good_kit_markers_and_records_the_ranks_at_ready(tmp_path: Path) -> None:
    watch, _nodes = _boot(tmp_path, {f"spark-{r}": _good_lines(r) for r in range(4)})
    assert watch.run().done
    marks = json.loads((tmp_path / "ready.json").read_text())["nodes"]
    assert marks["spark-3"] == {"invocation": "abc", "started_at": ""}
