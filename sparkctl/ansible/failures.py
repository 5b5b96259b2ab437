"""What went wrong on each node, in words: the one classifier of Ansible and SSH failures.

A failed run reaches sparkctl as ansible-runner events, each kept as a ``Failure`` (the host, the
task, the module's or the connection's message; ``runner`` makes them). Those messages are
written for Ansible's developers: Mitogen wraps an SSH refusal in ``EOF on stream; last 100 lines
received: …``, ssh buries the cause among its warnings, a missing sudo password reads "Missing
sudo password". ``classify`` turns a message
into a ``Cause`` (a stable ``kind``, the cause in words, and what to check); ``node_failures`` keeps
one failure per node (an unreachable one first, else the first task that failed) in rank order,
whatever order the events came in; ``lines`` gives the one line per node every verb prints, once:

    spark-2 (192.168.7.12:22): unreachable: connection refused — check that sshd runs on spark-2 …

``error_for`` is how a verb ends a failed run: one ``SparkctlError`` carrying those lines and the
nodes' names, with the exit code every verb uses when a node did not answer (``EXIT_UNREACHABLE``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sparkctl.errors import EXIT_FAILED, EXIT_UNREACHABLE, SparkctlError

if TYPE_CHECKING:
    from sparkctl.model import Cluster

# Mitogen's wrapper around what the connection printed before it died.
_MITOGEN_EOF = re.compile(r"EOF on stream; last \d+ lines received:\s*", re.I)
# ssh's chatter that never says why (the line with the reason is elsewhere).
_NOISE = re.compile(r"^(warning: permanently added|debug\d?:|@+$|pseudo-terminal|"
                    r"mux_client_|control socket|shared connection to .* closed)", re.I)


@dataclass(frozen=True)
class Failure:
    """One failed or unreachable host of a run, as ansible-runner reported it."""

    host: str
    task: str
    msg: str
    unreachable: bool = False
    # Everything the result said (msg, stderr, module output), uncut: what ``classify`` reads.
    raw: str = field(default="", compare=False, repr=False)

    def __str__(self) -> str:
        what = "unreachable" if self.unreachable else "failed"
        return f"{self.host}: {what} in '{self.task}': {self.msg}"


class FailedRun(Protocol):
    """What ``error_for`` and ``what_failed`` read of a run (``runner.RunResult`` is one)."""

    @property
    def failures(self) -> Sequence[Failure]: ...

    @property
    def artifact_dir(self) -> Path: ...


@dataclass(frozen=True)
class Cause:
    """A failure's cause: ``kind`` (stable, for --json and tests), ``words`` (what happened) and
    ``check`` (what to look at; ``{node}``, ``{address}``, ``{port}``, ``{user}`` are filled in)."""

    kind: str
    words: str
    check: str


# (kind, pattern over the message, words, what to check), first match wins: the specific before the
# general (a host key mismatch also says "Host key verification failed").
_CAUSES: tuple[tuple[str, re.Pattern[str], str, str], ...] = tuple(
    (kind, re.compile(pattern, re.I), words, check) for kind, pattern, words, check in (
        ("known-hosts-missing", r"known_hosts file .* does not exist",
         "the inventory's known_hosts file does not exist",
         "the file named by UserKnownHostsFile (relative paths are from the inventory directory): "
         "pin the nodes' keys in it (`sparkctl validate` names it)"),
        ("host-key-changed", r"REMOTE HOST IDENTIFICATION HAS CHANGED|host key for .* has changed|"
                             r"host key of .* does not match",
         "host key mismatch: the node offers a different key than the one pinned",
         "if {node} was reinstalled, replace its line for {address} in the inventory's known_hosts "
         "(ssh-keygen -R); otherwise stop: something else answers at {address}"),
        # Ansible's own words (its ssh plugin): unknown or changed, told apart by for_cluster.
        ("host-key-rejected", r"unrecognized or mismatching host key",
         "host key not accepted: the node's key is not the one pinned for it (changed, or never pinned)",
         "{node}'s key fingerprint on its console against its line for {address} in the inventory's "
         "known_hosts"),
        ("host-key-unknown", r"host key is known for|no .* host key is known|"
                             r"Host key verification failed|not found in known_hosts|"
                             r"host key of .* is not in",
         "unknown host key: the inventory's known_hosts has no key for it",
         "pin {node}'s key in the inventory's known_hosts (as {address}, or [{address}]:{port} "
         "when the port is not 22), after checking its fingerprint on the console"),
        ("key-file", r"UNPROTECTED PRIVATE KEY FILE|Load key .*: (bad permissions|invalid format)|"
                     r"identity file .* not accessible",
         "the SSH private key file cannot be used",
         "the key file named by ansible_ssh_private_key_file must exist and be mode 0600 "
         "(`sparkctl validate` checks it)"),
        ("auth", r"Permission denied \(|Authentication failed|Too many authentication failures|"
                 r"no authentication methods available",
         "permission denied (publickey)",
         "that {user}@{address} accepts the controller's key: ssh-copy-id -p {port} {user}@{address}"),
        ("sudo-password", r"Missing sudo password|sudo: a (terminal|password) is required|"
                          r"sudo password is incorrect|incorrect sudo password|"
                          r"privilege escalation prompt|sudo: no tty present",
         "sudo needs a password",
         "give {user} passwordless sudo on {node} (a file in /etc/sudoers.d: "
         "`{user} ALL=(ALL) NOPASSWD: ALL`)"),
        ("refused", r"Connection refused",
         "connection refused",
         "that sshd runs on {node} and listens on port {port} (systemctl status ssh), and that no "
         "firewall rejects it"),
        ("timeout", r"timed out|Connection timeout|Operation timed out|timeout waiting",
         "connection timed out",
         "that {node} is powered on and {address} is its management address; a firewall may drop "
         "port {port}"),
        ("no-route", r"No route to host|Network is unreachable|Host is unreachable",
         "no route to the node",
         "that {node} is up and on the management network, and this controller's route to {address}"),
        ("dns", r"Could not resolve hostname|Name or service not known|Temporary failure in name "
                r"resolution|nodename nor servname",
         "the address does not resolve",
         "ansible_host of {node}: write its management IPv4 address"),
        ("closed", r"Connection (closed|reset) by|kex_exchange_identification|Broken pipe|"
                   r"Connection to .* closed",
         "the node closed the connection",
         "sshd on {node} (journalctl -u ssh): MaxStartups, a ban (fail2ban) or a crashed sshd"),
        ("python-missing", r"python[0-9.]*: (command )?not found|No such file or directory.*python|"
                           r"interpreter .* (not found|does not exist)|"
                           r"you probably need to set the interpreter",
         "Python is missing on the node",
         "install python3 on {node} (apt-get install python3), or set ansible_python_interpreter"),
        ("disk-full", r"No space left on device|Disk quota exceeded",
         "disk full",
         "free space on {node} (df -h; the NVMe mount and /var hold the checkpoint, images and logs)"),
    )
)


def _connection_text(msg: str) -> str:
    """The part of a connection message that can hold a cause: Mitogen's wrapper dropped, ssh's
    noise lines left out."""
    text = _MITOGEN_EOF.sub("", msg or "")
    lines = [ln.strip() for ln in re.split(r"[\r\n]+", text) if ln.strip()]
    useful = [ln for ln in lines if not _NOISE.match(ln)]
    return "\n".join(useful or lines)


# What can only be said of the connection to the node itself: a task's message with "timed out" or
# "Connection refused" in it is about something else (a peer, a service, a gate), not the node's sshd.
_CONNECTION_ONLY = frozenset(("known-hosts-missing", "host-key-changed", "host-key-rejected",
                              "host-key-unknown", "key-file",
                              "auth", "refused", "timeout", "no-route", "dns", "closed"))


def classify(msg: str, unreachable: bool = True) -> Cause | None:
    """The cause of one failure message, or None when it is none of the known ones. A task that
    failed on a node that answered (``unreachable`` False) has no connection cause."""
    text = _connection_text(msg)
    for kind, pattern, words, check in _CAUSES:
        if not unreachable and kind in _CONNECTION_ONLY:
            continue
        if pattern.search(text):
            return Cause(kind, words, check)
    return None


def _last_line(msg: str, limit: int = 300) -> str:
    """A message as one line: what remains of a connection message, its last meaningful line."""
    text = _connection_text(msg)
    lines = text.splitlines()
    if not lines:
        return "no message"
    one = lines[-1] if _MITOGEN_EOF.search(msg or "") or len(lines) > 3 else " ".join(lines)
    one = " ".join(one.split())
    return one if len(one) <= limit else one[: limit - 1].rsplit(" ", 1)[0] + " …"


def summary(msg: str) -> str:
    """A connection's message as one line: Mitogen's wrapper and ssh's noise left out."""
    return _last_line(msg, 600)


