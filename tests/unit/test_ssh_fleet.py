"""sparkctl.ssh against real (in-process) SSH servers: ssh_config, ProxyJump, host-key verification,
unreachable nodes, timeouts, concurrency and connection reuse."""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fabric
import paramiko
import pytest
from support.sshd_fake import FakeSshd

from sparkctl.model.sshconfig import resolve_port
from sparkctl.ssh.fleet import (
    AUTH_TIMEOUT_S,
    BANNER_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    Fleet,
    Target,
    known_hosts_from_args,
    parse_sections,
    run_all,
    ssh_options_from_args,
    targets_for,
)

# The command timeout of the tests that check what a run returns, not how long it takes: these run
# beside the lab tests on a loaded machine, where a 5 s budget once ran out before `echo` answered.
# The tests of the timeout itself keep their short ones; the timed test is marked `timing`.
RUN_S = 60


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    server = FakeSshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.close()


@pytest.fixture(scope="module")
def bastion(tmp_path_factory: pytest.TempPathFactory):
    server = FakeSshd(tmp_path_factory.mktemp("bastion"))
    yield server
    server.close()


def _target(sshd: FakeSshd, name: str, **kw) -> Target:
    base = dict(name=name, address="127.0.0.1", user="tester", port=sshd.port,
                key_files=(sshd.key_file,), known_hosts=sshd.known_hosts, ssh_config=())
    base.update(kw)
    return Target(**base)


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_fanout_reports_every_host_including_unreachable(sshd: FakeSshd) -> None:
    targets = [_target(sshd, "a"), _target(sshd, "b"), _target(sshd, "c", port=_closed_port())]
    script = "echo hello; echo oops >&2; exit 3\n"
    results = run_all(targets, script, timeout=RUN_S)
    assert set(results) == {"a", "b", "c"}
    for name in ("a", "b"):
        r = results[name]
        assert r.reachable and r.rc == 3 and not r.ok
        assert r.stdout == "hello\n" and r.stderr == "oops\n"
    assert not results["c"].reachable
    assert "connection refused" in (results["c"].error or "")


@pytest.mark.timing
def test_four_hosts_run_at_once(sshd: FakeSshd) -> None:
    targets = [_target(sshd, f"n{i}") for i in range(4)]
    with Fleet(targets) as fleet:
        fleet.run("true\n", timeout=5)  # connect first: time the commands alone
        t0 = time.monotonic()
        results = fleet.run("sleep 0.6; echo done\n", timeout=5)
        elapsed = time.monotonic() - t0
    assert all(r.ok and r.stdout == "done\n" for r in results.values())
    assert elapsed < 1.8, f"4 x 0.6 s took {elapsed:.2f} s: not in parallel"


# Beside the lab tests a starved machine once brought back node b's answer empty: it runs with the
# timing tests, alone first, and a failure now says what came back (rc, stderr, error) for each node.
@pytest.mark.timing
def test_per_host_scripts(sshd: FakeSshd) -> None:
    targets = [_target(sshd, "a"), _target(sshd, "b")]
    results = run_all(targets, lambda t: f"echo {t.name}-{t.rank}\n", timeout=RUN_S)
    assert results["a"].stdout.strip() == "a-None", results
    results = run_all(targets, {"a": "echo one\n", "b": "echo two\n"}, timeout=RUN_S)
    assert (results["a"].stdout, results["b"].stdout) == ("one\n", "two\n"), results


def test_script_goes_on_stdin_whole(sshd: FakeSshd) -> None:
    body = "x" * 50000
    results = run_all([_target(sshd, "a")], f"cat <<'EOF' | wc -c\n{body}\nEOF\n", timeout=RUN_S)
    assert results["a"].ok and results["a"].stdout.strip() == str(len(body) + 1)


def test_ssh_config_alias_gives_hostname_port_user(sshd: FakeSshd, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host node-alias\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User tester\n"
                   f"  IdentityFile {sshd.key_file}\n")
    target = Target("a", "node-alias", known_hosts=sshd.known_hosts, ssh_config=(cfg,))
    with Fleet([target]) as fleet:
        conn = fleet.connection(target)
        assert (conn.host, conn.port, conn.user) == ("127.0.0.1", sshd.port, "tester")
        res = fleet.run("echo via-alias\n", timeout=RUN_S)["a"]
    assert res.ok and res.stdout == "via-alias\n"


