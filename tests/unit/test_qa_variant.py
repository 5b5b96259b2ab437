"""bench --ab's variant: a named set of profile overrides laid over the site's, checked as a profile
before anything is switched, and served from a copy of the inventory the vars plugin reads as any other."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkctl.errors import InputError
from sparkctl.model import load_inventory
from sparkctl.qa import variant

BLOCK = "--speculative-dspark-block-size"


def _write(site: Path, name: str, text: str) -> Path:
    path = site / variant.VARIANTS_DIR / f"{name}.yml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def test_the_variants_overrides_go_over_the_sites_section_by_section() -> None:
    site = {"args": {"--mem-fraction-static": 0.8}, "env": {"A": "1"}, "memory": {"unified_gib": 120}}
    lever = {"args": {BLOCK: 7}, "env": {"A": None}}
    assert variant.layered(site, lever) == {
        "args": {"--mem-fraction-static": 0.8, BLOCK: 7},  # merged key by key, as the profile merges
        "env": {"A": None},  # None still removes the variable when the profile merges it
        "memory": {"unified_gib": 120},
    }
    assert site["args"] == {"--mem-fraction-static": 0.8}  # the site's own mapping is left alone


def test_a_variant_is_found_by_name_checked_and_served_from_a_copy(
    example_copy: Path, tmp_path: Path
) -> None:
    _write(example_copy, "k7", f"args:\n  {BLOCK}: 7\n")
    baseline = load_inventory(example_copy)
    assert baseline.profile.args[BLOCK] == 5
    k7 = variant.load_variant("k7", example_copy, baseline.profile.name, {})
    assert k7.name == "k7" and k7.overrides == {"args": {BLOCK: 7}} and len(k7.sha256) == 64
    lever_dir = variant.variant_inventory(example_copy, k7, {}, tmp_path / "lever")
    written = yaml.safe_load((lever_dir / "group_vars" / "all" / variant.VARS_FILE).read_text())
    assert written == {"sparkctl_profile_overrides": {"args": {BLOCK: 7}}}
    lever = load_inventory(lever_dir)
    assert lever.profile.args[BLOCK] == 7 and lever.name == baseline.name
    assert [n.name for n in lever.nodes] == [n.name for n in baseline.nodes]
    assert load_inventory(example_copy).profile.args[BLOCK] == 5  # the site itself is untouched


def test_a_bad_variant_is_refused_naming_its_file(example_copy: Path) -> None:
    with pytest.raises(InputError, match=r"cannot read .*bench-variants/missing.yml"):
        variant.load_variant("missing", example_copy, "r4-nvme", {})
    path = _write(example_copy, "list", "- 7\n")
    with pytest.raises(InputError, match="non-empty mapping of profile overrides"):
        variant.load_variant(str(path), example_copy, "r4-nvme", {})
    path = _write(example_copy, "typo", "args:\n  --speculative-dspark-blok-size: 7\n")
    with pytest.raises(InputError, match=f"--ab {path}"):
        variant.load_variant(str(path), example_copy, "r4-nvme", {})
