"""`sparkctl provision` and `sparkctl check fabric` with the runner faked: which playbook, which
options, which exit code — and nothing contacted on bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.runner import NODES, FakeRunner, Outcome

from sparkctl.ansible import results, runner
from sparkctl.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def provision_events(out: Outcome) -> list[runner.RunnerEvent]:
    """One play, then on every host a task that changed something (or not, as the run's ``changed``)."""
    events = [runner.RunnerEvent(runner.PLAY, task="Provision the Spark nodes")]
    for h in out.hosts:
        events.append(runner.RunnerEvent(runner.TASK, host=h, task="Write the fabric netplan"))
        events.append(runner.RunnerEvent(runner.CHANGED if out.changed else runner.OK, host=h, task="x"))
    return events


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    f = FakeRunner([*NODES, "crs812"], ok=5, duration_s=1.5, events=provision_events)
    monkeypatch.setattr(runner, "execute", f)
    return f


def test_provision_runs_the_provision_playbook(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    res = run_cli("-i", str(example_copy), "provision")
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert plan.playbook == "provision.yml"
    assert Path(plan.inventory) == example_copy
    assert (plan.check, plan.diff, plan.limit, plan.tags) == (False, False, None, ())
    assert plan.extravars == {}  # rendered values come from the vars plugin, never extravars
    assert "provision: 5 hosts ok, 0 changed" in res.out


def test_provision_check_diff_limit_tags(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    res = run_cli("-i", str(example_copy), "provision", "--check", "--diff", "--limit", "spark-1,spark-2",
                  "--tags", "fabric,qos", "--tags", "firewall")
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert (plan.check, plan.diff) == (True, True)
    assert plan.limit == "spark-1,spark-2"
    assert plan.tags == ("fabric", "qos", "firewall")
    assert plan.argv()[-4:] == ["--tags", "fabric,qos,firewall", "--check", "--diff"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--limit", "spark-9"], "spark-9"),
        (["--tags", "fabrik"], "fabrik"),
    ],
)
def test_bad_options_exit_2_before_running(
    run_cli: Any, example_copy: Path, fake: FakeRunner, args: list[str], needle: str
) -> None:
    res = run_cli("-i", str(example_copy), "provision", *args)
    assert res.code == EXIT_USAGE
    assert needle in res.err
    assert fake.plans == []


def test_bad_inventory_exits_2_and_contacts_nothing(
    run_cli: Any, example_copy: Path, fake: FakeRunner, no_network: list[str]
) -> None:
    hosts = example_copy / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    doc["all"]["children"]["sparks"]["hosts"]["spark-2"]["sparkctl_rank"] = 1  # duplicate rank
    hosts.write_text(yaml.safe_dump(doc))
    res = run_cli("-i", str(example_copy), "provision")
    assert res.code == EXIT_USAGE
    assert "rank" in res.err
    assert fake.plans == []


def test_provision_failure_names_the_host(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    fake.failures = [
        runner.Failure("spark-3", "Read the node identity", "Connection timed out", unreachable=True)
    ]
    res = run_cli("-i", str(example_copy), "provision")
    assert res.code == EXIT_FAILED
    flat = " ".join(res.err.replace("│", " ").split())
    assert "provision could not reach spark-3" in flat
    assert ("spark-3 (192.168.7.13:22): unreachable: connection timed out — check that spark-3 is powered on"
            in flat)
    assert "spark-3 did not answer" in flat


def test_provision_json(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    fake.changed = 2
    res = run_cli("-i", str(example_copy), "--json", "provision")
    assert res.code == EXIT_OK, res.err
    doc = json.loads(res.out)
    assert doc["playbook"] == "provision.yml" and doc["ok"] is True
    assert doc["hosts"]["spark-0"]["changed"] == 2
    assert doc["artifact_dir"] == "/tmp/fake-run/artifacts/ansible"


def test_provision_full_asks_every_role_to_run(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    res = run_cli("-i", str(example_copy), "provision", "--full")
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert plan.extravars == {"spark_applied_full": True}


def test_provision_says_which_roles_were_up_to_date_and_why_others_ran(
    run_cli: Any, example_copy: Path, fake: FakeRunner
) -> None:
    fresh = {"run": False, "reasons": []}
    edited = "file /etc/sparkctl/firewall.nft: changed since it was applied"
    fake.reported = {results.APPLIED: {
        h: {"base": fresh, "fabric": fresh,
            "firewall": {"run": True, "reasons": [edited]} if h == "spark-2" else fresh}
        for h in NODES
    }}
    fake.changed = 1
    res = run_cli("-i", str(example_copy), "provision")
    assert res.code == EXIT_OK, res.err
    assert "up to date (skipped after one read per node): 11 of 12 role runs" in res.out
    flat = " ".join(res.out.split())
    assert "firewall on spark-2: file /etc/sparkctl/firewall.nft: changed since it was applied" in flat
    doc = json.loads(run_cli("-i", str(example_copy), "--json", "provision").out)
    assert doc["applied"]["spark-2"]["firewall"]["run"] is True


# --- check fabric ----------------------------------------------------------------------------------


def _probe(node: str, rank: int, *, mtu: int = 9000, failing: set[tuple[str, str, int]] | None = None,
           rdma: bool = False) -> dict[str, Any]:
    ports = []
    for half, netdev in enumerate(["enp1s0f0np0", "enP2p1s0f0np0"]):
        ports.append({
            "netdev": netdev, "present": True, "state": "UP", "carrier": True, "mtu": mtu,
            "addresses": [f"10.77.{half}.{10 + rank}/24"], "speed_mbps": 200000,
            "rdma": rdma, "gid_index": 3 if rdma else None, "gid_error": None if rdma else "no RDMA device",
        })
    pings = []
    for peer_rank, peer in enumerate(NODES):
        if peer == node:
            continue
        for half in (0, 1):
            ok = (node, peer, half) not in (failing or set())
            pings.append({"peer": peer, "index": half, "netdev": ports[half]["netdev"],
                          "src": f"10.77.{half}.{10 + rank}", "dst": f"10.77.{half}.{10 + peer_rank}",
                          "ok": ok, "kind": "ok" if ok else "mtu",
                          "detail": "5/5 replies" if ok else "0/15 replies over 3 rounds of 5, while small "
                          "pings get 2/2: jumbo frames are dropped on the path"})
    return {"ports": ports, "pings": pings, "rdma": rdma}


def test_check_fabric_all_good_reports_skips(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    fake.reported = {results.FABRIC_PROBE: {n: _probe(n, i) for i, n in enumerate(NODES)}}
    res = run_cli("-i", str(example_copy), "check", "fabric")
    assert res.code == EXIT_OK, res.err
    (plan,) = fake.plans
    assert plan.playbook == "check_fabric.yml" and not plan.check
    flat = " ".join(res.out.split())
    assert "all 24 ordered pairs" in flat
    # The checks skipped for one reason, on one line (they were four, each with the same reason).
    assert ("RoCE v2 GID index, ib_write_bw per pair, NCCL all-reduce bus bandwidth, PFC losslessness "
            "(pause/discard counters under load): skipped: no RDMA device") in flat
    assert flat.count("skipped:") == 1


def test_check_fabric_fits_80_columns_one_line_per_port(run_cli: Any, example_copy: Path,
                                                         fake: FakeRunner) -> None:
    """The port names and addresses were cut at 80 columns ("enP2p1s0f0…", "10.77.1.…")."""
    fake.reported = {results.FABRIC_PROBE: {n: _probe(n, i) for i, n in enumerate(NODES)}}
    res = run_cli("-i", str(example_copy), "check", "fabric")
    assert res.code == EXIT_OK, res.err
    lines = res.out.splitlines()
    assert all(len(ln) <= 80 for ln in lines) and not any("…" in ln for ln in lines), lines
    ports = [ln.split() for ln in lines if ln.startswith("✓  spark-")]
    assert len(ports) == 8, lines
    assert ports[1] == ["✓", "spark-0", "enP2p1s0f0np0", "qsfp56-dd-1-1", "UP", "200G", "9000",
                        "10.77.1.10/24", "n/a"], ports
    matrix = [ln.split() for ln in lines if ln.startswith("spark-")]
    assert matrix[0] == ["spark-0", "·", "✓", "✓", "✓", "✓", "✓", "✓"], matrix
    assert "jumbo ping (8972 B, DF) src → dst, one mark per source port" in lines


def test_check_fabric_names_node_port_and_pair(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    # spark-2's half A is behind a switch port at MTU 1500: every jumbo ping to/from it on half A fails.
    failing = {(a, b, 0) for a in NODES for b in NODES if a != b and "spark-2" in (a, b)}
    fake.reported = {
        results.FABRIC_PROBE: {n: _probe(n, i, failing=failing) for i, n in enumerate(NODES)},
    }
    res = run_cli("-i", str(example_copy), "--json", "check", "fabric")
    assert res.code == EXIT_FAILED
    doc = json.loads(res.out)
    assert doc["ok"] is False
    text = "\n".join(doc["problems"])
    pair = "jumbo ping (8972 B, DF) spark-0 enp1s0f0np0 -> spark-2 10.77.0.12"
    assert f"MTU broken: {pair}: 0/15 replies" in text
    assert "likely culprit: spark-2 enp1s0f0np0 (switch port qsfp56-dd-3-1)" in text
    assert len([p for p in doc["pairs"] if not p["ok"]]) == 6
    assert "likely culprit: spark-2 enp1s0f0np0" in res.err


@pytest.mark.parametrize(("allowed", "code"), [(5.0, EXIT_FAILED), (25.0, EXIT_OK)])
def test_a_lossy_pair_fails_only_above_the_allowed_loss(
    run_cli: Any, example_copy: Path, fake: FakeRunner, allowed: float, code: int
) -> None:
    group_vars = example_copy / "group_vars" / "all" / "sparkctl.yml"
    text = group_vars.read_text()
    group_vars.write_text(text.replace("  max_loss_pct: 5\n", f"  max_loss_pct: {allowed}\n", 1))
    probes = {n: _probe(n, i) for i, n in enumerate(NODES)}
    ping = probes["spark-1"]["pings"][0]
    ping.update(ok=False, kind="lossy", loss_pct=20.0, detail="12/15 replies over 3 rounds of 5 (20% lost)")
    fake.reported = {results.FABRIC_PROBE: probes}
    res = run_cli("-i", str(example_copy), "--json", "check", "fabric")
    assert res.code == code, res.err
    doc = json.loads(res.out)
    lossy = [p for p in doc["problems"] if p.startswith("lossy:")]
    assert bool(lossy) is (code == EXIT_FAILED)
    if lossy:
        assert "12/15 replies" in lossy[0] and "above the 5% sparkctl_fabric.max_loss_pct allows" in lossy[0]


def test_check_fabric_reports_unreachable_node(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    fake.reported = {results.FABRIC_PROBE: {n: _probe(n, i) for i, n in enumerate(NODES) if n != "spark-3"}}
    fake.failures = [runner.Failure("spark-3", "Probe the fabric", "Connection timed out", unreachable=True)]
    res = run_cli("-i", str(example_copy), "check", "fabric")
    assert res.code == EXIT_FAILED
    out = " ".join(res.out.split())
    assert ("spark-3 (192.168.7.13:22): unreachable: connection timed out — check that spark-3 is powered on"
            in out) and "(its fabric was not checked)" in out
    # no conclusion drawn from the node that did not answer: its RDMA devices are not "absent on
    # every node", and the pings to it are not the fabric's fault
    assert "absent on every node" not in out and "absent on spark-0, spark-1, spark-2" in out
    assert "likely culprit" not in out and "jumbo pings to spark-3: skipped: it did not answer" in out
    assert "fix the port or switch" not in " ".join(res.err.replace("│", " ").split())


def test_check_fabric_gid_mismatch_on_hardware(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    probes = {n: _probe(n, i, rdma=True) for i, n in enumerate(NODES)}
    probes["spark-1"]["ports"][1]["gid_index"] = 5
    fake.reported = {results.FABRIC_PROBE: probes}
    res = run_cli("-i", str(example_copy), "--json", "check", "fabric")
    assert res.code == EXIT_FAILED
    doc = json.loads(res.out)
    assert any("GID index differs across nodes on half 1: [3, 5]" in p for p in doc["problems"])


def _rdma(
    node: str, *, half_bw: float = 97.9, discards: int = 0, busbw: float | None = 21.5
) -> dict[str, Any]:
    before = {"enp1s0f0np0": {"rx_prio3_pause": 10, "rx_discards_phy": 0},
              "enP2p1s0f0np0": {"rx_prio3_pause": 10, "rx_discards_phy": 0}}
    after = {"enp1s0f0np0": {"rx_prio3_pause": 500, "rx_discards_phy": discards},
             "enP2p1s0f0np0": {"rx_prio3_pause": 400, "rx_discards_phy": 0}}
    peers = [p for p in NODES if p != node][:1]
    msg: dict[str, Any] = {
        "ib_write_bw": [
            {"peer": p, "halves": [f"0 enp1s0f0np0 {half_bw}", "1 enP2p1s0f0np0 98.1"]} for p in peers
        ],
        "counters_before": before, "counters_after": after, "nccl": {},
    }
    if node == "spark-0" and busbw is not None:
        msg["nccl"] = {"rc": 0, "out": {"busbw_gbps": busbw}, "err": []}
    return msg


def _hw(fake: FakeRunner, **kw: Any) -> None:
    fake.reported = {
        results.FABRIC_PROBE: {n: _probe(n, i, rdma=True) for i, n in enumerate(NODES)},
        results.FABRIC_RDMA: {n: _rdma(n, **kw) for n in NODES},
    }


def test_check_fabric_hardware_pass(run_cli: Any, example_copy: Path, fake: FakeRunner) -> None:
    _hw(fake)
    res = run_cli("-i", str(example_copy), "--json", "check", "fabric")
    assert res.code == EXIT_OK, res.out
    doc = json.loads(res.out)
    assert any("lossless under load: no discards" in p for p in doc["passed"])
    assert any("NCCL all-reduce: ok: 21.5 GB/s bus bandwidth" in p for p in doc["passed"])
    assert doc["skipped"] == []


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"busbw": 3.1}, "misconfigured"),
        ({"discards": 42}, "not lossless under load: spark-0 enp1s0f0np0 (switch port qsfp56-dd-1-1) "
                           "rx_discards_phy +42"),
        ({"half_bw": 13.0}, "ib_write_bw spark-0 enp1s0f0np0 (switch port qsfp56-dd-1-1) -> spark-1: "
                            "13.0 Gb/s"),
    ],
)
def test_check_fabric_hardware_problems(
    run_cli: Any, example_copy: Path, fake: FakeRunner, kw: dict[str, Any], needle: str
) -> None:
    _hw(fake, **kw)
    res = run_cli("-i", str(example_copy), "--json", "check", "fabric")
    assert res.code == EXIT_FAILED
    assert any(needle in p for p in json.loads(res.out)["problems"]), res.out


# --- the fast path: nothing due anywhere, no playbook ------------------------------------------------


class _Fleet:
    """Answers the fast path's check round: every role up to date, except ``due`` ({node: role});
    the Linux switch's ports at ``mtu``."""

    def __init__(self, cluster: Any, due: dict[str, str] | None = None) -> None:
        from sparkctl.serve import provfast

        self.ports = provfast.switch_ports(cluster)
        self.mtu = int(cluster.switch.mtu)
        self.due = due or {}
        self.rounds: list[list[str]] = []

    def run(self, scripts: Any, timeout: float = 10.0, only: Any = None) -> dict[str, Any]:
        from sparkctl.ssh.fleet import HostResult

        self.rounds.append(sorted(scripts))
        out = {}
        for name in only:
            if self.due.get(name) == "dark":
                out[name] = HostResult(name, error="timed out")
                continue
            if name.startswith("spark-"):
                due = self.due.get(name) == "firewall"
                why = ["file /etc/sparkctl/firewall.nft: changed since it was applied"] if due else []
                roles = {"firewall": {"run": due, "reasons": why}}
                doc: dict[str, Any] = {"mode": "provcheck", "roles": roles}
            else:
                doc = {"mode": "provcheck", "ports": dict.fromkeys(self.ports, self.mtu)}
            out[name] = HostResult(name, 0, json.dumps(doc) + "\n")
        return out

    def close(self) -> None: ...


@pytest.fixture
def linux_site(example_copy: Path) -> Path:
    hosts = example_copy / "hosts.yml"
    text = hosts.read_text()
    hosts.write_text(text.replace("sparkctl_switch_type: routeros", "sparkctl_switch_type: linux"))
    return example_copy


def _specs() -> dict[str, Any]:
    role = {"inputs": "d1", "state": {"files": ["/etc/sparkctl/firewall.nft"]}, "trees": ["spark_firewall"]}
    return {h: {"path": "/var/lib/sparkctl/applied.json", "roles": {"firewall": role}} for h in NODES}


def test_a_no_op_provision_after_a_whole_run_needs_no_playbook(
    run_cli: Any, linux_site: Path, fake: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkctl.model import load_inventory
    from sparkctl.serve import provfast

    fleet = _Fleet(load_inventory(linux_site))
    monkeypatch.setattr(provfast, "fleet_for", lambda cluster: fleet)
    first = run_cli("-i", str(linux_site), "provision")  # no record yet: the playbook, nothing contacted
    assert first.code == EXIT_OK and len(fake.plans) == 1 and fleet.rounds == []
    fake.reported = {results.APPLIED_SPECS: _specs()}
    assert run_cli("-i", str(linux_site), "provision").code == EXIT_OK  # a whole run: its decision kept
    assert len(fake.plans) == 2
    res = run_cli("-i", str(linux_site), "--json", "provision")
    assert res.code == EXIT_OK, res.err
    assert len(fake.plans) == 2, "a no-op provision ran the playbook"
    assert fleet.rounds == [["crs812", *NODES]]
    doc = json.loads(res.out)
    assert doc["path"]["path"] == "fast" and doc["playbook"] is None and doc["ok"] is True
    assert set(doc["hosts"]) == {*NODES, "crs812"} and all(h["changed"] == 0 for h in doc["hosts"].values())
    assert doc["applied"]["spark-1"] == {"firewall": {"run": False, "reasons": []}}
    human = run_cli("-i", str(linux_site), "provision")
    assert "provision: 4 nodes and crs812 up to date, 0 changed" in human.out and len(fake.plans) == 2


def test_a_due_role_runs_the_playbook_and_options_skip_the_fast_path(
    run_cli: Any, linux_site: Path, fake: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkctl.model import load_inventory
    from sparkctl.serve import provfast

    fleet = _Fleet(load_inventory(linux_site), due={"spark-2": "firewall"})
    monkeypatch.setattr(provfast, "fleet_for", lambda cluster: fleet)
    fake.reported = {results.APPLIED_SPECS: _specs()}
    assert run_cli("-i", str(linux_site), "provision", "--limit", "spark-1").code == EXIT_OK
    assert provfast.load(load_inventory(linux_site)) is None, "a --limit run is no whole run"
    assert run_cli("-i", str(linux_site), "provision").code == EXIT_OK
    res = run_cli("-i", str(linux_site), "provision")
    assert res.code == EXIT_OK and len(fake.plans) == 3
    flat = " ".join(res.out.split())
    assert "firewall on spark-2: file /etc/sparkctl/firewall.nft: changed since it was applied" in flat
    for opts in (["--check"], ["--diff"], ["--full"], ["--tags", "qos"], ["--limit", "spark-2"]):
        rounds = len(fleet.rounds)
        assert run_cli("-i", str(linux_site), "provision", *opts).code == EXIT_OK
        assert len(fleet.rounds) == rounds, f"{opts} took the fast path's round"


def test_a_node_that_does_not_answer_the_round_is_left_to_the_playbook_to_name(
    run_cli: Any, linux_site: Path, fake: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkctl.model import load_inventory
    from sparkctl.serve import provfast

    fleet = _Fleet(load_inventory(linux_site), due={"spark-3": "dark"})
    monkeypatch.setattr(provfast, "fleet_for", lambda cluster: fleet)
    fake.reported = {results.APPLIED_SPECS: _specs()}
    assert run_cli("-i", str(linux_site), "provision").code == EXIT_OK
    res = run_cli("-i", str(linux_site), "provision")
    assert res.code == EXIT_OK and len(fake.plans) == 2 and len(fleet.rounds) == 1
    assert "spark-3: unreachable" not in res.out  # the playbook's failure line names it, once