def test_proxy_jump_goes_through_the_jump_host(sshd: FakeSshd, bastion: FakeSshd, tmp_path: Path) -> None:
    # The bastion's key is pinned in the bastion's own known_hosts (as ssh_config says), the
    # node's in the inventory's pinned file.
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host jumpbox\n  HostName 127.0.0.1\n  Port {bastion.port}\n  User hopper\n"
        f"  IdentityFile {bastion.key_file}\n  UserKnownHostsFile {bastion.known_hosts}\n"
        "Host spark-*\n  ProxyJump jumpbox\n"
    )
    nodes = [SimpleNamespace(name="spark-0", rank=0, mgmt_ip="127.0.0.1", ssh_port=sshd.port,
                             hostvars={"ansible_port": sshd.port,
                                       "ansible_ssh_private_key_file": str(sshd.key_file)})]
    cluster = SimpleNamespace(inventory_dir=tmp_path, nodes=nodes, ssh_user="root",
                              known_hosts=sshd.known_hosts)
    (target,) = targets_for(cluster)
    assert target.proxy_jump == "jumpbox" and target.ssh_config[0] == cfg
    before, hops = sshd.accepted, len(bastion.forwarded)
    with Fleet([target]) as fleet:
        gateway = fleet.connection(target).gateway
        assert (gateway.host, gateway.port, gateway.user) == ("127.0.0.1", bastion.port, "hopper")
        for _ in range(2):
            res = fleet.run("echo behind-the-bastion\n", timeout=RUN_S)["spark-0"]
            assert res.ok and res.stdout == "behind-the-bastion\n", res
    assert bastion.forwarded[hops:] == [("127.0.0.1", sshd.port)]  # one tunnel, reused
    assert sshd.accepted - before == 1


def test_unknown_jump_host_key_is_refused(sshd: FakeSshd, bastion: FakeSshd, tmp_path: Path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host jumpbox\n  HostName 127.0.0.1\n  Port {bastion.port}\n  User hopper\n"
                   f"  IdentityFile {bastion.key_file}\n  UserKnownHostsFile {empty}\n"
                   "  StrictHostKeyChecking no\n")
    target = _target(sshd, "a", proxy_jump="jumpbox", ssh_config=(cfg,))
    res = run_all([target], "echo should-not-run\n", timeout=RUN_S)["a"]
    assert not res.reachable and "jump host" in (res.error or "") and "refused" in (res.error or "")


