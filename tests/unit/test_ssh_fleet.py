"""remote.py against a real (in-process) SSH server: verification, unreachable nodes, timeouts, reuse."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import paramiko
import pytest
from sshd_fake import FakeSshd

from sparkctl.ssh import fleet as remote
from sparkctl.ssh.fleet import Fleet, Target, known_hosts_from_args, parse_sections, run_all, targets_for


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    server = FakeSshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.close()


def _target(sshd: FakeSshd, name: str, **kw) -> Target:
    base = dict(name=name, address="127.0.0.1", user="tester", port=sshd.port,
                key_files=(sshd.key_file,), known_hosts=sshd.known_hosts)
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
    results = run_all(targets, script, timeout=5)
    assert set(results) == {"a", "b", "c"}
    for name in ("a", "b"):
        r = results[name]
        assert r.reachable and r.rc == 3 and not r.ok
        assert r.stdout == "hello\n" and r.stderr == "oops\n"
    assert not results["c"].reachable
    assert "connection refused" in (results["c"].error or "")


def test_per_host_scripts(sshd: FakeSshd) -> None:
    targets = [_target(sshd, "a"), _target(sshd, "b")]
    results = run_all(targets, lambda t: f"echo {t.name}-{t.rank}\n", timeout=5)
    assert results["a"].stdout.strip() == "a-None"
    results = run_all(targets, {"a": "echo one\n", "b": "echo two\n"}, timeout=5)
    assert (results["a"].stdout, results["b"].stdout) == ("one\n", "two\n")


def test_unknown_host_key_is_refused(sshd: FakeSshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    results = run_all([_target(sshd, "a", known_hosts=empty)], "echo should-not-run\n", timeout=5)
    assert not results["a"].reachable
    assert "not in" in (results["a"].error or "") and "refused" in (results["a"].error or "")


def test_changed_host_key_is_refused(sshd: FakeSshd, tmp_path: Path) -> None:
    other = paramiko.RSAKey.generate(1024)
    bad = tmp_path / "known_hosts"
    bad.write_text(f"[127.0.0.1]:{sshd.port} ssh-rsa {other.get_base64()}\n")
    results = run_all([_target(sshd, "a", known_hosts=bad)], "echo should-not-run\n", timeout=5)
    assert "does not match" in (results["a"].error or "")


def test_missing_known_hosts_file_is_an_error(sshd: FakeSshd, tmp_path: Path) -> None:
    results = run_all([_target(sshd, "a", known_hosts=tmp_path / "nope")], "true\n", timeout=5)
    assert "does not exist" in (results["a"].error or "")


def test_command_timeout_is_reported(sshd: FakeSshd) -> None:
    results = run_all([_target(sshd, "a")], "sleep 3\n", timeout=0.5)
    assert results["a"].error is not None and "timed out" in results["a"].error


def test_fleet_reuses_one_connection_per_node(sshd: FakeSshd) -> None:
    before = sshd.accepted
    with Fleet([_target(sshd, "a"), _target(sshd, "b")]) as fleet:
        for _ in range(3):
            results = fleet.run("echo x\n", timeout=5)
            assert all(r.ok for r in results.values())
        lines: list[tuple[str, str]] = []
        rc = fleet.stream("a", "printf 'l1\\nl2\\n'", lambda n, line: lines.append((n, line)))
        assert lines == [("a", "l1"), ("a", "l2")] and rc == 0
    assert sshd.accepted - before == 2


def test_large_output_is_read_completely(sshd: FakeSshd) -> None:
    results = run_all([_target(sshd, "a")], "head -c 300000 /dev/zero | tr '\\0' x\n", timeout=10)
    assert len(results["a"].stdout) == 300000


def test_parse_sections() -> None:
    s = parse_sections("a=1\nb = two=2\n--- journal\nline 1\nline=2\n--- empty\n")
    assert s.facts == {"a": "1", "b": "two=2"}
    assert s.blocks == {"journal": "line 1\nline=2", "empty": ""}


def test_known_hosts_from_args(tmp_path: Path) -> None:
    args = "-o UserKnownHostsFile=inventory/lab/known_hosts -o StrictHostKeyChecking=yes"
    assert known_hosts_from_args(args, tmp_path) == tmp_path / "inventory/lab/known_hosts"
    assert known_hosts_from_args("-oUserKnownHostsFile=/etc/kh", tmp_path) == Path("/etc/kh")
    assert known_hosts_from_args("-o StrictHostKeyChecking=yes", tmp_path) is None
    assert known_hosts_from_args(None, tmp_path) is None


def test_targets_from_cluster_and_ssh_config(tmp_path: Path) -> None:
    (tmp_path / "id_lab").write_text("x")
    (tmp_path / "kh").write_text("")
    (tmp_path / "ssh_config").write_text(
        f"Host node1\n  HostName 10.250.0.11\nHost *\n  User root\n  IdentityFile {tmp_path}/id_lab\n"
    )
    nodes = [SimpleNamespace(name="node1", rank=0, mgmt_ip="10.250.0.10"),
             SimpleNamespace(name="node2", rank=1, mgmt_ip="10.250.0.11")]
    cluster = SimpleNamespace(inventory_dir=tmp_path, nodes=nodes, ssh_user=None, known_hosts=tmp_path / "kh")
    targets = targets_for(cluster)
    assert [t.name for t in targets] == ["node1", "node2"]
    assert targets[0].address == "10.250.0.10" and targets[0].user == "root" and not targets[0].sudo
    assert targets[0].key_files == (tmp_path / "id_lab",)
    assert targets[1].known_hosts == tmp_path / "kh" and targets[1].rank == 1
    cluster.ssh_user = "operator"
    assert all(t.sudo for t in targets_for(cluster))


def test_reason_texts() -> None:
    t = Target("a", "10.0.0.1")
    assert "timed out" in remote._reason(TimeoutError(), t)
    assert "authentication failed" in remote._reason(paramiko.AuthenticationException(), t)