def kind(f: Failure) -> str:
    """The failure's cause as a stable word (``Cause.kind``; 'unreachable' or 'task' when unknown)."""
    cause = classify(_text(f), f.unreachable)
    return cause.kind if cause else ("unreachable" if f.unreachable else "task")


@dataclass(frozen=True)
class NodeFailure:
    """One node's failure, as it is printed: where, what, why in words, and what to check."""

    host: str
    address: str | None
    port: int | None
    unreachable: bool
    task: str
    cause: Cause | None
    detail: str
    user: str | None = None

    @property
    def kind(self) -> str:
        return self.cause.kind if self.cause else ("unreachable" if self.unreachable else "task")

    def line(self) -> str:
        """``node (address:port): reason`` — the one line printed for this node."""
        where = f" ({self.address}:{self.port})" if self.address else ""
        return f"{self.host}{where}: {self.reason()}"

    def short(self) -> str:
        """The cause in a few words, for a table cell (the full line is printed once, elsewhere)."""
        if self.cause is not None:
            return self.cause.words.split(":")[0]
        return "no answer" if self.unreachable else f"failed in '{self.task}'"

    def reason(self) -> str:
        """What happened, in words, and what to check (the line without the node)."""
        what = "unreachable" if self.unreachable else f"failed in '{self.task}'"
        if self.cause is None:
            return f"{what}: {self.detail}"
        check = self.cause.check.format(node=self.host, address=self.address or self.host,
                                        port=self.port or 22, user=self.user or "the SSH user")
        said = "" if self.unreachable else f" ({self.detail})"
        return f"{what}: {self.cause.words}{said} — check {check}"


