"""`sparkctl watch` on the lab: a killed rank process on spark-2 is detected and the whole group is
restarted in order (down, then the gated up) until the circuit breaker opens; with autostart the
group comes back by itself after all four nodes were powered off and on again.

The supervisor runs as a background process against a copy of the lab inventory with short
intervals, and keeps its state (events, breaker, pause) in the test's own state directory.
Set SPARKCTL_WATCH_TIMINGS=FILE to get the measured kill → ready times as JSON.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]
UNIT = "sparkctl-rank.service"
MAX_RESTARTS = 2
SUPERVISOR = {"interval_s": 2, "settle_s": 1, "canary_failures": 2, "max_restarts": MAX_RESTARTS,
              "window_s": 3600}


def _ok(proc: Any, what: str) -> None:
    tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{what} exited {proc.returncode}\n{tail}"


class Site:
    """The lab inventory copied with the supervisor's short settings, and a private state directory."""

    def __init__(self, lab: Lab, root: Path):
        self.lab = lab
        self.inventory = root / "lab"
        shutil.copytree(lab.inventory, self.inventory)
        gv = self.inventory / "group_vars" / "all" / "sparkctl.yml"
        doc = yaml.safe_load(gv.read_text())
        doc["sparkctl_supervisor"] = SUPERVISOR
        gv.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.env = {**os.environ, "SPARKCTL_STATE_DIR": str(root / "state")}
        self.root = root

    def sparkctl(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "sparkctl", "-i", str(self.inventory), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=self.env)

    def events(self) -> list[dict[str, Any]]:
        res = self.sparkctl("events", "--json", "-n", "1000", timeout=60)
        _ok(res, "events")
        return [json.loads(line) for line in res.stdout.splitlines()]

    def watch(self, *args: str) -> subprocess.Popen[str]:
        log = (self.root / f"watch{'-'.join(args)}.log").open("w")
        argv = [sys.executable, "-m", "sparkctl", "-i", str(self.inventory), "watch", *args]
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=self.env)

    def units(self) -> dict[str, str]:
        return {n: self.lab.ssh(n, f"systemctl is-active {UNIT}", check=False).stdout.strip() for n in NODES}

    def kill_rank(self, node: str) -> float:
        """SIGKILL the rank's own process (the simulator in its container), as a crash would."""
        # The lab image's `sglang` is the container's first process (the docker client's argv has
        # the image name between --entrypoint sglang and serve, so it never matches).
        self.lab.ssh(node, "pkill -9 -f '^/usr/bin/python3 /usr/local/bin/sglang serve'")
        return time.time()


