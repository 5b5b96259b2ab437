"""`up` reads its preflight in the same SSH round as its status snapshot, before it knows whether a
rank serves: the preflight probe then drops the page cache only where the rank unit is not running
(``keep_caches_if_running``); a preflight of its own (after `up` stopped the ranks) always drops it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkctl.nodeside import probe as nodeprobe
from sparkctl.serve import probe


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The probe's readers stood in for; ``state["unit"]`` is the rank unit's ActiveState, and
    ``state["drops"]`` counts the page cache drops."""
    state: dict[str, Any] = {"unit": "inactive", "drops": 0}

    def drop() -> bool:
        state["drops"] += 1
        return True

    monkeypatch.setattr(nodeprobe, "unit_state", lambda name: {"active": state["unit"]})
    monkeypatch.setattr(nodeprobe, "drop_caches", drop)
    for reader, value in (("meminfo", {}), ("gpu", None), ("listening_ports", []), ("rank_processes", []),
                          ("model_files", {}), ("identity", "docker"), ("gid_indexes", None),
                          ("gpu_apps", []), ("gpu_containers", [])):
        monkeypatch.setattr(nodeprobe, reader, lambda *a, _v=value, **k: _v)
    monkeypatch.setattr(nodeprobe.links, "read_links", lambda devs: {})
    monkeypatch.setattr(nodeprobe, "container_state", lambda name: {"running": False})
    return state


def _preflight(capsys: pytest.CaptureFixture[str], **extra: Any) -> dict[str, Any]:
    nodeprobe.main({"mode": "preflight", "unit": "sparkctl-rank.service", "model_dir": "/models", **extra})
    return dict(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))


@pytest.mark.parametrize("unit", ["active", "activating", "deactivating", "reloading"])
def test_beside_the_snapshot_a_running_rank_keeps_its_page_cache(
        node: dict[str, Any], capsys: pytest.CaptureFixture[str], unit: str) -> None:
    node["unit"] = unit
    facts = _preflight(capsys, keep_caches_if_running=True)
    assert node["drops"] == 0 and facts["caches_dropped"] is False and facts["unit"]["active"] == unit


@pytest.mark.parametrize("unit", ["inactive", "failed"])
def test_beside_the_snapshot_a_stopped_rank_has_the_cache_dropped(
        node: dict[str, Any], capsys: pytest.CaptureFixture[str], unit: str) -> None:
    node["unit"] = unit
    assert _preflight(capsys, keep_caches_if_running=True)["caches_dropped"] is True and node["drops"] == 1


def test_a_preflight_of_its_own_always_drops_the_cache(
        node: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    node["unit"] = "active"
    assert _preflight(capsys)["caches_dropped"] is True and node["drops"] == 1


def test_a_preflight_answer_holds_every_status_fact(
        node: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    """`up`'s status snapshot is read from its preflight answer (``serve.probe.as_status``): every
    field a status read answers is in it, and as_status keeps exactly those."""
    unit_file = tmp_path / "sparkctl-rank.service"
    unit_file.write_text("[Service]\n")
    common = {"unit": "sparkctl-rank.service", "container": "sparkctl-rank", "unit_file": str(unit_file),
              "hash_files": [str(unit_file)], "hash_key": "ab" * 32, "netdevs": ["enp1s0f0np0"],
              "engram_dir": str(tmp_path), "rank": 1, "tp": 4}
    nodeprobe.main({"mode": "status", **common})
    status = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    preflight = _preflight(capsys, **common)
    assert set(status) - {"mode"} == set(probe.STATUS_FIELDS)
    assert set(status) <= set(preflight), set(status) - set(preflight)
    facts = {"spark-1": probe.NodeFacts("spark-1", 1, True, None, preflight)}
    as_status = probe.as_status(facts)["spark-1"].data
    assert set(as_status) == set(status) and as_status["mode"] == "status"
    assert as_status["file_digest"] == status["file_digest"] and as_status["container"] == status["container"]