def _text(f: Failure) -> str:
    return f.raw or f.msg


def node_failures(failures: Iterable[Failure], order: Sequence[str] = (),
                  addresses: Mapping[str, tuple[str, int]] | None = None,
                  user: str | None = None) -> list[NodeFailure]:
    """One failure per node (its unreachable one, else the first task that failed), in ``order``
    (rank order; names not in it after, by name; the controller first)."""
    addresses = addresses or {}
    first: dict[str, Failure] = {}
    for f in failures:
        kept = first.get(f.host)
        if kept is None or (f.unreachable and not kept.unreachable):
            first[f.host] = f
    rank = {name: i for i, name in enumerate(order)}

    def key(host: str) -> tuple[int, int, str]:
        if host == "controller":
            return (0, 0, host)
        return (1, rank.get(host, len(rank)), host)

    out: list[NodeFailure] = []
    for host in sorted(first, key=key):
        f = first[host]
        text = _text(f)
        address, port = addresses.get(host, (None, None))
        # A task's message as the runner summed it up (``runner._message``); a connection's, what
        # remains of it once Mitogen's wrapper and ssh's noise are gone.
        detail = _last_line(text) if f.unreachable or not f.msg else " ".join(f.msg.split())
        out.append(NodeFailure(host, address, port, f.unreachable, f.task, classify(text, f.unreachable),
                               detail, user))
    return out


def ssh_failure(cluster: Cluster, host: str, error: str) -> NodeFailure:
    """A node sparkctl's own SSH (``ssh.fleet``) could not reach: the same words and checks as a
    playbook's unreachable node."""
    _order, addresses = cluster_order(cluster)
    address, port = addresses.get(host, (None, None))
    return NodeFailure(host, address, port, True, "", classify(error), _last_line(error), cluster.ssh_user)


