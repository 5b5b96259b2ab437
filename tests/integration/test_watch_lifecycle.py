"""`sparkctl watch` (autostart on) running through `upgrade` and `reset` on the lab: no supervisor
action while either runs, and the group and the healing in the state each command promises after it.

* upgrade: check mode first says what every node would get and installs nothing while the group
  keeps serving. Then a run stopped at spark-2 (an identity field changed there before the run
  reaches it): the nodes one at a time, each installed only after the node before it passed its
  fabric check, spark-3 untouched; while it runs the supervisor only reports healing paused — no
  restart, no autostart although the group is down and the nodes answer; afterwards healing stays
  paused, with the reason, and the group stays down. Put right, a second run changes nothing on the
  nodes already done, installs on spark-3 and ends with stage verification and its gated `up`:
  ready, healing resumed, and the supervisor sees the group serving without touching it.
* reset: while it runs the supervisor does nothing; afterwards healing is paused (nothing to heal)
  and, several intervals later, the supervisor has written nothing back (no rank unit, no
  /etc/sparkctl with the API key). `provision`, `stage all` and the admin's `up` then bring the
  group back and resume healing, with the same supervisor still running.

The supervisor runs as a background process against a copy of the lab inventory (short intervals,
``sparkctl_autostart: true``, a tiny .deb built here with dpkg-deb pinned as the update for `upgrade`,
no reboot in the lab: ``reboot: false``, a choice of the inventory); every
command of this module shares its private state directory, as an admin and their supervisor do.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from support.text import flat

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NODES = ["spark-0", "spark-1", "spark-2", "spark-3"]
UNIT = "sparkctl-rank.service"
PKG = "sparkctl-lab-fw"
INTERVAL_S = 2
SUPERVISOR = {"interval_s": INTERVAL_S, "settle_s": 1, "canary_failures": 2, "max_restarts": 3,
              "window_s": 3600}
# What the supervisor does to the group (every other event only reports).
ACTIONS = {"restart", "autostart", "down", "up", "breaker-open"}


def _said(proc: subprocess.CompletedProcess[str]) -> str:
    text = f"{proc.stdout}\n{proc.stderr}"
    return text if len(text) <= 6000 else f"{text[:3000]}\n[…]\n{text[-3000:]}"


def _deb(where: Path, version: str) -> Path:
    root = where / f"{PKG}_{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {PKG}\nVersion: {version}\nArchitecture: all\nMaintainer: sparkctl lab <lab@localhost>\n"
        "Description: stand-in firmware bundle for the lab's rolling upgrade\n")
    (root / "usr" / "share" / PKG).mkdir(parents=True)
    (root / "usr" / "share" / PKG / "VERSION").write_text(version + "\n")
    out = where / f"{PKG}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)], check=True,
                   capture_output=True)
    return out


class Site:
    """The lab inventory copied with the supervisor's short settings, autostart on and the stand-in
    upgrade pinned; one private state directory for the supervisor and the admin's commands."""

    def __init__(self, lab: Lab, root: Path):
        self.lab = lab
        self.root = root
        self.inventory = root / "lab"
        shutil.copytree(lab.inventory, self.inventory)
        gv = self.inventory / "group_vars" / "all" / "sparkctl.yml"
        doc = yaml.safe_load(gv.read_text())
        doc["sparkctl_supervisor"] = SUPERVISOR
        doc["sparkctl_autostart"] = True
        doc["sparkctl_upgrade"] = {"debs": [str(_deb(root, "1.2"))], "update_cache": False, "reboot": False,
                                   "reboot_timeout_s": 120}
        gv.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.env = {**os.environ, "SPARKCTL_STATE_DIR": str(root / "state")}

    def sparkctl(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "sparkctl", "-i", str(self.inventory), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=self.env,
                              stdin=subprocess.DEVNULL)

    def watch(self) -> subprocess.Popen[str]:
        log = (self.root / "watch.log").open("a")
        argv = [sys.executable, "-m", "sparkctl", "-i", str(self.inventory), "watch", "--autostart"]
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=self.env)

    def supervisor_file(self, name: str) -> Path | None:
        found = sorted((self.root / "state" / "supervisor").glob(f"*/{name}"))
        return found[0] if found else None

    def paused(self) -> dict[str, Any] | None:
        path = self.supervisor_file("paused")
        return json.loads(path.read_text()) if path is not None and path.exists() else None

    def events(self) -> list[dict[str, Any]]:
        path = self.supervisor_file("events.jsonl")
        records = []
        for line in (path.read_text().splitlines() if path is not None else []):
            try:
                records.append(json.loads(line))
            except ValueError:  # the line the supervisor is writing right now
                break
        return records

    def units(self) -> dict[str, str]:
        return {n: self.lab.ssh(n, f"systemctl is-active {UNIT}", check=False).stdout.strip() for n in NODES}


