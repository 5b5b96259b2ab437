"""The profiles of every published shape (TP3 triangle, TP8 switch, TP4 ring) and the schema sections
they need: fabric topologies, padding, resident Engram, staged artifacts, the transient cap and the
samples behind a published figure."""

from __future__ import annotations

from typing import Any

import pytest

from sparkctl.errors import InputError
from sparkctl.profiles import load_profile
from sparkctl.profiles.shape import FabricNeeds, Pad

SHAPES = ("mia-tp3", "sg17-tp8", "mia-tp8", "mia-ring-tp4")


def _details(name: str, overrides: dict[str, Any]) -> list[str]:
    with pytest.raises(InputError) as err:
        load_profile(name, overrides)
    return err.value.details


@pytest.mark.parametrize("name", SHAPES)
def test_each_shape_profile_fits_its_node_and_names_its_sources(name: str) -> None:
    prof = load_profile(name)
    assert prof.memory_problems() == []
    assert prof.published is not None and prof.published.source


def test_tp3_pads_heads_groups_and_draft_experts_as_published() -> None:
    prof = load_profile("mia-tp3")
    assert (prof.tp_size, prof.ep_size) == (3, 3)
    assert [p.shown(3) for p in prof.padding] == [
        "attention_heads 64 -> 96", "output_groups 8 -> 12", "draft_experts 128 -> 129"]
    assert prof.env["DSV41_TP_PAD"] == "1"
    assert prof.fabric.topologies == ["triangle", "switch"]
    assert prof.memory.weights_gib_per_rank == 101
    assert prof.published is not None and prof.published.prose[1] == 37.9


def test_tp3_without_its_padding_is_refused_naming_the_dimension() -> None:
    details = _details("mia-tp3", {"padding": []})
    assert any("args.--tp-size: 3 does not divide the model's 64 attention heads" in d for d in details)
    assert any("8 output groups" in d for d in details)


def test_tp3_from_a_tp4_profile_is_refused_by_the_model_dimensions() -> None:
    details = _details("m1-1m", {"args": {"--tp-size": 3, "--ep-size": 3}})
    assert any("does not divide the model's 64 attention heads" in d for d in details)


def test_padding_switched_off_in_env_is_refused() -> None:
    details = _details("mia-tp3", {"env": {"DSV41_TP_PAD": "0"}})
    assert any("switched on by DSV41_TP_PAD=1, but env sets DSV41_TP_PAD=0" in d for d in details)


def test_padding_that_tp_does_not_divide_is_refused() -> None:
    pad = Pad(dim="attention_heads", per="model", to=96)
    assert pad.problems(3) == []
    assert pad.problems(5) == ["attention_heads: 96 does not divide by --tp-size 5"]
    assert Pad(dim="attention_heads", per="model", to=32).problems(2) == [
        "attention_heads: pads 64 to 32, which is smaller"]
    share = Pad(dim="shared_expert_k", per="rank", to=384)
    assert share.problems(8) == [] and share.shown(8) == "shared_expert_k 288 -> 384"
    assert share.problems(7) == [
        "shared_expert_k: 2304 does not divide by --tp-size 7, so no rank share to pad"]
    assert Pad(dim="shared_expert_k", per="rank", to=256).problems(4) == [
        "shared_expert_k: pads each rank's 576 to 256, which is smaller"]


def test_ep_must_divide_tp() -> None:
    details = _details("m1-1m", {"args": {"--ep-size": 3}})
    assert any("args.--ep-size: 3 does not divide --tp-size 4" in d for d in details)