def _at(record: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(record["time"].replace("Z", "+00:00")).timestamp()


def _logged(site: Site) -> list[dict[str, Any]]:
    """The supervisor's event log read straight from its file: polled every second, where a
    `sparkctl events` process a second would take half of a 2-core machine from the restarts it
    waits for. A wait ends when `sparkctl events` itself shows it too, and returns what it shows."""
    records: list[dict[str, Any]] = []
    for log in sorted((site.root / "state" / "supervisor").glob("*/events.jsonl")):
        for line in log.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:  # the line the supervisor is writing right now
                break
    return records[-1000:]


def _wait_for(site: Site, predicate: Any, timeout: float, what: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        if predicate(_logged(site)):
            found = site.events()
            if predicate(found):
                return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; events:\n" +
                                 "\n".join(json.dumps(r) for r in site.events()[-30:]))
        time.sleep(1.0)


def _stop(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


@pytest.fixture(scope="module")
def site(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    lab.prepare_serving()
    s = Site(lab, tmp_path_factory.mktemp("watch"))
    yield s
    lab.heal()
    s.sparkctl("down")


def test_a_killed_rank_is_healed_in_order_until_the_breaker_opens(site: Site) -> None:
    _ok(site.sparkctl("up", "--yes"), "up")
    watcher = site.watch()
    timings: list[float] = []
    try:
        _wait_for(site, lambda ev: any(r["kind"] == "serving" for r in ev), 60, "the watch to see serving")
        for i in range(MAX_RESTARTS):
            seen = len(site.events())
            killed = site.kill_rank("spark-2")
            found = _wait_for(site, lambda ev, seen=seen: any(r["kind"] == "up" for r in ev[seen:]), 300,
                              f"restart {i + 1}")
            new = found[seen:]
            kinds = [r["kind"] for r in new]
            detect = next(r for r in new if r["action"] in ("restart", "stop"))
            assert detect["kind"] in ("unit-exited", "canary", "dead-rank"), new
            order = [kinds.index(k) for k in (detect["kind"], "restart", "down", "up")]
            assert order == sorted(order), kinds
            down = next(r for r in new if r["kind"] == "down")
            up = next(r for r in new if r["kind"] == "up")
            assert down["evidence"].startswith("all 4 ranks stopped"), down
            assert up["evidence"].startswith("ready"), up
            assert _at(detect) <= _at(down) <= _at(up)
            assert up["seconds"] > 0 and down["seconds"] >= 0
            status = site.sparkctl("status", "--json")
            _ok(status, f"status after restart {i + 1}")
            timings.append(round(_at(up) - killed, 2))
            assert set(site.units().values()) == {"active"}

        # One more: the breaker opens, the group is stopped and stays down, the foreground watch exits 3.
        seen = len(site.events())
        site.kill_rank("spark-2")
        found = _wait_for(site, lambda ev, seen=seen: any(r["kind"] == "breaker-open" for r in ev[seen:]),
                          120, "the breaker to open")
        assert watcher.wait(120) == 3
        kinds = [r["kind"] for r in found[seen:]]
        assert "restart" not in kinds and "up" not in kinds
        assert set(site.units().values()) <= {"inactive", "failed"}
        status = site.sparkctl("status", "--json")
        assert status.returncode == 3, status.stdout + status.stderr
        reasons = json.loads(status.stdout)["reasons"]
        assert reasons[0].startswith("supervisor: circuit breaker open since"), reasons
        assert f"{MAX_RESTARTS} restarts within 3600 s" in reasons[0]
    finally:
        _stop(watcher)
    median = statistics.median(timings)
    sys.stderr.write(f"\nkill → ready again (s): {timings}, median {median}\n")
    if os.environ.get("SPARKCTL_WATCH_TIMINGS"):
        Path(os.environ["SPARKCTL_WATCH_TIMINGS"]).write_text(json.dumps({"kill_to_ready_s": timings,
                                                                          "median_s": median}) + "\n")
    # A clean `up` by the admin closes the breaker for the next test.
    _ok(site.sparkctl("up", "--yes"), "up after the breaker")
    _ok(site.sparkctl("status"), "status after the admin's up")
    assert any(r["kind"] == "admin-up" for r in site.events()[-3:])


def test_autostart_brings_the_group_back_after_all_four_nodes_were_off(site: Site) -> None:
    _ok(site.sparkctl("up", "--yes"), "up")
    watcher = site.watch("--autostart")
    try:
        _wait_for(site, lambda ev: ev and ev[-1]["kind"] in ("serving",), 60, "the supervisor to see serving")
        seen = len(site.events())
        for node in NODES:
            site.lab.kill(node)
        off = time.time()
        _wait_for(site, lambda ev: any(r["kind"] in ("unreachable", "suspect", "dead-rank")
                                       for r in ev[seen:]), 60, "the supervisor to notice")
        for node in NODES:
            site.lab.start(node)
        found = _wait_for(site, lambda ev: any(r["kind"] == "up" for r in ev[seen:]), 420,
                          "autostart to bring the group up")
        new = found[seen:]
        kinds = [r["kind"] for r in new]
        assert "autostart" in kinds and kinds.index("autostart") < kinds.index("up"), kinds
        up = next(r for r in new if r["kind"] == "up")
        assert up["evidence"].startswith("ready"), new
        _ok(site.sparkctl("status"), "status after autostart")
        sys.stderr.write(f"\npower off → serving again by autostart: {_at(up) - off:.1f} s\n")
        assert watcher.poll() is None  # still supervising
    finally:
        _stop(watcher)
        site.lab.heal()