def test_unknown_host_key_is_refused(sshd: FakeSshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    results = run_all([_target(sshd, "a", known_hosts=empty)], "echo should-not-run\n", timeout=RUN_S)
    assert not results["a"].reachable
    assert "not in" in (results["a"].error or "") and "refused" in (results["a"].error or "")


def test_ssh_config_cannot_switch_host_key_checking_off(sshd: FakeSshd, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n")
    target = Target("a", "127.0.0.1", user="tester", port=sshd.port, key_files=(sshd.key_file,),
                    ssh_config=(cfg,))
    res = run_all([target], "echo should-not-run\n", timeout=RUN_S)["a"]
    assert not res.reachable and "refused" in (res.error or "")


def test_changed_host_key_is_refused(sshd: FakeSshd, tmp_path: Path) -> None:
    other = paramiko.RSAKey.generate(1024)
    bad = tmp_path / "known_hosts"
    bad.write_text(f"[127.0.0.1]:{sshd.port} ssh-rsa {other.get_base64()}\n")
    results = run_all([_target(sshd, "a", known_hosts=bad)], "echo should-not-run\n", timeout=RUN_S)
    assert "does not match" in (results["a"].error or "")


def test_missing_known_hosts_file_is_an_error(sshd: FakeSshd, tmp_path: Path) -> None:
    results = run_all([_target(sshd, "a", known_hosts=tmp_path / "nope")], "true\n", timeout=RUN_S)
    assert "does not exist" in (results["a"].error or "")


def test_wrong_client_key_is_an_authentication_failure(sshd: FakeSshd, bastion: FakeSshd) -> None:
    res = run_all([_target(sshd, "a", key_files=(bastion.key_file,))], "true\n", timeout=RUN_S)["a"]
    assert "authentication failed for tester@127.0.0.1" in (res.error or "")


def test_command_timeout_is_reported(sshd: FakeSshd) -> None:
    results = run_all([_target(sshd, "a")], "echo started; sleep 3\n", timeout=0.5)
    assert results["a"].error is not None and "timed out" in results["a"].error


def test_stdout_stderr_and_the_exit_status_come_back_apart(sshd: FakeSshd) -> None:
    res = run_all([_target(sshd, "a")], "echo out; echo err >&2; echo more; exit 3\n", timeout=RUN_S)["a"]
    assert (res.rc, res.stdout, res.stderr, res.error) == (3, "out\nmore\n", "err\n", None)


def test_a_timed_out_command_leaves_the_connection_usable(sshd: FakeSshd) -> None:
    before = sshd.accepted
    with Fleet([_target(sshd, "a")]) as fleet:
        late = fleet.run("echo started; sleep 3\n", timeout=0.5)["a"]
        assert late.rc is None and "timed out" in (late.error or "")
        assert fleet.run("echo next\n", timeout=RUN_S)["a"].stdout == "next\n"
    assert sshd.accepted - before == 1


def test_a_connection_lost_mid_command_is_reported_and_reopened(sshd: FakeSshd) -> None:
    with Fleet([_target(sshd, "a")]) as fleet:
        assert fleet.run("true\n", timeout=RUN_S)["a"].ok
        conn = fleet._conns["a"]
        threading.Timer(0.5, conn.transport.close).start()
        lost = fleet.run("echo started; sleep 5\n", timeout=RUN_S)["a"]
        assert lost.rc is None and "connection to 127.0.0.1" in (lost.error or "") and "lost" in lost.error
        assert fleet.run("echo again\n", timeout=RUN_S)["a"].stdout == "again\n"


def test_a_peer_that_falls_silent_is_reported_within_the_timeout(
        sshd: FakeSshd, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node that vanishes without closing its connection (powered off, its network gone) never
    answers the next command's channel: the run reports it within its timeout, not after paramiko's
    hour-long wait for the channel to open (the supervisor's round once hung there)."""
    from support import sshd_fake

    release = threading.Event()
    original = sshd_fake._Iface.check_channel_request

    def silent(self: sshd_fake._Iface, kind: str, chanid: int) -> int:
        release.wait(30)
        return original(self, kind, chanid)

    with Fleet([_target(sshd, "a")]) as fleet:
        assert fleet.run("true\n", timeout=RUN_S)["a"].ok
        monkeypatch.setattr(sshd_fake._Iface, "check_channel_request", silent)
        results: dict[str, Any] = {}
        runner = threading.Thread(target=lambda: results.update(fleet.run("true\n", timeout=1.0)))
        runner.start()
        runner.join(15)
        release.set()
        assert not runner.is_alive(), "the run waited on a silent peer past its timeout"
    assert results["a"].rc is None and results["a"].error, results["a"]


def test_a_script_larger_than_the_channel_window_goes_whole(sshd: FakeSshd) -> None:
    """The script is written before any output is read: one larger than SSH's window (2 MiB) waits
    for the command to read it, as a preflight with its shipped sources does at ~150 kB."""
    body = "x" * (3 << 20)
    res = run_all([_target(sshd, "a")], f"wc -c <<'EOF'\n{body}\nEOF\n", timeout=RUN_S)["a"]
    assert res.ok and res.stdout.strip() == str(len(body) + 1)


def test_fleet_reuses_one_connection_per_node(sshd: FakeSshd) -> None:
    before = sshd.accepted
    with Fleet([_target(sshd, "a"), _target(sshd, "b")]) as fleet:
        for _ in range(3):
            results = fleet.run("echo x\n", timeout=RUN_S)
            assert all(r.ok for r in results.values()), results
        lines: list[tuple[str, str]] = []
        rc = fleet.stream("a", "printf 'l1\\nl2\\n'", lambda n, line: lines.append((n, line)))
        assert lines == [("a", "l1"), ("a", "l2")] and rc == 0
    assert sshd.accepted - before == 2


def test_broken_connection_is_reopened(sshd: FakeSshd) -> None:
    with Fleet([_target(sshd, "a")]) as fleet:
        assert fleet.run("true\n", timeout=RUN_S)["a"].ok
        fleet._conns["a"].close()
        assert fleet.run("echo again\n", timeout=RUN_S)["a"].stdout == "again\n"


def test_large_output_is_read_completely(sshd: FakeSshd) -> None:
    results = run_all([_target(sshd, "a")], "head -c 300000 /dev/zero | tr '\\0' x\n", timeout=10)
    assert len(results["a"].stdout) == 300000


def test_a_slow_banner_is_waited_for(tmp_path: Path) -> None:
    """A loaded node's sshd sends its banner seconds after accepting the connection: the fleet
    waits for it (BANNER_TIMEOUT_S), where the 3 s TCP timeout once cut it off."""
    slow = FakeSshd(tmp_path, banner_delay=CONNECT_TIMEOUT_S + 1.5)
    try:
        res = run_all([_target(slow, "a")], "echo late\n", timeout=10)["a"]
    finally:
        slow.close()
    assert res.ok and res.stdout == "late\n", res.error
    assert BANNER_TIMEOUT_S >= 15 and AUTH_TIMEOUT_S >= 15


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The fleet's pauses between connection attempts, recorded instead of slept."""
    from sparkctl.ssh import fleet

    got: list[float] = []
    monkeypatch.setattr(fleet, "_sleep", got.append)
    return got


def test_a_connection_dropped_before_the_banner_is_tried_again(tmp_path: Path, pauses: list[float]) -> None:
    """sshd beyond MaxStartups closes a new connection before its banner: the fleet tries again
    after a pause that doubles, and the node answers."""
    busy = FakeSshd(tmp_path, drop_first=2)
    try:
        res = run_all([_target(busy, "a")], "echo hi\n", timeout=10)["a"]
    finally:
        busy.close()
    assert res.ok and res.stdout == "hi\n", res.error
    assert busy.accepted == 3 and pauses == [0.5, 1.0]


def test_a_banner_that_never_comes_is_given_up_within_the_budget(tmp_path: Path, pauses: list[float]) -> None:
    """No banner at all (a wedged sshd): the attempts end and the error says what happened."""
    mute = FakeSshd(tmp_path, banner_delay=60)
    try:
        with Fleet([_target(mute, "a")], banner_timeout=0.5) as fleet:
            res = fleet.run("true\n", timeout=RUN_S)["a"]
    finally:
        mute.close()
    assert not res.reachable and "SSH banner did not come" in (res.error or "")
    assert "4 attempts" in (res.error or "") and mute.accepted == 4 and pauses == [0.5, 1.0, 2.0]


def test_refused_and_rejected_connections_are_not_retried(
    sshd: FakeSshd, tmp_path: Path, pauses: list[float]
) -> None:
    refused = run_all([_target(sshd, "c", port=_closed_port())], "true\n", timeout=RUN_S)["c"]
    assert "connection refused" in (refused.error or "") and pauses == []
    before = sshd.accepted
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    unknown = run_all([_target(sshd, "a", known_hosts=empty)], "true\n", timeout=RUN_S)["a"]
    assert "not in" in (unknown.error or "") and sshd.accepted - before == 1 and pauses == []
    wrong = run_all([_target(sshd, "a", key_files=(tmp_path / "none",))], "true\n", timeout=RUN_S)["a"]
    assert not wrong.reachable and pauses == []


def test_parse_sections() -> None:
    s = parse_sections("a=1\nb = two=2\n--- journal\nline 1\nline=2\n--- empty\n")
    assert s.facts == {"a": "1", "b": "two=2"}
    assert s.blocks == {"journal": "line 1\nline=2", "empty": ""}


def test_ssh_options_from_args(tmp_path: Path) -> None:
    args = ("-o UserKnownHostsFile=inventory/lab/known_hosts -oStrictHostKeyChecking=yes "
            "-o 'ProxyJump ops@bastion:2222' -J other -p 2200 -F site/ssh_config")
    opts = ssh_options_from_args(args)
    assert opts["userknownhostsfile"] == ["inventory/lab/known_hosts"]
    assert opts["proxyjump"] == ["ops@bastion:2222", "other"]
    assert opts["port"] == ["2200"] and opts["-F"] == ["site/ssh_config"]
    assert known_hosts_from_args(args, tmp_path) == tmp_path / "inventory/lab/known_hosts"
    assert known_hosts_from_args("-oUserKnownHostsFile=/etc/kh", tmp_path) == Path("/etc/kh")
    assert known_hosts_from_args("-o StrictHostKeyChecking=yes", tmp_path) is None
    assert known_hosts_from_args(None, tmp_path) is None


def test_targets_from_cluster_and_ssh_config(tmp_path: Path) -> None:
    (tmp_path / "id_lab").write_text("x")
    (tmp_path / "kh").write_text("")
    (tmp_path / "ssh_config").write_text(
        "Host node1\n  HostName 10.250.0.11\n  Port 2201\n"
        f"Host *\n  User root\n  IdentityFile {tmp_path}/id_lab\n"
    )
    # The port is the model's (sparkctl.model.sshconfig; tests/unit/test_ssh_port.py): node1's
    # from the ssh_config under its name, node2's from its ssh arguments.
    nodes = [SimpleNamespace(name="node1", rank=0, mgmt_ip="10.250.0.10",
                             ssh_port=resolve_port({}, tmp_path, "10.250.0.10", "node1")),
             SimpleNamespace(name="node2", rank=1, mgmt_ip="10.250.0.11",
                             ssh_port=resolve_port({"ansible_ssh_common_args": "-J ops@bastion -p 2222"},
                                                   tmp_path, "10.250.0.11", "node2"),
                             hostvars={"ansible_ssh_common_args": "-J ops@bastion -p 2222"})]
    cluster = SimpleNamespace(inventory_dir=tmp_path, nodes=nodes, ssh_user=None, known_hosts=tmp_path / "kh")
    targets = targets_for(cluster)
    assert [t.name for t in targets] == ["node1", "node2"]
    # ansible_host stays the address (the HostName under the node's name does not move it)
    assert targets[0].address == "10.250.0.10" and targets[0].user == "root" and not targets[0].sudo
    assert targets[0].port == 2201 and targets[0].proxy_jump is None
    assert targets[0].key_files == (tmp_path / "id_lab",)
    assert targets[0].ssh_config[0] == tmp_path / "ssh_config"
    assert targets[1].known_hosts == tmp_path / "kh" and targets[1].rank == 1
    assert targets[1].proxy_jump == "ops@bastion" and targets[1].port == 2222
    cluster.ssh_user = "operator"
    assert all(t.sudo for t in targets_for(cluster))


def test_connections_never_share_a_configuration_a_write_could_empty(
        sshd: FakeSshd, bastion: FakeSshd) -> None:
    """invoke's Config rebuilds its merged view, empty for a moment, on every write: a connection
    (or a jump hop, whose connect_kwargs fabric would otherwise take from the config itself) that
    shared it with others let one thread's write fail another's read ("No attribute or config key
    found for 'connect_kwargs'", seen when the supervisor stopped the group)."""
    targets = [_target(sshd, "a"), _target(sshd, "b"),
               _target(sshd, "c", proxy_jump=f"tester@127.0.0.1:{bastion.port}")]
    fleet = Fleet(targets)
    try:
        a, b, c = (fleet.connection(t) for t in targets)
        assert a.config is not b.config and b.config is not c.config
        hop = c.gateway
        assert isinstance(hop, fabric.Connection)
        assert type(hop.connect_kwargs) is dict  # its own, not a view into the configuration
        hop.connect_kwargs["sock"] = object()
        assert "sock" not in c.config.connect_kwargs and "sock" not in a.config.connect_kwargs
    finally:
        fleet.close()


def test_connections_built_side_by_side_all_read_their_configuration(sshd: FakeSshd) -> None:
    """fabric's Connection writes inline_ssh_env into its configuration as it is built; on a shared
    configuration that write emptied the view other threads were reading their connect_kwargs from."""
    import threading

    fleet = Fleet([_target(sshd, f"n{i}") for i in range(4)])
    errors: list[BaseException] = []

    def build() -> None:
        for _ in range(150):
            try:
                fleet.connection(_target(sshd, "x"))
            except AttributeError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(6)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often, as on a loaded controller
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
        fleet.close()
    assert not errors, errors[0]


def test_the_fake_sshds_pipe_ends_quietly_when_an_end_is_already_gone() -> None:
    """A forwarded connection's pipe closes both ends when either stops. paramiko raises EOFError
    closing a channel whose transport has already stopped (the client hung up first); the pipe's
    thread must end quietly, not with an exception pytest reports as an unhandled thread error."""
    from support import sshd_fake

    class Gone:
        def __init__(self, chunks: list[bytes]) -> None:
            self.chunks, self.sent, self.closed = chunks, b"", False

        def recv(self, n: int) -> bytes:
            return self.chunks.pop(0) if self.chunks else b""

        def sendall(self, data: bytes) -> None:
            self.sent += data

        def close(self) -> None:
            self.closed = True
            raise EOFError

    src, dst = Gone([b"abc"]), Gone([])
    sshd_fake._pipe(src, dst)  # type: ignore[arg-type]
    assert dst.sent == b"abc" and src.closed and dst.closed
