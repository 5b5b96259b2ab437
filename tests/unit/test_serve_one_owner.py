"""Facts the Ansible roles and sparkctl's own code both need, each written in one place: these
tests fail when a second copy appears or the two drift apart."""

from __future__ import annotations

import inspect
from pathlib import Path

import yaml

from sparkctl.ansible import content
from sparkctl.ansible.roledefaults import role_default
from sparkctl.render.common import RANK_UNIT_NAME
from sparkctl.serve import fastup
from sparkctl.stage import kit as stage_kit
from sparkctl.stage import verb as stage_verb
from sparkctl.stage.kitdefaults import kit_layout_defaults

ROLES = content.root() / "roles"
PRODUCT = Path(fastup.__file__).resolve().parents[1]


def _defaults(role: str) -> dict[str, object]:
    doc = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())
    assert isinstance(doc, dict)
    return doc


def test_the_kit_layout_defaults_are_the_spark_kit_roles() -> None:
    role = _defaults("spark_kit")
    layout = kit_layout_defaults()
    assert layout.manifest == role["spark_kit_default_manifest"]
    assert layout.overlay_source == role["spark_kit_default_overlay_source"]
    # The role's own variables fall back to those two, never to a literal of their own.
    assert "default(spark_kit_default_manifest, true)" in str(role["spark_kit_manifest"])
    assert "default(spark_kit_default_overlay_source, true)" in str(role["spark_kit_overlay_source"])
    # stage.kit.prepare's defaults say the same.
    params = inspect.signature(stage_kit.prepare).parameters
    assert (params["manifest"].default, params["overlay_source"].default) == tuple(layout)


def test_no_python_module_retypes_the_kit_layout_defaults() -> None:
    allowed = {PRODUCT / "stage" / "kit.py"}  # prepare's defaults, tied by the test above
    for path in PRODUCT.rglob("*.py"):
        if path in allowed:
            continue
        text = path.read_text()
        for literal in ('"patches/manifest.json"', '"patches/source"'):
            where = path.relative_to(PRODUCT)
            assert literal not in text, f"{where} retypes {literal}; read kit_layout_defaults()"


def test_the_fast_start_tries_and_waits_as_the_spark_rank_role_does() -> None:
    role = _defaults("spark_rank")
    assert fastup.start_tries() == role["spark_rank_start_tries"] == role_default("spark_rank",
                                                                                 "spark_rank_start_tries")
    assert fastup.start_wait_s() == role["spark_rank_start_wait_s"]
    script = fastup.start_script("u.service", delay_s=0)
    assert f"failed {role['spark_rank_start_tries']} times" in script
    wave = yaml.safe_load((ROLES / "spark_rank" / "tasks" / "start_wave.yml").read_text())
    start = next(t for t in wave if t.get("register") == "spark_rank_wave_start")
    # Ansible's retries count the tries after the first.
    assert start["retries"] == "{{ spark_rank_start_tries | int - 1 }}"
    assert not any(isinstance(getattr(fastup, name, None), int) for name in ("START_TRIES", "START_WAIT_S"))


def test_stage_says_the_stall_timeout_the_spark_stage_role_defaults_to() -> None:
    assert _defaults("spark_stage")["spark_stage_stall_timeout_s"] == stage_verb.STALL_TIMEOUT_S


def test_the_rank_unit_name_and_the_head_are_not_retyped_in_serve() -> None:
    for path in sorted((PRODUCT / "serve").glob("*.py")):
        text = path.read_text()
        assert RANK_UNIT_NAME not in text, f"serve/{path.name} retypes {RANK_UNIT_NAME}; use RANK_UNIT_NAME"
        assert 'int(e["rank"]) == 0' not in text, f"serve/{path.name} finds the head by rank: cluster.head"