def test_sg17_is_tp8_ep4_with_resident_engram_and_the_trace_reference() -> None:
    prof = load_profile("sg17-tp8")
    assert (prof.tp_size, prof.ep_size, prof.tp_size // prof.ep_size) == (8, 4, 2)
    assert prof.engram == "resident" and prof.memory.engram_packed_gib == 0
    assert "OFFLOAD_MODE" not in prof.env and prof.env["SGLANG8_RESIDENT_PROFILE"] == "1"
    assert (prof.max_total_tokens, prof.max_running_requests) == (8_000_000, 128)
    assert prof.context_length == 1_000_000
    assert prof.args["--speculative-dspark-block-size"] == 5
    assert prof.fabric.topologies == ["switch"]
    pub = prof.published
    assert pub is not None and pub.coding == {1: 135.40}
    assert pub.coding_samples == {1: [135.14, 136.02, 135.03]}


def test_resident_engram_with_packed_shards_is_refused() -> None:
    details = _details("sg17-tp8", {"memory": {"engram_packed_gib": 23.6}})
    assert any("engram_packed_gib: 23.6 with engram: resident" in d for d in details)
    details = _details("sg17-tp8", {"env": {"OFFLOAD_MODE": "nvme"}})
    assert any("OFFLOAD_MODE: nvme with engram: resident" in d for d in details)
    # A packed-shard directory in the environment: the rank would look for shards nobody staged.
    details = _details("sg17-tp8", {"env": {"DSV41_PACKED_DIR": "${engram_dir}"}})
    assert any("env.DSV41_PACKED_DIR: names ${engram_dir} with engram: resident" in d for d in details)


def test_samples_must_average_to_the_published_figure() -> None:
    details = _details("sg17-tp8", {"published": {
        "source": "x", "coding": {1: 135.40}, "coding_samples": {1: [135.14, 136.02]}}})
    assert any("the samples average 135.58, not the published 135.4" in d for d in details)
    details = _details("sg17-tp8", {"published": {"source": "x", "coding_samples": {4: [1.0]}}})
    assert any("coding_samples.4: no coding figure at concurrency 4" in d for d in details)


def test_mia_tp8_pads_the_shared_expert_and_caps_the_transient() -> None:
    prof = load_profile("mia-tp8")
    assert (prof.tp_size, prof.ep_size) == (8, 2)
    assert [p.shown(8) for p in prof.padding] == ["shared_expert_k 288 -> 384"]
    assert prof.env["DSV41_SHARED_PAD_K"] == "1" and prof.env["DSV41_INDEXER_CHUNKED"] == "1"
    assert prof.chunk == 4096 and prof.prefill_transient_gib == 2
    # Without the chunked indexer's bound the formula gives ~56 GiB for 4,096-token chunks at 1M.
    uncapped = load_profile("mia-tp8", {"memory": {"prefill_transient_cap_gib": None}})
    assert uncapped.prefill_transient_gib == pytest.approx(56.0)


def test_the_transient_cap_admits_chunks_the_formula_refuses() -> None:
    big = {"args": {"--chunked-prefill-size": 4096}}
    (problem,) = load_profile("m1-1m", big).memory_problems()
    assert "4,096 x context 1,048,576 = 56.00 GiB" in problem
    capped = load_profile("m1-1m", {**big, "memory": {"prefill_transient_cap_gib": 2}})
    assert capped.memory_problems() == [] and capped.prefill_transient_gib == 2


def test_padding_memory_stated_apart_is_counted() -> None:
    base = load_profile("mia-tp3")
    pads = [p.model_dump() for p in base.padding]
    pads[0]["gib_per_rank"] = 2.5
    padded = load_profile("mia-tp3", {"padding": pads})
    assert padded.resident_weights_gib == pytest.approx(base.resident_weights_gib + 2.5)
    assert padded.transient_limit_gib == pytest.approx(base.transient_limit_gib - 2.5)


def test_ring_profile_runs_nccl_ring_only_with_the_staged_patched_library() -> None:
    prof = load_profile("mia-ring-tp4")
    assert prof.tp_size == 4 and prof.fabric.topologies == ["ring"]
    assert prof.env["NCCL_SWITCHLESS_RING_ONLY"] == "1" and prof.env["NCCL_ALGO"] == "Ring"
    (nccl,) = prof.artifacts
    assert nccl.source == "FujitsuPolycom/sparkring" and nccl.must_contain == ["SWITCHLESS_RING_ONLY"]
    assert nccl.mount.endswith("nvidia/nccl/lib/libnccl.so.2")
    assert nccl.upstream == "NVIDIA/nccl@73cf112295c33aee2b895f329f592f2a9b4b0f97"


@pytest.mark.parametrize(("overrides", "expected"), [
    ({"args": {"--tp-size": 8, "--ep-size": 4}}, "a ring carries --tp-size 4 only, this profile has 8"),
    ({"env": {"NCCL_SWITCHLESS_RING_ONLY": None}}, "a ring needs NCCL_SWITCHLESS_RING_ONLY=1 in env"),
    ({"artifacts": []}, "a ring needs the patched NCCL declared under artifacts"),
])
def test_a_ring_profile_without_what_it_needs_is_refused(overrides: dict[str, Any], expected: str) -> None:
    assert any(expected in d for d in _details("mia-ring-tp4", overrides))


def test_default_fabric_needs_carry_everything_but_the_ring() -> None:
    needs = FabricNeeds()
    assert [t for t in ("switch", "triangle", "ring", "pair") if needs.carried_on(t)] == [
        "switch", "triangle", "pair"]
    assert FabricNeeds(topologies=["ring"]).carried_on("ring")
    assert load_profile("r4-nvme").fabric.topologies is None


def test_a_staged_artifact_is_declared_plainly() -> None:
    (nccl,) = load_profile("mia-ring-tp4").artifacts
    good = nccl.model_dump()
    details = _details("mia-ring-tp4", {"artifacts": [{**good, "mount": "nccl/libnccl.so.2"}]})
    assert any("must be an absolute path" in d for d in details)
    details = _details("mia-ring-tp4", {"artifacts": [good, good]})
    assert any("artifacts: nccl-switchless-ring declared twice" in d for d in details)
    details = _details("mia-ring-tp4", {"artifacts": [{**good, "sha256": "abc"}]})
    assert any("artifacts.0.sha256" in d for d in details)