def _installed(lab: Lab, node: str) -> str | None:
    proc = lab.ssh(node, f"dpkg-query -W -f='${{Version}}' {PKG} 2>/dev/null", check=False)
    return proc.stdout.strip() or None


def _last_run(site: Site, verb: str) -> Path:
    """The artifact directory (ansible-runner's) of the site's latest run of ``verb``."""
    runs = sorted((site.root / "state" / "runs").glob(f"*-{verb}"))
    assert runs, f"no {verb} run recorded under {site.root / 'state' / 'runs'}"
    (artifacts,) = (runs[-1] / "artifacts").iterdir()
    return artifacts


def _task_results(artifacts: Path, task: str) -> list[tuple[int, str, bool]]:
    """(counter, host, changed) of one task's ok results, from the run's job events, in order."""
    out = []
    for f in (artifacts / "job_events").glob("*.json"):
        ev = json.loads(f.read_text())
        data = ev.get("event_data") or {}
        if ev.get("event") == "runner_on_ok" and data.get("task") == task:
            out.append((ev["counter"], data["host"], bool((data.get("res") or {}).get("changed"))))
    return sorted(out)


def _at(record: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(record["time"].replace("Z", "+00:00")).timestamp()


def _since_resumed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The supervisor's records after the admin's last "healing resumed" (from `up` or `upgrade`). The
    supervisor may judge the group serving before the admin's verb has returned, so a count of the
    records taken after it returns can already include the one being waited for."""
    resumed = [i for i, r in enumerate(events)
               if r["kind"].startswith("admin-") and r["evidence"].startswith("healing resumed")]
    last = resumed[-1] if resumed else -1
    assert last >= 0, "no admin record says healing resumed"
    return events[last + 1:]


def test_a_serving_record_written_before_the_verb_returned_counts() -> None:
    """The records of a failed README-order run: `up` resumed healing and the supervisor said serving
    0.6 s later, before `up` had returned; counting records after the return missed it for good."""
    events = [
        {"kind": "admin-reset", "evidence": "healing paused until the next `sparkctl up`"},
        {"kind": "admin-up", "evidence": "healing resumed"},
        {"kind": "serving", "evidence": "canary: 8 tokens in 0.14 s"},
    ]
    assert [r["kind"] for r in _since_resumed(events)] == ["serving"]
    assert _since_resumed([*events, {"kind": "admin-upgrade", "evidence": "healing resumed"}]) == []


def _wait_for(site: Site, predicate: Any, timeout: float, what: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        found = site.events()
        if predicate(found):
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; events:\n" +
                                 "\n".join(json.dumps(r) for r in found[-30:]))
        time.sleep(1.0)


def _stop(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def _no_action_between(records: list[dict[str, Any]], start: float, end: float, what: str) -> None:
    acted = [r for r in records if r["kind"] in ACTIONS and start <= _at(r) <= end]
    assert acted == [], f"the supervisor acted while {what} ran: {acted}"


def _supervised_while(site: Site, start: float, end: float) -> list[dict[str, Any]]:
    """The supervisor's own records while a command ran (it kept probing: 'paused' shows it saw),
    from its first 'paused' or 'busy' on: before the command has taken the supervisor's lock (its
    start-up, reading the inventory: seconds on a loaded machine) the group still serves, and a check
    in flight then says so. No action in the whole window is `_no_action_between`'s to hold."""
    seen = [r for r in site.events() if start <= _at(r) <= end and not r["kind"].startswith("admin-")]
    first = next((i for i, r in enumerate(seen) if r["kind"] in ("paused", "busy")), len(seen))
    assert all(r["kind"] == "serving" for r in seen[:first]), seen[:first]
    return seen[first:]


