"""`up`'s boot watch names the kit's pre-start failure: a rank whose container stopped in the
pre-start checks (sparkctl.nodeside.prestart) is reported with its node and the failed check lines
of that start, not as a bare unit exit with an engine log that does not exist."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.gates_fakes import API_KEY, FakeApi, FakeClock, FakeNodes, container_site

from sparkctl.nodeside import prestart
from sparkctl.serve import bootwatch

CFG = "/opt/sglang4/runtime/configuration.py"
OVERLAY = "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_v4.py"
# An earlier start's failure, then this start's: only the last pre-start's lines count.
JOURNAL = "\n".join([
    f"{prestart.BEGIN} kit /opt/sglang4",
    f"{prestart.FAIL} overlay {OVERLAY} expected {'a' * 64} actual missing",
    f"{prestart.STOPPED} 1 of 9 checks failed; sglang not started",
    f"{prestart.BEGIN} kit /opt/sglang4",
    f"{prestart.FAIL} runtime-configuration {CFG} expected {'1' * 64} actual {'2' * 64}",
    f"{prestart.FAIL} sglang-commit env:SGLANG_BUILD_COMMIT expected {'c' * 40} actual unset",
    f"{prestart.STOPPED} 2 of 9 checks failed; sglang not started",
]) + "\n"


@pytest.fixture
def site(tmp_path: Path) -> tuple[Any, dict[str, Any], FakeNodes, FakeApi]:
    cluster, doc = container_site(tmp_path)
    nodes = FakeNodes([n.name for n in cluster.nodes], {n.name: n.rank for n in cluster.nodes})
    return cluster, doc, nodes, FakeApi(cluster, doc)


def _exits(node: str, at_round: int) -> Any:
    """Every unit active from the first sample; ``node``'s fails from round ``at_round``."""

    def step(mode: str, n: int, state: dict[str, Any]) -> None:
        if mode != "watch":
            return
        for st in state.values():
            st.unit = "active"
        if n >= at_round:
            state[node].unit = "failed"
            state[node].result = "exit-code"

    return step


def _watch(site: Any, tmp_path: Path) -> bootwatch.BootWatch:
    cluster, doc, nodes, api = site
    api.ready = False
    clock = FakeClock()
    return bootwatch.BootWatch(cluster, doc, nodes, api.client(), API_KEY, record_dir=tmp_path / "rec",
                               clock=clock, sleep=clock.sleep)


@pytest.mark.parametrize("at_round", [1, 3])  # found failed at the first sample, or after being active
def test_a_rank_stopped_by_its_prestart_names_the_node_and_the_failed_checks(
        site: Any, tmp_path: Path, at_round: int) -> None:
    _cluster, _doc, nodes, _api = site
    nodes.on_round = _exits("spark-2", at_round)
    nodes.state["spark-2"].journal = JOURNAL
    with pytest.raises(bootwatch.GateFailure) as info:
        _watch(site, tmp_path).run()
    exc = info.value
    assert exc.gate == bootwatch.PRESTART_GATE and exc.node == "spark-2"
    assert exc.detail.startswith("2 checks failed (runtime-configuration, sglang-commit) in the rank's "
                                 "container; the engine was not started")
    assert exc.log_tail.splitlines() == JOURNAL.splitlines()[4:]
    # rank 0's journal says nothing about this node's kit.
    assert exc.head is None and exc.head_tail == ""


def test_a_rank_that_passed_its_prestart_and_exited_later_is_a_unit_exit(site: Any, tmp_path: Path) -> None:
    _cluster, _doc, nodes, _api = site
    nodes.on_round = _exits("spark-1", 3)
    nodes.state["spark-1"].journal = (f"{prestart.BEGIN} kit /opt/sglang4\n"
                                      f"{prestart.PASS} 9 checks passed; exec sglang\n"
                                      "rank[1]: NCCL error: remote process exited\n")
    with pytest.raises(bootwatch.GateFailure) as info:
        _watch(site, tmp_path).run()
    assert info.value.gate == "rank unit exited" and info.value.node == "spark-1"
    assert "NCCL error" in info.value.log_tail


def test_failed_checks_are_read_from_journal_lines_with_their_prefixes() -> None:
    journal = "".join(f"2026-12-05T12:00:0{i}+0000 spark-3 sparkctl-rank[91]: {ln}\n"
                      for i, ln in enumerate(JOURNAL.splitlines()))
    lines = bootwatch.prestart_failures(journal)
    assert lines == JOURNAL.splitlines()[4:]
    assert bootwatch.prestart_summary(lines) == "2 checks failed (runtime-configuration, sglang-commit)"
    assert bootwatch.prestart_failures(f"{prestart.BEGIN} kit /k\n{prestart.PASS} 3 checks passed\n") == []
    assert bootwatch.prestart_failures("") == []
    many = [f"{prestart.FAIL} source /opt/sglang4/b12x/f{i}.py expected {'a' * 64} actual missing"
            for i in range(3)]
    assert bootwatch.prestart_summary(many) == "3 checks failed (source x3)"