def ssh_line(cluster: Cluster, host: str, error: str) -> str:
    return ssh_failure(cluster, host, error).line()


def cluster_order(cluster: Cluster) -> tuple[list[str], dict[str, tuple[str, int]]]:
    """The nodes in rank order (the switch after them) and each host's address and SSH port."""
    order = [n.name for n in sorted(cluster.nodes, key=lambda n: n.rank)]
    addresses = {n.name: (str(n.mgmt_ip), n.ssh_port) for n in cluster.nodes}
    if cluster.switch is not None:
        order.append(cluster.switch.name)
        addresses[cluster.switch.name] = (cluster.switch.host, cluster.switch.ssh_port)
    return order, addresses


def for_cluster(failures: Iterable[Failure], cluster: Cluster) -> list[NodeFailure]:
    order, addresses = cluster_order(cluster)
    out = node_failures(failures, order, addresses, cluster.ssh_user)
    return [_pinned_or_not(nf, cluster) if nf.kind == "host-key-rejected" else nf for nf in out]


def _pinned_or_not(nf: NodeFailure, cluster: Cluster) -> NodeFailure:
    """A key Ansible said it did not accept ("unrecognized or mismatching"): a mismatch when the
    inventory's known_hosts pins a key for the node, else an unknown key."""
    import paramiko

    known = getattr(cluster, "known_hosts", None)
    if known is None or nf.address is None:
        return nf
    name = nf.address if (nf.port or 22) == 22 else f"[{nf.address}]:{nf.port}"
    try:
        keys = paramiko.HostKeys(str(known))
    except (OSError, paramiko.SSHException):
        return nf
    kind = "host-key-changed" if keys.lookup(name) or keys.lookup(nf.host) else "host-key-unknown"
    _kind, _pattern, words, check = next(c for c in _CAUSES if c[0] == kind)
    return dataclasses.replace(nf, cause=Cause(kind, words, check))


def lines(failures: Iterable[Failure], cluster: Cluster) -> list[str]:
    """One line per node that failed, in rank order."""
    return [nf.line() for nf in for_cluster(failures, cluster)]


def unreachable(failures: Iterable[Failure], cluster: Cluster) -> list[str]:
    """The nodes that did not answer, in rank order."""
    return [nf.host for nf in for_cluster(failures, cluster) if nf.unreachable]


def exit_code(failures: Iterable[Failure]) -> int:
    """``EXIT_UNREACHABLE`` when a node did not answer, else ``EXIT_FAILED``."""
    return EXIT_UNREACHABLE if any(f.unreachable for f in failures) else EXIT_FAILED


def error_for(result: FailedRun, cluster: Cluster, message: str, hint: str | None = None) -> SparkctlError:
    """The error a verb raises for a failed run: one line per node in rank order (printed once, by
    the error panel or as --json's error object), the nodes named, one exit code for unreachable."""
    failed = for_cluster(result.failures, cluster)
    dark = [nf.host for nf in failed if nf.unreachable]
    if dark and hint is None:
        hint = (f"{', '.join(dark)} did not answer: see the cause on each line, fix it, then re-run; "
                f"the run log is in {result.artifact_dir}")
    return SparkctlError(message, hint=hint, exit_code=exit_code(result.failures),
                         details=[nf.line() for nf in failed], nodes=[nf.host for nf in failed])


def what_failed(result: FailedRun, cluster: Cluster) -> str:
    """What follows a verb's name in its error: 'could not reach spark-2, spark-3' / 'failed on
    spark-1' / both, in rank order."""
    failed = for_cluster(result.failures, cluster)
    dark = [nf.host for nf in failed if nf.unreachable]
    bad = [nf.host for nf in failed if not nf.unreachable]
    parts = [f"could not reach {', '.join(dark)}"] if dark else []
    parts += [f"failed on {', '.join(bad)}"] if bad else []
    return " and ".join(parts) or "failed on the controller"
