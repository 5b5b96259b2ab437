"""NCCL_IB_TC and B12X_ROCE_TRAFFIC_CLASS: set by neither publisher, rendered only where sparkctl
also configures the switch's lossless class (PFC on the priority the RoCE DSCP maps to)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkctl.model import load_inventory
from sparkctl.render import common, rank, switch

REPO = Path(__file__).resolve().parents[2]
MARKS = ("NCCL_IB_TC", "B12X_ROCE_TRAFFIC_CLASS")


@pytest.fixture(scope="module")
def example() -> Any:
    return load_inventory(REPO / "inventory" / "example")


def _with_switch(cluster: Any, kind: str | None) -> Any:
    sw = None if kind is None else cluster.switch.model_copy(update={"type": kind})
    return cluster.model_copy(update={"switch": sw})


def _env(cluster: Any) -> dict[str, str]:
    return rank.rank_env(cluster, cluster.node("spark-1"))


@pytest.mark.parametrize("kind", ["routeros", "nvue"])
def test_a_switch_with_the_lossless_class_gets_the_traffic_class(example: Any, kind: str) -> None:
    cluster = _with_switch(example, kind)
    env = _env(cluster)
    assert {k: env[k] for k in MARKS} == {k: str(common.ROCE_TOS) for k in MARKS}
    text = rank.rank_env_text(cluster, cluster.node("spark-1"))
    assert "NCCL_IB_TC=106\nB12X_ROCE_TRAFFIC_CLASS=106\n" in text


@pytest.mark.parametrize("kind", ["linux", None])
def test_no_traffic_class_without_a_lossless_class_on_the_switch(example: Any, kind: str | None) -> None:
    cluster = _with_switch(example, kind)
    assert cluster.fabric.host_qos  # the host side alone is not enough
    env = _env(cluster)
    assert not set(MARKS) & set(env)
    assert "NCCL_IB_HCA" in env  # the rest of the network environment is unchanged
    assert "NCCL_IB_TC" not in rank.rank_env_text(cluster, cluster.node("spark-1"))


def test_no_traffic_class_without_host_qos(example: Any) -> None:
    cluster = example.model_copy(update={"fabric": example.fabric.model_copy(update={"host_qos": False})})
    assert not set(MARKS) & set(_env(cluster))


@pytest.mark.parametrize("kind", sorted(switch.RENDERERS))
def test_the_lossless_class_is_the_one_the_switch_config_sets_up(example: Any, kind: str) -> None:
    """lossless_priority says what each switch renderer does: PFC on priority 3 for DSCP 26, or none."""
    cluster = _with_switch(example, kind)
    config = switch.switch_config(cluster)
    prio = switch.lossless_priority(cluster)
    if kind == "routeros":
        assert prio == common.ROCE_PRIO
        assert f"dscp={common.ROCE_DSCP} profile=sparkctl-roce" in config
        assert f"name=sparkctl-roce traffic-class={prio}" in config
        assert f"name={switch.PFC} traffic-class={prio} rx=yes tx=yes" in config
    elif kind == "nvue":
        assert prio == common.ROCE_PRIO  # Cumulus's RoCE lossless mode: DSCP 26 -> priority 3, PFC
        assert "nv set qos roce mode lossless" in config
    else:
        assert prio is None
        assert "pfc" not in config.lower() and "qos" not in config.lower()


def test_no_switch_has_no_lossless_class(example: Any) -> None:
    assert switch.lossless_priority(_with_switch(example, None)) is None
