"""Every rank argv of each shape's example through SGLang 0.5.23's own parser (needs `make sglang`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.model import load_inventory
from sparkctl.qa import sglang_check

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.skipif(not sglang_check.available(), reason="SGLang not installed (make sglang)"),
]

EXAMPLES = Path(__file__).resolve().parents[2] / "inventory" / "examples"


@pytest.mark.parametrize("shape", ["triangle-tp3", "ring-tp4", "switch-tp8", "switch-2xtp4"])
def test_each_shape_parses_on_every_rank(shape: str) -> None:
    assert sglang_check.check_cluster(load_inventory(EXAMPLES / shape)) == []


def test_mia_tp8_parses_on_eight_ranks() -> None:
    from sparkctl.profiles import load_profile

    cluster = load_inventory(EXAMPLES / "switch-tp8")
    cluster = cluster.model_copy(update={"profile": load_profile("mia-tp8")})
    assert sglang_check.check_cluster(cluster) == []
