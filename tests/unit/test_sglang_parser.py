"""Every rendered rank argv through SGLang 0.5.23's own parser (needs `make sglang`).

The extra may live in this venv or in a separate one named by $SPARKCTL_SGLANG_PYTHON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkctl.errors import InputError
from sparkctl.model import Runtime, load_inventory
from sparkctl.profiles import load_profile
from sparkctl.qa import sglang_check
from sparkctl.render import rank_argv

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.skipif(not sglang_check.available(), reason="SGLang not installed (make sglang)"),
]

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example"


@pytest.fixture(scope="module")
def example() -> Any:
    return load_inventory(EXAMPLE)


@pytest.mark.parametrize("profile", ["r4-nvme", "m1-1m"])
def test_both_profiles_parse_on_every_rank(example: Any, profile: str) -> None:
    cluster = example.model_copy(update={"profile": load_profile(profile)})
    assert sglang_check.check_cluster(cluster) == []


def test_lab_profile_parses(example: Any) -> None:
    cluster = example.model_copy(update={"profile": load_profile("lab"), "runtime": Runtime(kind="lab")})
    assert sglang_check.check_argv(rank_argv(cluster, cluster.head)) == []


def _bypassing_the_catalogue(name: str, args: dict[str, Any]) -> Any:
    """A profile with ``args`` merged in without sparkctl's own flag checks (which refuse them at
    load time), so that SGLang's parser is what answers."""
    with pytest.raises(InputError):
        load_profile(name, {"args": args})
    prof = load_profile(name)
    return prof.model_copy(update={"args": {**prof.args, **args}})


def test_bad_choice_quotes_sglang(example: Any) -> None:
    cluster = example.model_copy(
        update={"profile": _bypassing_the_catalogue("r4-nvme", {"--kv-cache-dtype": "fp16"})}
    )
    with pytest.raises(InputError) as err:
        sglang_check.ensure_accepted(cluster)
    assert err.value.exit_code == 2
    (detail,) = err.value.details
    assert detail.startswith("spark-0, spark-1, spark-2, spark-3: sglang serve: error: ")
    assert "argument --kv-cache-dtype" in detail
    assert "invalid choice: 'fp16'" in detail


def test_unknown_flag_quotes_sglang(example: Any) -> None:
    cluster = example.model_copy(update={"profile": _bypassing_the_catalogue("m1-1m", {"--tp-sizee": 4})})
    errors = sglang_check.check_argv(rank_argv(cluster, cluster.head))
    assert errors == ["sglang serve: error: unrecognized arguments: --tp-sizee 4"]


def test_bad_type_quotes_sglang() -> None:
    errors = sglang_check.check_argv(["sglang", "serve", "--model-path", "/m", "--tp-size", "four"])
    want = "sglang serve: error: argument --tp-size/--tensor-parallel-size: invalid int value: 'four'"
    assert errors == [want]
