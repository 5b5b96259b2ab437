"""The serving kit as rendered: facts for the roles, the kit's cluster file, the simulator's view."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import InputError
from sparkctl.model import load_inventory
from sparkctl.model.cluster import Runtime
from sparkctl.profiles import load_profile
from sparkctl.render import facts, kit, rank

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def example() -> Any:
    return load_inventory(REPO / "inventory" / "example")


def test_kit_facts_carry_the_inventory_pin_and_the_profile_layout(example: Any) -> None:
    k = facts.cluster_facts(example)["kit"]
    assert (k["source"], k["commit"], k["location"]) == ("git", example.kit.commit, "controller")
    assert k["current"] == f"{example.paths.run_dir}/kit/current"
    assert k["store"] == f"{example.paths.run_dir}/kit"
    assert (k["mount"], k["manifest"], k["overlay_target"]) == (
        "/opt/sglang4", "patches/manifest.json", "/sgl-workspace/sglang"
    )
    assert len(k["overlays"]) == 11 and k["dockerfile"] == "docker/Dockerfile"
    assert k["markers"] == ["NVME_ENGRAM_READY", "ROCE_TP4_READY", "DSPARK_MOE_LAYOUT"]
    host = f"{example.paths.run_dir}/kit-files/profile.json"
    assert k["files"] == [{"host": host, "dst": "/config/profile.json"}]


def test_kit_markers_are_required_only_with_a_kit(example: Any) -> None:
    markers = {m.pattern: m for m in example.profile.gates.log_markers}
    assert markers["NVME_ENGRAM_READY"].required_for(has_kit=True)
    assert not markers["NVME_ENGRAM_READY"].required_for(has_kit=False)
    assert markers["The server is fired up and ready to roll!"].required_for(has_kit=False)


def test_r4_cluster_file_is_the_publishers_schema_from_the_inventory(example: Any) -> None:
    doc = json.loads(kit.r4_cluster_json(example))
    assert doc["model_store"] + "/" + doc["model_subpath"] == str(example.paths.model_dir)
    assert doc["head_ip"] == "10.77.0.10" and doc["dist_port"] == example.ports.dist_init
    # The values the publisher's configuration.load insists on, from the same profile as the argv.
    fixed = {
        "tp_size": 4, "ep_size": 4, "context_length": 1_000_000, "max_running_requests": 8,
        "max_total_tokens": 4_000_000, "chunked_prefill_size": 2048, "max_prefill_tokens": 2048,
        "mem_fraction_static": 0.8, "draft_length": 5, "min_free_slots_delay": 1,
        "minimum_available_gib": 2, "io_threads": 96, "row_cache_gib": 0, "resident_scales": False,
    }
    assert {k: doc[k] for k in fixed} == fixed
    assert doc["roce_enabled"] is True
    assert [w["rank"] for w in doc["workers"]] == [0, 1, 2, 3]
    assert doc["workers"][0]["ip"] == doc["head_ip"]


def test_without_a_site_kit_nothing_of_the_kit_is_mounted(example: Any) -> None:
    bare = example.model_copy(update={"kit": None})
    cmd = " ".join(rank.container_command(bare, bare.node("spark-1")))
    assert "/opt/sglang4" not in cmd and "/sgl-workspace" not in cmd
    assert facts.cluster_facts(bare)["kit"] is None


def test_the_lab_profile_declares_what_differs_from_a_spark_as_data(example: Any) -> None:
    lab = example.model_copy(update={
        "profile": load_profile("lab"),
        "runtime": Runtime(kind="container", image="sparkctl-lab/engine:kit", image_source="build"),
    })
    node = lab.node("spark-1")
    cmd = rank.container_command(lab, node)
    words = " ".join(cmd)
    assert "--gpus" not in cmd and "--device" not in cmd
    assert "--ulimit memlock=8388608" in words and "--ulimit nofile=20000:20000" in words
    assert sum(1 for w in cmd if w.startswith("type=bind") and "/sgl-workspace/sglang/" in w) == 3
    env = rank.rank_env(lab, node)
    assert env["SPARKCTL_SIM_KIT_DIR"] == "/opt/sglang4"
    assert env["SPARKCTL_SIM_KIT_TARGET"] == "/sgl-workspace/sglang"
    assert env["SPARKCTL_SIM_KIT_MANIFEST"] == "patches/manifest.json"
    assert env["SPARKCTL_SIM_KIT_ADAPTERS"] == "adapter"
    assert "SPARKCTL_SIM_BOOT_DELAY_S" in env


def test_the_kits_launcher_as_entry_point_keeps_the_mounts(example: Any) -> None:
    pk = example.profile.kit.model_copy(update={"entrypoint": "launcher"})
    site = example.model_copy(update={"profile": example.profile.model_copy(update={"kit": pk})})
    node = site.node("spark-3")
    cmd = rank.container_command(site, node)
    i = cmd.index("--entrypoint")
    launch = ["python3", "/opt/sglang4/runtime/launch.py", "--rank", "3"]
    # The kit launcher's own checks run first here too (the same pre-start as the engine entry point).
    checks = rank.prestart_command(site, rank.rank_argv(site, node))
    assert checks[0] == "python3" and checks[-1] == "--"
    assert cmd[i:] == ["--entrypoint", checks[0], site.runtime.image, *checks[1:], *launch]
    assert cmd[:i] == rank.container_command(example, node)[:i]


def test_the_launcher_cannot_carry_the_api_key(example_copy: Path) -> None:
    path = example_copy / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(path.read_text())
    doc["sparkctl_profile_overrides"] = {"kit": {"entrypoint": "launcher"}}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError) as err:
        load_inventory(example_copy)
    assert any("cannot pass the API key" in line for line in err.value.details)
    # The engine entry point is recommended because it skips none of the launcher's checks now.
    assert any("keep entrypoint engine: it makes the launcher's kit checks too" in line
               for line in err.value.details)
