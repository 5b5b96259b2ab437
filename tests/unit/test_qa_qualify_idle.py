"""qualify measures an idle server only, as bench's suites do (R4's repeat client): refused when requests
run or wait before the first check, failed when the server is busy after the last; the identity of
``/server_info`` checked when the boot watch's comparison is given; `up`'s qualify gate right after
readiness finds the server idle and passes."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.sim_rank import API_KEY, MODEL, SimRank

from sparkctl.qa import idle, qualify
from sparkctl.qa.endpoint import discover
from sparkctl.qa.onup import qualify_on_up

# Another client's request must be seen running within seconds, and the checks race it: starved
# beside the lab tests that request did not start in time. `make test` runs these first, alone.
pytestmark = pytest.mark.timing


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimRank]:
    rank = SimRank(tmp_path)
    yield rank
    rank.kill()  # another client's request may still run: nothing to drain for


def _cluster(sim: SimRank) -> Any:
    """What qualify reads of a Cluster: the head's address, the API port, the key, the profile (lab:
    it qualifies on `up`), its serving groups (none: a site of one group)."""
    from sparkctl.profiles import load_profile

    return types.SimpleNamespace(
        head=types.SimpleNamespace(mgmt_ip="127.0.0.1"),
        ports=types.SimpleNamespace(api=sim.port),
        secrets={"api_key": types.SimpleNamespace(resolve=lambda: API_KEY)},
        profile=load_profile("lab"),
        groups=[],
    )


def _someone_else(sim: SimRank, tokens: int = 4000) -> threading.Thread:
    """Another client's long request (seconds at the simulator's fast rate), once the server counts it."""
    body = {"model": MODEL, "max_tokens": tokens, "messages": [{"role": "user", "content": "Write."}],
            "ignore_eos": True}

    def send() -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(f"{sim.root}/v1/chat/completions", json=body, timeout=60,
                       headers={"Authorization": f"Bearer {API_KEY}"})

    other = threading.Thread(target=send, daemon=True)
    other.start()
    endpoint = discover(sim.root, api_key=API_KEY)
    deadline = time.monotonic() + 5
    while idle.read_load(endpoint).idle and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not idle.read_load(endpoint).idle, "the other client's request did not start"
    return other


def test_a_busy_server_is_refused_before_any_check(sim: SimRank, tmp_path: Path) -> None:
    sim.start(SPARKCTL_SIM_TOKEN_RATE="20")
    _someone_else(sim, 60)  # 3 s at 20 tok/s
    before = sim.generated_tokens()
    results = tmp_path / "results"
    with pytest.raises(idle.BusyError) as err:
        qualify.run_qualify(_cluster(sim), "quick", results)
    assert err.value.message == ("rank 0 is busy before the qualify suite: 1 running, 0 waiting "
                                 "(GET /v1/loads); qualify measures an idle server only")
    assert "then run qualify again" in (err.value.hint or "") and err.value.exit_code == 1
    assert sim.generated_tokens() - before < 100  # no check was sent: only the other request decoded
    assert list(results.iterdir()) == []  # nothing measured, nothing kept


def test_an_idle_server_is_qualified_and_the_checks_recorded(sim: SimRank, tmp_path: Path) -> None:
    sim.start()
    report = qualify.run_qualify(_cluster(sim), "quick", tmp_path, server_check=lambda info: [])
    assert report.passed and report.busy_after is None, report.failed
    assert [(r["when"], r["running"], r["waiting"], r["source"]) for r in report.idle] == [
        ("before the qualify suite", 0, 0, "/v1/loads"), ("after the qualify suite", 0, 0, "/v1/loads")]
    assert report.identity_checked is not None and report.identity_checked["max_running_requests"] == 8
    on_disk = json.loads((report.results_dir / "report.json").read_text())
    assert on_disk["idle"] == report.idle and on_disk["identity_checked"] == report.identity_checked


def test_a_server_that_is_not_the_profiles_is_refused_naming_the_field(sim: SimRank, tmp_path: Path) -> None:
    sim.start()

    def check(info: Any) -> list[str]:
        return [f"max_running_requests={info.get('max_running_requests')!r}, rendered 16"]

    with pytest.raises(idle.BusyError, match="max_running_requests=8, rendered 16") as err:
        qualify.run_qualify(_cluster(sim), "quick", tmp_path / "results", server_check=check)
    assert "then qualify" in (err.value.hint or "")
    assert list((tmp_path / "results").iterdir()) == []


def test_a_server_busy_after_the_suite_fails_the_run(sim: SimRank, tmp_path: Path) -> None:
    sim.start()

    def progress(name: str, result: qualify.CheckResult | None) -> None:
        if result is not None and name == qualify.SUITES["quick"][-1]:
            _someone_else(sim)  # arrives as the last check ends

    report = qualify.run_qualify(_cluster(sim), "quick", tmp_path, on_progress=progress)
    assert all(c.passed for c in report.checks)  # every answer was right, yet the run is not clean
    assert not report.passed and report.failed == [qualify.IDLE_AFTER]
    assert report.busy_after == ("rank 0 was not idle after the qualify suite: 1 running, 0 waiting "
                                 "(GET /v1/loads) (other requests shared the suite)")
    assert json.loads((report.results_dir / "report.json").read_text())["busy_after"] == report.busy_after


def test_the_qualify_gate_of_up_passes_on_the_server_just_ready(sim: SimRank, tmp_path: Path) -> None:
    sim.start()
    gate = qualify_on_up(_cluster(sim), tmp_path)
    assert gate is not None
    assert gate() == (True, "passed")
    _someone_else(sim)
    ok, detail = gate()
    assert not ok and detail.startswith("rank 0 is busy before the qualify suite: 1 running")


def test_the_qualify_gate_of_up_says_why_a_server_busy_after_the_suite_failed(
    sim: SimRank, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim.start()
    after = idle.after_suite

    def busy_after(endpoint: Any, when: str) -> tuple[dict[str, Any], str | None]:
        _someone_else(sim)  # arrives as the last check ends
        return after(endpoint, when)

    monkeypatch.setattr(idle, "after_suite", busy_after)
    gate = qualify_on_up(_cluster(sim), tmp_path)
    assert gate is not None
    ok, detail = gate()
    assert not ok
    assert detail.startswith("failed: idle-after (rank 0 was not idle after the qualify suite: 1 running")


def test_cli_qualify_refuses_a_busy_server_with_one_json_error(
    sim: SimRank, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Callable[..., Any]
) -> None:
    from support import qa_fakes

    from sparkctl.cli import qa as cli_qa

    sim.start(SPARKCTL_SIM_TOKEN_RATE="20")
    monkeypatch.setattr(cli_qa, "_load", lambda ctx: _cluster(sim))
    qa_fakes.use(monkeypatch, qa_fakes.qa_tools())
    _someone_else(sim, 60)
    res = run_cli("qualify", "--json", "--suite", "quick", "--results", str(tmp_path / "results"))
    assert res.code == 1, res.out + res.err
    error = json.loads(res.out)["error"]
    assert error["message"].startswith("rank 0 is busy before the qualify suite: 1 running, 0 waiting")
    assert "then run qualify again" in error["hint"]
    assert not list((tmp_path / "results").glob("qualify-*"))  # nothing measured, nothing kept
