"""The classifier of Ansible and SSH failures (sparkctl.ansible.failures): canned ansible-runner event
streams, read by the runner's own collector, give one line per node — the node, its address and
port, the cause in words and what to check — in rank order whatever order the events came in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.runner import ansible_failures, failed_event, unreachable_event

from sparkctl.ansible import failures
from sparkctl.errors import EXIT_FAILED, EXIT_UNREACHABLE
from sparkctl.model import load_inventory

MITOGEN = "EOF on stream; last 100 lines received:\n"
CHANGED_KEY = (
    "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\r\n"
    "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\n"
    "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\r\n"
    "IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\r\n"
    "Host key for 192.168.7.12 has changed and you have requested strict checking.\r\n"
    "Host key verification failed.\r\n"
)

# (the raw event, the kind, the words the line must hold, a word of what to check)
CASES: list[tuple[dict[str, Any], str, str, str]] = [
    (unreachable_event("spark-2", MITOGEN + "ssh: connect to host 192.168.7.12 port 22: "
                                            "Connection refused\r\n"),
     "refused", "unreachable: connection refused", "sshd runs on spark-2 and listens on port 22"),
    (unreachable_event("spark-2", "Failed to connect to the host via ssh: ssh: connect to host 192.168.7.12 "
                                  "port 22: Connection timed out"),
     "timeout", "unreachable: connection timed out", "spark-2 is powered on"),
    (unreachable_event("spark-2", MITOGEN + "Warning: Permanently added '192.168.7.12' (ED25519) to the list "
                                            "of known hosts.\r\n" + CHANGED_KEY),
     "host-key-changed", "unreachable: host key mismatch", "replace its line for 192.168.7.12"),
    (unreachable_event("spark-2", MITOGEN + "No ED25519 host key is known for 192.168.7.12 and you have "
                                            "requested strict checking.\r\n"
                                            "Host key verification failed.\r\n"),
     "host-key-unknown", "unreachable: unknown host key",
     "pin spark-2's key in the inventory's known_hosts"),
    (unreachable_event("spark-2", MITOGEN + "operator@192.168.7.12: Permission denied (publickey).\r\n"),
     "auth", "unreachable: permission denied (publickey)", "ssh-copy-id -p 22 operator@192.168.7.12"),
    (failed_event("spark-2", "Read the node identity", msg="Missing sudo password"),
     "sudo-password", "failed in 'Read the node identity': sudo needs a password", "passwordless sudo"),
    (failed_event("spark-2", "Gathering Facts", rc=127, module_stdout="",
                  module_stderr="/bin/sh: 1: /usr/bin/python3: not found\n",
                  msg="The module failed to execute correctly, you probably need to set the interpreter.\n"
                      "See stdout/stderr for the exact error"),
     "python-missing", "Python is missing on the node", "install python3 on spark-2"),
    (failed_event("spark-2", "Unpack the kit", msg="Failed to write /srv/sparkctl/kit/x: [Errno 28] No space "
                                                   "left on device"),
     "disk-full", "failed in 'Unpack the kit': disk full", "free space on spark-2"),
    (unreachable_event("spark-2", MITOGEN + "ssh: connect to host 192.168.7.12 port 22: "
                                            "No route to host\r\n"),
     "no-route", "unreachable: no route to the node", "on the management network"),
    (unreachable_event("spark-2", "Failed to connect to the host via ssh: ssh: Could not resolve hostname "
                                  "spark-2.lan: Name or service not known"),
     "dns", "unreachable: the address does not resolve", "ansible_host of spark-2"),
    (unreachable_event("spark-2", MITOGEN + "kex_exchange_identification: read: Connection reset by peer\r\n"
                                            "Connection reset by 192.168.7.12 port 22\r\n"),
     "closed", "unreachable: the node closed the connection", "MaxStartups"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import shutil

    dest = tmp_path_factory.mktemp("site") / "site"
    shutil.copytree(Path(__file__).resolve().parents[2] / "inventory" / "example", dest)
    return load_inventory(dest)


@pytest.mark.parametrize(("event", "kind", "words", "check"), CASES, ids=[c[1] for c in CASES])
def test_each_cause_gives_its_one_line(cluster: Any, event: dict[str, Any], kind: str, words: str,
                                       check: str) -> None:
    found = failures.for_cluster(ansible_failures([event]), cluster)
    assert [nf.kind for nf in found] == [kind]
    (line,) = failures.lines(ansible_failures([event]), cluster)
    assert line.startswith("spark-2 (192.168.7.12:22): "), line
    assert words in line and check in line, line
    assert "EOF on stream" not in line and "@@@" not in line and "\n" not in line


def test_an_unknown_message_is_kept_as_its_last_meaningful_line(cluster: Any) -> None:
    event = unreachable_event("spark-1", MITOGEN + "Warning: Permanently added '192.168.7.11' (ED25519)\r\n"
                                         "something no one has seen before\r\n")
    (line,) = failures.lines(ansible_failures([event]), cluster)
    assert line == "spark-1 (192.168.7.11:22): unreachable: something no one has seen before"


def test_one_line_per_node_in_rank_order_whatever_the_event_order(cluster: Any) -> None:
    refused = "ssh: connect to host {} port 22: Connection refused"
    events = [
        unreachable_event("spark-3", MITOGEN + refused.format("192.168.7.13")),
        failed_event("spark-1", "Write the fabric netplan", msg="No space left on device"),
        unreachable_event("spark-0", MITOGEN + refused.format("192.168.7.10")),
        # the same node again (a later task, another play): still one line, the unreachable one
        failed_event("spark-3", "Read the node identity", msg="Missing sudo password"),
        unreachable_event("spark-3", MITOGEN + refused.format("192.168.7.13"), task="Probe the fabric"),
    ]
    found = failures.for_cluster(ansible_failures(events), cluster)
    assert [nf.host for nf in found] == ["spark-0", "spark-1", "spark-3"]
    assert [nf.kind for nf in found] == ["refused", "disk-full", "refused"]
    assert found[2].task == "Gathering Facts"  # its first unreachable failure
    for shuffled in (events[::-1], events[2:] + events[:2]):
        assert [nf.host for nf in failures.for_cluster(ansible_failures(shuffled), cluster)] == [
            "spark-0", "spark-1", "spark-3"]


def test_rank_order_is_the_ranks_not_the_names() -> None:
    found = ansible_failures([unreachable_event(h, "Connection timed out")
                              for h in ("a", "b", "c", "controller")])
    order = ["c", "a", "b"]  # rank 0 is c
    assert [nf.host for nf in failures.node_failures(found, order)] == ["controller", "c", "a", "b"]


def test_the_error_carries_the_lines_the_nodes_and_one_exit_code(cluster: Any) -> None:
    from support.runner import FakeRunner

    from sparkctl.ansible.plan import for_preflight

    dark = ansible_failures([unreachable_event("spark-2",
                                               MITOGEN + "Connection timed out during banner exchange")])
    fake = FakeRunner(failures=dark)
    result = fake(for_preflight(cluster, None))
    err = failures.error_for(result, cluster, "preflight " + failures.what_failed(result, cluster))
    assert err.exit_code == EXIT_UNREACHABLE and err.nodes == ["spark-2"]
    assert err.message == "preflight could not reach spark-2"
    assert err.details == [failures.lines(dark, cluster)[0]] and "spark-2 did not answer" in str(err.hint)
    task = ansible_failures([failed_event("spark-1", "Write the unit", msg="boom")])
    result = FakeRunner(failures=task)(for_preflight(cluster, None))
    err = failures.error_for(result, cluster, "x")
    assert err.exit_code == EXIT_FAILED
    assert err.details == ["spark-1 (192.168.7.11:22): failed in 'Write the unit': boom"]


def test_sparkctl_own_ssh_errors_read_the_same(cluster: Any) -> None:
    line = failures.ssh_line(cluster, "spark-3", "connection refused by 192.168.7.13:22")
    assert line.startswith("spark-3 (192.168.7.13:22): unreachable: connection refused — check that sshd")
    line = failures.ssh_line(cluster, "spark-3",
                             "host key of 192.168.7.13:22 does not match /site/known_hosts (impostor?)")
    assert "host key mismatch" in line
    line = failures.ssh_line(cluster, "spark-3", "known_hosts file /site/known_hosts does not exist")
    assert "known_hosts file does not exist" in line


def test_a_task_that_failed_on_a_node_that_answered_has_no_connection_cause(cluster: Any) -> None:
    """'timed out' in a task's message is about what the task waited for, not the node's sshd."""
    event = failed_event("spark-1", "Wait for the peer's stage agent",
                         msg="Timeout when waiting for 10.77.0.12:29700 (Connection refused)")
    (nf,) = failures.for_cluster(ansible_failures([event]), cluster)
    assert nf.kind == "task" and nf.cause is None
    assert nf.line() == ("spark-1 (192.168.7.11:22): failed in 'Wait for the peer's stage agent': "
                         "Timeout when waiting for 10.77.0.12:29700 (Connection refused)")


ANSIBLE_HOST_KEY = ("Task failed: Host key checking is enabled, and SSH reported an unrecognized or "
                    "mismatching host key.")


def test_ansibles_unrecognized_or_mismatching_key_is_told_apart_by_the_pinned_keys(
        tmp_path: Path) -> None:
    """Ansible's own message does not say which: a key pinned for the node makes it a mismatch (on the
    lab it read as an unknown message), none pinned an unknown key."""
    import shutil

    site = tmp_path / "site"
    shutil.copytree(Path(__file__).resolve().parents[2] / "inventory" / "example", site)
    cluster = load_inventory(site)
    event = unreachable_event("spark-2", ANSIBLE_HOST_KEY)
    known = site / "known_hosts"
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHBh2vZ7Zt0ZkGLVfYDnx7Bd2Qf2aJ1QmB0mC6m3x0Ck"
    known.write_text(f"192.168.7.10 {key}\n")
    (line,) = failures.lines(ansible_failures([event]), cluster)
    assert "unreachable: unknown host key" in line and "pin spark-2's key" in line, line
    known.write_text(known.read_text() + f"192.168.7.12 {key}\n")
    (line,) = failures.lines(ansible_failures([event]), cluster)
    assert "unreachable: host key mismatch" in line and "replace its line for 192.168.7.12" in line, line