@pytest.fixture(scope="module")
def site(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    proc = lab.run_sparkctl("provision", timeout=1800)
    assert proc.returncode == 0, f"sparkctl provision: {_said(proc)}"
    lab.ensure_staged()
    s = Site(lab, tmp_path_factory.mktemp("watch-lifecycle"))
    for node in NODES:  # the stand-in package on no node yet
        lab.ssh(node, f"dpkg --purge {PKG} >/dev/null 2>&1 || true")
    yield s
    lab.heal()
    for node in NODES:
        lab.ssh(node, f"dpkg --purge {PKG} >/dev/null 2>&1 || true", check=False)


@pytest.fixture
def watcher(site: Site) -> Iterator[subprocess.Popen[str]]:
    up = site.sparkctl("up", "--yes", timeout=900)
    assert up.returncode == 0, _said(up)
    proc = site.watch()
    try:
        _wait_for(site, lambda ev: bool(ev) and ev[-1]["kind"] == "serving", 120, "the watch to see serving")
        yield proc
        assert proc.poll() is None, "the supervisor exited"
    finally:
        _stop(proc)


def test_upgrade_under_a_running_watch_with_autostart(lab: Lab, site: Site,
                                                      watcher: subprocess.Popen[str]) -> None:
    # Check mode: says what every node would get, installs nothing, stops nothing.
    check = site.sparkctl("--json", "upgrade", "--check")
    assert check.returncode == 0, _said(check)
    assert _first_json(check.stdout)["check"] is True
    assert [_installed(lab, n) for n in NODES] == [None] * 4
    assert set(site.units().values()) == {"active"}

    # A first run that stops at spark-2: the group down, healing paused with the reason, no autostart.
    lab.ssh("spark-2", "cp --remove-destination \"$(readlink -f /etc/os-release)\" /etc/os-release && "
                       "sed -i 's/^PRETTY_NAME=\"/PRETTY_NAME=\"held back /' /etc/os-release")
    try:
        start = time.time()
        failed = site.sparkctl("upgrade", "--yes")
        end = time.time()
        assert failed.returncode == 1, _said(failed)
        said = flat(failed.stderr)
        assert "upgrade stopped at spark-2" in said, said
        assert "spark-2 came back with a different identity: os is" in said, said
        assert "nodes left untouched: spark-3" in said, said
        assert "healing paused until the next `sparkctl up`" in " ".join(failed.stdout.split())
        assert [_installed(lab, n) for n in NODES] == ["1.2", "1.2", "1.2", None]  # spark-3 untouched
        # One node at a time: each node's install comes after the node before it passed its fabric check.
        artifacts = _last_run(site, "upgrade")
        installs = _task_results(artifacts, "Install the .deb files")
        fabric = _task_results(artifacts, "Require the fabric of this node to pass")
        assert [h for _, h, _ in installs] == ["spark-0", "spark-1", "spark-2"]
        assert [h for _, h, _ in fabric] == ["spark-0", "spark-1"]
        assert installs[0][0] < fabric[0][0] < installs[1][0] < fabric[1][0] < installs[2][0]
        _no_action_between(site.events(), start, end, "the failed upgrade")
        assert {r["kind"] for r in _supervised_while(site, start, end)} <= {"paused", "busy"}
        pause = site.paused()
        assert pause is not None and "`sparkctl upgrade` failed: upgrade stopped at spark-2" in pause["why"]
        # Every node answers and no rank runs: autostart's very case. Paused, it waits for the admin.
        seen = len(site.events())
        time.sleep(5 * INTERVAL_S)
        assert [r for r in site.events()[seen:] if r["kind"] in ACTIONS] == []
        assert set(site.units().values()) <= {"inactive", "failed"}
        assert site.sparkctl("status", "--json", timeout=120).returncode == 3  # the group stays down
    finally:
        lab.ssh("spark-2", "rm -f /etc/os-release && ln -s ../usr/lib/os-release /etc/os-release")

    # Put right: the second run resumes, ends with the gated up; healing resumed after it, not before.
    start = time.time()
    again = site.sparkctl("upgrade", "--yes")
    end = time.time()
    assert again.returncode == 0, _said(again)
    assert "healing resumed, circuit breaker closed" in " ".join(again.stdout.split())
    assert "every node upgraded and agreeing" in " ".join(again.stdout.split())
    # Nothing moved on the nodes already done; spark-3 got the update, and every node has it.
    installs = _task_results(_last_run(site, "upgrade"), "Install the .deb files")
    assert [h for _, h, changed in installs if changed] == ["spark-3"], installs
    assert [_installed(lab, n) for n in NODES] == ["1.2"] * 4
    _no_action_between(site.events(), start, end, "the upgrade")
    assert {r["kind"] for r in _supervised_while(site, start, end)} <= {"paused", "busy"}
    assert site.paused() is None
    admin = [r for r in site.events() if r["kind"] == "admin-upgrade"]
    assert len(admin) == 2 and admin[-1]["evidence"].startswith("healing resumed"), admin
    # The supervisor judges the group the upgrade left: serving, and it leaves it alone.
    found = _wait_for(site, lambda ev: any(r["kind"] == "serving" for r in _since_resumed(ev)), 60,
                      "the supervisor to see the upgraded group serving")
    assert [r for r in _since_resumed(found) if r["kind"] in ACTIONS] == []
    assert set(site.units().values()) == {"active"}
    status = site.sparkctl("status", "--json", timeout=120)
    assert status.returncode == 0, _said(status)


SPARKCTL_PATHS = [
    "/etc/systemd/system/sparkctl-rank.service", "/etc/sparkctl", "/etc/netplan/40-sparkctl-fabric.yaml",
    "/etc/systemd/system/sparkctl-exporter.service", "/etc/systemd/system/sparkctl-firewall.service",
    "/opt/sparkctl", "/srv/sparkctl/run",
]


def _present(lab: Lab, node: str, paths: list[str]) -> list[str]:
    cmd = " ; ".join(f"test -e {p} && echo {p}" for p in paths) + " ; true"
    return lab.ssh(node, cmd).stdout.split()


def _first_json(text: str) -> dict[str, Any]:
    doc, _ = json.JSONDecoder().raw_decode(text.lstrip())
    return doc


def test_reset_under_a_running_watch_with_autostart(lab: Lab, site: Site,
                                                    watcher: subprocess.Popen[str]) -> None:
    """reset takes off everything sparkctl put on the nodes (units, /etc/sparkctl, netplan, table,
    exporter, run dir) while SSH and the NVMe data stay, and the supervisor puts nothing back;
    `provision` restores it, a second `provision` changes nothing, `sparkctl plan` is the same before
    and after, and `stage all` and the admin's `up` serve again with healing resumed."""
    plan_before = site.sparkctl("plan", "--json").stdout
    data = "find /mnt/nvme/engram-tp4 -type f | sort | xargs sha256sum"
    data_before = lab.ssh("spark-1", data).stdout
    there = _present(lab, "spark-0", SPARKCTL_PATHS)
    assert "/etc/sparkctl" in there and "/etc/netplan/40-sparkctl-fabric.yaml" in there
    refused = site.sparkctl("reset")  # no terminal, no --yes: bad input, nothing touched
    assert refused.returncode == 2, _said(refused)
    assert _present(lab, "spark-0", SPARKCTL_PATHS) == there

    start = time.time()
    reset = site.sparkctl("reset", "--yes", timeout=900)
    end = time.time()
    assert reset.returncode == 0, _said(reset)
    assert "healing paused until the next `sparkctl up`" in " ".join(reset.stdout.split())
    _no_action_between(site.events(), start, end, "reset")
    pause = site.paused()
    assert pause is not None and "`sparkctl reset` removed the ranks" in pause["why"]
    # Several intervals later the supervisor (autostart on, every node answering) has put nothing back.
    seen = len(site.events())
    time.sleep(5 * INTERVAL_S)
    assert [r for r in site.events()[seen:] if r["kind"] in ACTIONS] == []
    for node in NODES:
        assert _present(lab, node, SPARKCTL_PATHS) == [], node
        table = lab.ssh(node, "nft list table inet sparkctl >/dev/null 2>&1 && echo yes || echo no")
        assert table.stdout.strip() == "no", node
        assert lab.ssh(node, "ip -4 -o addr show dev enp1s0f0np0 scope global").stdout.strip() == ""
    # SSH still answers, over a fresh connection, and the NVMe data is intact.
    assert lab.ssh("spark-1", data).stdout == data_before
    assert site.sparkctl("status", "--json", timeout=120).returncode == 3

    # Back to serving by the admin: provision (twice: the second changes nothing), stage, `up` —
    # which resumes healing for the supervisor.
    first = site.sparkctl("provision", "--json")
    assert first.returncode == 0, _said(first)
    second = site.sparkctl("provision", "--json")
    assert second.returncode == 0, _said(second)
    changed = {h: s["changed"] for h, s in _first_json(second.stdout)["hosts"].items()}
    assert set(changed.values()) == {0}, changed
    assert site.sparkctl("plan", "--json").stdout == plan_before
    stage = site.sparkctl("stage", "all")
    assert stage.returncode == 0, _said(stage)
    up = site.sparkctl("up", "--yes", timeout=900)
    assert up.returncode == 0, _said(up)
    assert "healing resumed" in " ".join(up.stdout.split())
    assert site.paused() is None
    _wait_for(site, lambda ev: any(r["kind"] == "serving" for r in _since_resumed(ev)), 60,
              "the supervisor to see the group serving again")
    assert set(site.units().values()) == {"active"}
