"""The fabric probe's jumbo pings: retried in rounds, then classed as lossy, MTU-broken or
unreachable (`sparkctl check fabric` words its verdict from that, with the counts)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import sparkctl
import sparkctl.nodeside

MODULE = Path(__file__).resolve().parents[2] / "roles/spark_fabric/library/sparkctl_fabric_probe.py"


@pytest.fixture(scope="module")
def probe() -> Iterator[ModuleType]:
    # The module imports the node-side readers through Ansible's module_utils namespace.
    saved = {k: sys.modules.get(k) for k in ("ansible.module_utils.sparkctl",
                                             "ansible.module_utils.sparkctl.nodeside")}
    sys.modules["ansible.module_utils.sparkctl"] = sparkctl
    sys.modules["ansible.module_utils.sparkctl.nodeside"] = sparkctl.nodeside
    spec = importlib.util.spec_from_file_location("sparkctl_fabric_probe_under_test", MODULE)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    yield mod
    for k, v in saved.items():
        if v is None:
            sys.modules.pop(k, None)
        else:
            sys.modules[k] = v


def _script(
    probe: ModuleType, monkeypatch: pytest.MonkeyPatch, answers: list[tuple[int, int, bool]]
) -> list[Any]:
    calls: list[Any] = []

    def fake(src: str, dst: str, size: int, count: int, timeout: int) -> tuple[int, int, bool]:
        calls.append(size)
        return answers.pop(0)

    monkeypatch.setattr(probe, "_ping_once", fake)
    return calls


def test_one_lost_reply_is_retried_not_failed(probe: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _script(probe, monkeypatch, [(5, 4, False), (5, 5, False)])
    res = probe.ping("enp1s0f0np0", "10.77.0.12", 8972, 5, 1)
    assert res["ok"] and res["kind"] == "ok" and res["rounds"] == 2
    assert res["detail"] == "9/10 replies (2 rounds)" and calls == [8972, 8972]


def test_some_replies_every_round_is_lossy_with_the_percentage(probe: ModuleType,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _script(probe, monkeypatch, [(5, 4, False), (5, 3, False), (5, 4, False)])
    res = probe.ping("enp1s0f0np0", "10.77.0.12", 8972, 5, 1)
    assert not res["ok"] and res["kind"] == "lossy" and res["loss_pct"] == 26.7
    assert res["detail"] == "11/15 replies over 3 rounds of 5 (26.7% lost)"


def test_no_jumbo_reply_but_small_ones_is_a_broken_mtu(probe: ModuleType,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _script(probe, monkeypatch, [(5, 0, False)] * 3 + [(2, 2, False)])
    res = probe.ping("enp1s0f0np0", "10.77.0.12", 8972, 5, 1)
    assert res["kind"] == "mtu" and "small pings get 2/2" in res["detail"] and calls[-1] == 56


def test_message_too_long_is_the_local_mtu(probe: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    _script(probe, monkeypatch, [(5, 0, True)] * 3 + [(2, 0, False)])
    res = probe.ping("enp1s0f0np0", "10.77.0.12", 8972, 5, 1)
    assert res["kind"] == "mtu" and "refuses 8972 B without fragmenting" in res["detail"]


def test_nothing_at_all_is_unreachable(probe: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    _script(probe, monkeypatch, [(5, 0, False)] * 3 + [(2, 0, False)])
    res = probe.ping("enp1s0f0np0", "10.77.0.12", 8972, 5, 1)
    assert res["kind"] == "unreachable" and res["detail"].startswith("0/15 replies over 3 rounds of 5")
