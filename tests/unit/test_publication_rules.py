"""The publishers' rules `validate` enforces: a kit-only profile on a runtime that carries the kit,
DSpark's admission delayer turned off, a switch for four or more nodes, positive sizes and counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from support.pair_site import make_switchless_pair

from sparkctl.errors import EXIT_USAGE, InputError
from sparkctl.model import load_inventory
from sparkctl.profiles import flags

OVERRIDE = "sparkctl_profile_overrides.args."


def _site(inv: Path, **changes: Any) -> None:
    path = inv / "group_vars/all/sparkctl.yml"
    doc = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _hosts(inv: Path) -> tuple[Path, dict[str, Any]]:
    path = inv / "hosts.yml"
    return path, yaml.safe_load(path.read_text())


def _drop_switch(inv: Path) -> None:
    path, doc = _hosts(inv)
    del doc["all"]["children"]["switches"]
    path.write_text(yaml.safe_dump(doc))


def _problems(inv: Path) -> list[str]:
    with pytest.raises(InputError) as info:
        load_inventory(inv)
    assert info.value.exit_code == EXIT_USAGE
    assert "nothing was contacted" in info.value.message
    return list(info.value.details)


def _on(field: str, lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(f"{field}:")]


# -- a kit-only profile needs a runtime that carries the kit ------------------------------------


def test_r4_nvme_on_a_venv_without_any_kit_is_refused_on_the_runtime(example_copy: Path) -> None:
    _site(example_copy, sparkctl_runtime={"kind": "venv", "venv_path": "/opt/sparkctl/venv"},
          sparkctl_kit=None)
    (line,) = _on("sparkctl_runtime.kind", _problems(example_copy))
    assert "venv cannot carry the serving kit" in line and "r4-nvme" in line
    assert "kind: container" in line and "sparkctl_kit" in line


def test_r4_nvme_on_a_venv_with_a_kit_says_to_change_the_runtime_not_to_drop_the_kit(
    example_copy: Path,
) -> None:
    _site(example_copy, sparkctl_runtime={"kind": "venv", "venv_path": "/opt/sparkctl/venv"})
    lines = _problems(example_copy)
    assert _on("sparkctl_runtime.kind", lines)
    assert not any("remove sparkctl_kit" in line for line in lines), lines


def test_a_profile_whose_kit_is_optional_still_runs_on_a_venv(example_copy: Path) -> None:
    _site(example_copy, sparkctl_profile_overrides={"kit": {"required": False}},
          sparkctl_runtime={"kind": "venv", "venv_path": "/opt/sparkctl/venv"}, sparkctl_kit=None)
    assert load_inventory(example_copy).runtime.kind == "venv"


# -- DSpark's admission delayer ------------------------------------------------------------------


@pytest.mark.parametrize("delay", [False, 4, "2"])
def test_dspark_with_eight_slots_and_the_delayer_left_on_is_refused(example_copy: Path, delay: Any) -> None:
    _site(example_copy, sparkctl_profile_overrides={"args": {"--min-free-slots-delay": delay}})
    (line,) = _on(f"{OVERRIDE}--min-free-slots-delay", _problems(example_copy))
    assert "DSPARK with --max-running-requests 8" in line
    assert "holds new prefills until 2 slots are free" in line
    assert "set --min-free-slots-delay: 1" in line


def test_sixteen_slots_without_the_delay_flag_wait_for_three(example_copy: Path) -> None:
    args = {"--max-running-requests": 16, "--min-free-slots-delay": False}
    _site(example_copy, sparkctl_profile_overrides={"args": args})
    lines = _problems(example_copy)
    (line,) = _on(f"{OVERRIDE}--min-free-slots-delay", lines)
    assert "until 3 slots are free" in line  # min(4, max(2, (16 + 5) // 6))


def test_the_algorithm_name_is_matched_as_sglang_does(example_copy: Path) -> None:
    _site(example_copy, sparkctl_profile_overrides={
        "args": {"--speculative-algorithm": "dspark", "--min-free-slots-delay": False}})
    assert _on(f"{OVERRIDE}--min-free-slots-delay", _problems(example_copy))


@pytest.mark.parametrize("args", [
    {"--min-free-slots-delay": 0},  # 1 or less disables the delayer
    {"--max-running-requests": 7, "--cuda-graph-max-bs-decode": 7, "--min-free-slots-delay": False},
])
def test_the_delayer_rule_passes_what_sglang_leaves_off(example_copy: Path, args: dict[str, Any]) -> None:
    _site(example_copy, sparkctl_profile_overrides={"args": args})
    assert load_inventory(example_copy).profile.name == "r4-nvme"


# -- four or more nodes need a switch ----------------------------------------------------------------


def test_four_nodes_without_a_switch_are_refused(example_copy: Path) -> None:
    _drop_switch(example_copy)
    (line,) = _on("all.children.switches", _problems(example_copy))
    assert "4 nodes and no switch" in line and "three-node triangle" in line
    assert "sparkctl_switch_type" in line
    assert "hosts.yml of the example site: `sparkctl init --example DIR`" in line


def test_a_two_node_site_may_be_switchless(example_copy: Path) -> None:
    make_switchless_pair(example_copy)
    cluster = load_inventory(example_copy)
    assert cluster.switch is None and len(cluster.nodes) == 2


def test_the_example_documents_the_switch_as_required_for_four_nodes() -> None:
    text = (Path(__file__).resolve().parents[2] / "inventory/example/hosts.yml").read_text()
    assert "Remove the group for a switchless setup" not in text
    assert "four-node mesh" in text


# -- numeric flags that must be positive -------------------------------------------------------------


@pytest.mark.parametrize(("flag", "value"), [
    ("--context-length", -5),
    ("--context-length", "0"),
    ("--max-total-tokens", 0),
    ("--max-prefill-tokens", -2048),
    ("--max-running-requests", 0),
    ("--chunked-prefill-size", 0),
    ("--tp-size", 0),
    ("--ep-size", -4),
    ("--cuda-graph-max-bs-decode", 0),
    ("--cuda-graph-bs-decode", [0, 1, 2]),
    ("--watchdog-timeout", 0),
    ("--speculative-dspark-block-size", 0),
    ("--mem-fraction-static", 0),
    ("--mem-fraction-static", 1.5),
])
def test_a_non_positive_size_count_or_timeout_is_refused(example_copy: Path, flag: str, value: Any) -> None:
    _site(example_copy, sparkctl_profile_overrides={"args": {flag: value}})
    (line,) = _on(f"{OVERRIDE}{flag}", _problems(example_copy))
    assert "positive" in line or "at most" in line, line


def test_sglangs_suffixed_sizes_are_numbers_too() -> None:
    assert flags.number("--context-length", "1Mi") == 1 << 20
    assert flags.number("--max-total-tokens", "4M") == 4_000_000
    assert flags.problems("--context-length", "1M") == []
    assert flags.problems("--context-length", "-1M")  # no sign with a suffix
    assert "positive" in flags.problems("--max-prefill-tokens", "-1")[0]
    assert flags.problems("--context-length", "1.5Mi")  # SGLang refuses decimals with IEC suffixes


def test_every_ranged_flag_is_one_sglang_has() -> None:
    known = flags.catalogue()["flags"]
    assert sorted(set(flags.RANGES) - set(known)) == []
    assert all(known[f].get("type") in ("int", "float") for f in flags.RANGES)


# -- all together -----------------------------------------------------------------------------------


def test_every_rule_is_reported_in_one_run(example_copy: Path) -> None:
    _drop_switch(example_copy)
    _site(example_copy, sparkctl_runtime={"kind": "venv", "venv_path": "/opt/sparkctl/venv"},
          sparkctl_kit=None, sparkctl_profile_overrides={"args": {"--min-free-slots-delay": False}})
    lines = _problems(example_copy)
    for field in ("sparkctl_runtime.kind", f"{OVERRIDE}--min-free-slots-delay", "all.children.switches"):
        assert _on(field, lines), (field, lines)


def test_a_bad_flag_is_reported_with_the_missing_switch(example_copy: Path) -> None:
    _drop_switch(example_copy)
    args = {"--context-length": -5, "--max-total-tokens": 0}
    _site(example_copy, sparkctl_profile_overrides={"args": args})
    lines = _problems(example_copy)
    for field in (f"{OVERRIDE}--context-length", f"{OVERRIDE}--max-total-tokens", "all.children.switches"):
        assert _on(field, lines), (field, lines)


def test_a_suffixed_size_is_kept_as_the_number_sglang_reads(example_copy: Path) -> None:
    args = {"--context-length": "1M", "--max-total-tokens": "4M"}
    _site(example_copy, sparkctl_profile_overrides={"args": args})
    profile = load_inventory(example_copy).profile
    assert profile.args["--context-length"] == 1_000_000 and profile.context_length == 1_000_000
    assert profile.args["--max-total-tokens"] == 4_000_000
