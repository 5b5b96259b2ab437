"""SSH fan-out for fast reads (status, logs, bundle, the boot watch of `up`), on fabric.

One ``fabric.Connection`` per node, opened in parallel and kept for the life of the ``Fleet`` (the
boot watch and ``status --watch`` sample every 2 s over the same connections). Each connection is
configured the way ``ssh`` would be (ssh_config files, ``ProxyJump`` chains, ``ProxyCommand``;
see ``targets``), and its host key is ALWAYS verified: paramiko's ``RejectPolicy`` on every hop,
known_hosts from the inventory's pinned file (or ssh_config / ssh's defaults where the inventory
names none). An unknown or changed key is an error, whatever ``StrictHostKeyChecking`` says.

Each call runs one script per node on a session channel of its connection (the script on stdin,
never in argv; see ``_exec``) and returns one ``HostResult`` per node, including the nodes that
could not be reached and why.
Nothing here changes a node; changes go through playbooks.

fabric (with paramiko and invoke) costs ~0.1 s to import, so it is imported by the functions that
connect: ``validate``, ``plan`` and ``--help`` do not pay for it.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.model import sshconfig
from sparkctl.ssh.sections import Sections, parse_sections
from sparkctl.ssh.targets import (
    Target,
    known_hosts_from_args,
    read_ssh_config,
    ssh_options_from_args,
    targets_for,
)

if TYPE_CHECKING:
    import fabric

__all__ = [
    "AUTH_TIMEOUT_S", "BANNER_TIMEOUT_S", "CONNECT_TIMEOUT_S", "Fleet", "HostResult", "Sections",
    "Target", "joined_script", "known_hosts_from_args", "parse_sections", "run_all", "split_results",
    "ssh_options_from_args", "targets_for",
]

# The TCP connect (the model's: sparkctl.ansible.reach waits the same before a playbook).
CONNECT_TIMEOUT_S = sshconfig.CONNECT_TIMEOUT_S
# Past the TCP connect, sshd forks and sends its banner, then key exchange and login: on a loaded
# node (the lab's four nodes share the controller's cores; a Spark compiling or swapping) each takes
# its turn for CPU. 3 s, the connect timeout, was once used for these too, and a node at load ~12
# timed out in the banner exchange although it answered a few seconds later.
BANNER_TIMEOUT_S = 20.0
AUTH_TIMEOUT_S = 20.0
# A connection sshd dropped before or during its banner (MaxStartups on a busy node, a reset), or a
# banner that did not come in time, is tried again after a pause that doubles, while the attempts
# stay within CONNECT_BUDGET_S. Refused connections, TCP timeouts, host-key and login failures are
# answers, not load: they are never retried.
CONNECT_ATTEMPTS = 4
CONNECT_BACKOFF_S = 0.5
CONNECT_BUDGET_S = 30.0
_sleep = time.sleep  # the pause between attempts (tests record it)
# ssh's own defaults, for a node or jump host whose inventory and ssh_config name no known_hosts
DEFAULT_KNOWN_HOSTS = (
    Path("~/.ssh/known_hosts"), Path("~/.ssh/known_hosts2"), Path("/etc/ssh/ssh_known_hosts"),
)


@dataclass
class HostResult:
    """What one node answered (or why it did not)."""

    name: str
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None    # set when the node was unreachable or the command timed out
    seconds: float = 0.0

    @property
    def reachable(self) -> bool:
        return self.error is None

    @property
    def ok(self) -> bool:
        return self.error is None and self.rc == 0


class _Unreachable(Exception):
    """A connection (to the node or to a jump host on the way) could not be opened; says why."""


class _Transient(_Unreachable):
    """A failure a busy sshd causes (no banner in time, the connection dropped during the
    handshake): worth another attempt."""


def _transient(exc: BaseException) -> bool:
    """True for what a loaded sshd does to a connection it accepted: the banner did not come in
    time, or it closed or reset the connection before login (sshd's MaxStartups, a slow fork).
    Never for a refused connection or a TCP timeout (the node is not there), a host key that does
    not match or a refused login (answers that another attempt would only repeat)."""
    import paramiko

    if isinstance(exc, paramiko.BadHostKeyException | paramiko.ChannelException):
        return False
    if isinstance(exc, paramiko.AuthenticationException):
        return "timeout" in str(exc).lower()  # "Authentication timeout." — no answer, not a refusal
    if isinstance(exc, EOFError | ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return True
    if isinstance(exc, paramiko.SSHException):
        text = str(exc).lower()
        return any(s in text for s in ("banner", "eof", "reset", "closed"))
    return False


# --- connections ------------------------------------------------------------------------------


def _where(conn: fabric.Connection) -> str:
    return f"{conn.host}:{conn.port}"


def _reason(exc: BaseException, conn: fabric.Connection, known: str, hop: bool = False) -> str:
    import paramiko

    where = ("jump host " if hop else "") + _where(conn)
    if isinstance(exc, paramiko.BadHostKeyException):
        return f"host key of {where} does not match {known} (possible impostor)"
    text = str(exc)
    if "not found in known_hosts" in text:
        return f"host key of {where} is not in {known} (refused)"
    transport = conn.client.get_transport()
    # Past the host key but not logged in: paramiko re-raises the last key-file error it met
    # (e.g. "encountered RSA key, expected OPENSSH key") rather than the refused login.
    logging_in = transport is not None and transport.is_active() and not transport.is_authenticated()
    if logging_in or isinstance(exc, paramiko.AuthenticationException):
        return f"SSH authentication failed for {conn.user}@{where}"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError | ConnectionRefusedError):
        return f"connection refused by {where}"
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"timed out connecting to {where}"
    if isinstance(exc, paramiko.SSHException) and "banner" in text.lower():
        return f"{where} accepted the connection but its SSH banner did not come ({text.strip()})"
    if isinstance(exc, paramiko.ChannelException):
        return f"the jump host could not open a connection to {where}: {exc.text or exc}"
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"cannot reach {where}: {exc.strerror or exc}"
    return f"{type(exc).__name__}: {text or 'SSH error'} ({where})"


def _known_hosts_files(conn: fabric.Connection, pinned: Path | None) -> list[Path]:
    if pinned is not None:
        return [pinned]
    named = str(conn.ssh_config.get("userknownhostsfile") or "").split()
    return [Path(p).expanduser() for p in named] or [p.expanduser() for p in DEFAULT_KNOWN_HOSTS]


def _hop_known_hosts(hop: fabric.Connection, target: Target) -> list[Path]:
    """A jump host's keys: its own known_hosts (as ssh would use for it), and the inventory's file."""
    return [*_known_hosts_files(hop, None), *([target.known_hosts] if target.known_hosts else [])]


def _pin(conn: fabric.Connection, files: Iterable[Path]) -> None:
    """Verify the server's key against ``files`` only; refuse every other key."""
    import paramiko

    client = conn.client
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    for path in files:
        if path.is_file():
            client.load_system_host_keys(str(path))


class Fleet:
    """Persistent verified connections to a set of nodes; ``run`` fans one script out in parallel.

    Used once by ``status`` and repeatedly by the boot watch of ``up`` (a broken connection is
    reopened on the next call). Use as a context manager.

    fabric's ``ThreadingGroup`` runs one command with one set of arguments everywhere; the probe
    sends each node its own script on stdin, so the fan-out is a thread pool over ``Connection``s
    (what ``ThreadingGroup`` does inside), kept alive between calls.
    """

    def __init__(self, targets: Iterable[Target], connect_timeout: float = CONNECT_TIMEOUT_S,
                 banner_timeout: float = BANNER_TIMEOUT_S, auth_timeout: float = AUTH_TIMEOUT_S):
        self.targets = {t.name: t for t in targets}
        self.connect_timeout = connect_timeout
        self.banner_timeout = banner_timeout
        self.auth_timeout = auth_timeout
        self._conns: dict[str, fabric.Connection] = {}
        self._configs: dict[tuple[Path, ...], Any] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.targets)), thread_name_prefix="ssh")

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- building connections

    def _config(self, files: tuple[Path, ...]) -> Any:
        import fabric

        with self._lock:
            config = self._configs.get(files)
            if config is None:
                config = fabric.Config(
                    ssh_config=read_ssh_config(files),
                    lazy=True,  # no ~/.fabric.yaml or /etc/fabric.yaml: only ssh's own files count
                    overrides={"connect_kwargs": self._timeouts(), "forward_agent": False,
                               "timeouts": {"connect": math.ceil(self.banner_timeout)}},
                )
                self._configs[files] = config
            # Each connection gets a copy of its own: invoke's Config rebuilds its merged view
            # (briefly empty) on any write, so one connection's write must never be visible to
            # another connection reading its configuration in another thread.
            return config.clone()

    def _timeouts(self) -> dict[str, float]:
        # channel_timeout: opening the session channel, the same wait for sshd as the banner's
        return {"banner_timeout": self.banner_timeout, "auth_timeout": self.auth_timeout,
                "channel_timeout": self.banner_timeout}

    def connection(self, target: Target) -> fabric.Connection:
        """A (not yet opened) Connection for ``target``, host keys pinned on every hop."""
        import fabric

        config = self._config(target.ssh_config)
        lookup = config.base_ssh_config.lookup(target.address)
        jump = target.proxy_jump or lookup.get("proxyjump")
        gateway: Any = False
        if jump and jump.lower() != "none":
            gateway = None
            for hop in jump.split(","):  # first hop dialled directly (or as its own config says)
                # connect_kwargs of its own: without it fabric hands the hop the config's own dict,
                # and _dial's socket would be written into the configuration
                gateway = fabric.Connection(hop.strip(), config=config, gateway=gateway,
                                            connect_timeout=math.ceil(self.banner_timeout),
                                            connect_kwargs=dict(self._timeouts()))
        elif lookup.get("proxycommand") and lookup["proxycommand"].lower() != "none":
            gateway = lookup["proxycommand"]
        keys = [str(k) for k in target.key_files if k.expanduser().exists()]
        conn = fabric.Connection(
            target.address,
            user=target.user,
            port=target.port,
            config=config,
            gateway=gateway,
            forward_agent=False,
            # paramiko uses this for the whole handshake (start_client); the TCP connect gets
            # connect_timeout in _dial
            connect_timeout=math.ceil(self.banner_timeout),
            connect_kwargs={**self._timeouts(), "key_filename": keys,
                            "look_for_keys": not keys, "allow_agent": not keys},
        )
        # ssh_config's IdentityFile entries join the list; ssh skips the ones that do not exist.
        merged = [k for k in conn.connect_kwargs.get("key_filename", []) if Path(k).expanduser().exists()]
        conn.connect_kwargs["key_filename"] = list(dict.fromkeys(merged))
        if not conn.connect_kwargs["key_filename"]:
            del conn.connect_kwargs["key_filename"]
        _pin(conn, _known_hosts_files(conn, target.known_hosts))
        for hop in _hops(conn):  # including the hops a jump host's own ProxyJump adds
            _pin(hop, _hop_known_hosts(hop, target))
        return conn

    def _open(self, target: Target) -> fabric.Connection:
        with self._lock:
            kept = self._conns.get(target.name)
        if kept is not None and kept.is_connected:
            return kept
        if kept is not None:
            kept.close()
        if target.known_hosts is not None and not target.known_hosts.is_file():
            raise _Unreachable(f"known_hosts file {target.known_hosts} does not exist")
        conn = self._connect_patiently(target)
        transport = conn.transport
        if transport is not None:
            transport.set_keepalive(5)
        with self._lock:
            self._conns[target.name] = conn
        return conn

    def _connect_patiently(self, target: Target) -> fabric.Connection:
        """_connect, tried again after what a busy sshd does, with a doubling pause, while the
        attempts stay within CONNECT_BUDGET_S."""
        start, pause, attempt = time.monotonic(), CONNECT_BACKOFF_S, 1
        while True:
            try:
                return self._connect(target)
            except _Transient as exc:
                spent = time.monotonic() - start
                if attempt == CONNECT_ATTEMPTS or spent + pause >= CONNECT_BUDGET_S:
                    tries = f"{attempt} attempt{'s' if attempt > 1 else ''} in {spent:.0f} s"
                    raise _Unreachable(f"{exc} ({tries})") from exc.__cause__
            _sleep(pause)
            pause, attempt = pause * 2, attempt + 1

    def _connect(self, target: Target) -> fabric.Connection:
        """One attempt: a fresh Connection, its hops opened first (so a failure names the hop).
        Raises _Transient for what a busy sshd does (worth another attempt), _Unreachable else."""
        conn = self.connection(target)
        known = str(target.known_hosts or "known_hosts")
        for hop in reversed(_hops(conn)):
            try:
                self._dial(hop)
                hop.open()
            except Exception as exc:
                known_hop = ", ".join(str(p) for p in _hop_known_hosts(hop, target))
                reason = _reason(exc, hop, known_hop, hop=True)
                _close(conn)
                raise (_Transient if _transient(exc) else _Unreachable)(reason) from exc
        try:
            self._dial(conn)
            conn.open()
        except Exception as exc:
            reason = _reason(exc, conn, known)
            _close(conn)
            raise (_Transient if _transient(exc) else _Unreachable)(reason) from exc
        return conn

    def _dial(self, conn: fabric.Connection) -> None:
        """The TCP connect of a connection dialled directly, within connect_timeout: paramiko would
        give the TCP connect and the whole SSH handshake one timeout, and the handshake of a loaded
        node needs more than a node that is not there should cost."""
        if conn.gateway:  # through a jump host or a ProxyCommand: that opens the stream
            return
        sock = socket.create_connection((conn.host, conn.port), timeout=self.connect_timeout)
        sock.settimeout(None)
        if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux
            # A node that vanishes without closing (powered off, its network gone) never acknowledges
            # what is sent to it: the kernel ends the connection after this long, so every wait on it
            # (paramiko's channel requests have none of their own) ends, and the node is reported.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(UNACKED_S * 1000))
        conn.connect_kwargs["sock"] = sock

    def _drop(self, name: str) -> None:
        with self._lock:
            conn = self._conns.pop(name, None)
        if conn is not None:
            _close(conn)

    # -- running

    def _one(self, target: Target, script: str, timeout: float) -> HostResult:
        start = time.monotonic()
        try:
            conn = self._open(target)
        except _Unreachable as exc:
            return HostResult(target.name, error=str(exc), seconds=time.monotonic() - start)
        shell = "sudo -n /bin/sh -s" if target.sudo else "/bin/sh -s"
        try:
            ran = _exec(conn, shell, script, timeout)
        except Exception as exc:
            reason = _reason(exc, conn, str(target.known_hosts))
            self._drop(target.name)
            return HostResult(target.name, error=reason, seconds=time.monotonic() - start)
        took = time.monotonic() - start
        if ran.timed_out:
            return HostResult(target.name, None, ran.stdout, ran.stderr,
                              f"command timed out after {timeout:.0f} s", took)
        if ran.rc is None:
            self._drop(target.name)
            return HostResult(target.name, None, ran.stdout, ran.stderr,
                              f"connection to {_where(conn)} lost", took)
        return HostResult(target.name, ran.rc, ran.stdout, ran.stderr, None, took)

    def run(
        self,
        script: str | Mapping[str, str] | Callable[[Target], str],
        timeout: float = 10.0,
        only: Iterable[str] | None = None,
    ) -> dict[str, HostResult]:
        """Run a script on every node (or ``only`` some) in parallel: {node name: HostResult}.

        ``script`` is one text for all, a mapping node name -> text, or a function of the Target.
        """
        names = list(only) if only is not None else list(self.targets)
        futures = {}
        for name in names:
            target = self.targets[name]
            if callable(script):
                text = script(target)
            elif isinstance(script, str):
                text = script
            else:
                text = script[name]
            futures[name] = self._pool.submit(self._one, target, text, timeout)
        return {name: fut.result() for name, fut in futures.items()}

    def stream(self, name: str, command: str, on_line: Callable[[str, str], None],
               stop: threading.Event | None = None) -> int | None:
        """Run a long command (e.g. ``journalctl -f``) on one node, calling ``on_line(node, line)``.

        Read from the channel as it comes rather than through ``Connection.run``, which keeps
        all the output in memory for its result.
        """
        target = self.targets[name]
        try:
            conn = self._open(target)
        except _Unreachable as exc:
            on_line(name, f"unreachable: {exc}")
            return None
        chan = conn.create_session()
        chan.set_combine_stderr(True)
        chan.exec_command(f"sudo -n {command}" if target.sudo else command)
        chan.shutdown_write()
        chan.settimeout(0.5)
        buf = b""
        try:
            while not (stop is not None and stop.is_set()):
                try:
                    data = chan.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    on_line(name, line.decode(errors="replace"))
        finally:
            if buf:
                on_line(name, buf.decode(errors="replace"))
            chan.close()
        return chan.recv_exit_status() if chan.exit_status_ready() else None

    def close(self) -> None:
        with self._lock:
            conns = list(self._conns.values())
            self._conns.clear()
        for conn in conns:
            _close(conn)
        self._pool.shutdown(wait=False, cancel_futures=True)


def _hops(conn: fabric.Connection) -> list[fabric.Connection]:
    """The jump hosts in front of ``conn``, nearest first."""
    out = []
    gw = conn.gateway
    while gw is not None and not isinstance(gw, str | bool):
        out.append(gw)
        gw = gw.gateway
    return out


def _close(conn: fabric.Connection) -> None:
    for c in [conn, *_hops(conn)]:
        c.close()


@dataclass
class _Ran:
    rc: int | None           # None: no exit status came (timed out, or the connection was lost)
    stdout: str
    stderr: str
    timed_out: bool = False


# How long one wait on the channel may block: a lost connection is noticed within it.
_POLL_S = 0.5
# How long data sent to a node may stay unacknowledged before the kernel ends the connection
# (TCP_USER_TIMEOUT). Acknowledgements come from the node's kernel, not from its loaded processes.
UNACKED_S = 20.0


def _exec(conn: fabric.Connection, command: str, stdin_text: str, timeout: float) -> _Ran:
    """``command`` on a session channel of ``conn``: ``stdin_text`` written whole and closed, stdout
    and stderr read as they come, the exit status awaited, all within ``timeout`` seconds.

    One blocking reader in the calling thread, woken by the channel itself: fabric's
    ``Connection.run`` (invoke's runner) gives every command three threads that poll every 10 ms,
    which costs the controller CPU for as long as a command runs on any node (the boot watch, the
    memory guard: bench/fleet_wait.py). On timeout the channel is closed (sshd then ends the
    command), as invoke does."""
    deadline = time.monotonic() + timeout
    # Within the command's time: paramiko waits an hour for a channel a silent peer never opens.
    chan = conn.transport.open_session(timeout=max(0.001, timeout))
    out: list[bytes] = []
    err: list[bytes] = []

    def drain_stderr() -> None:
        while chan.recv_stderr_ready():
            err.append(chan.recv_stderr(65536))

    def ran(rc: int | None, timed_out: bool = False) -> _Ran:
        drain_stderr()
        return _Ran(rc, b"".join(out).decode("utf-8", "replace"), b"".join(err).decode("utf-8", "replace"),
                    timed_out)

    try:
        chan.settimeout(max(0.001, timeout))
        chan.exec_command(command)
        try:
            chan.sendall(stdin_text.encode())  # a script larger than the window waits for the reader
        except TimeoutError:
            return ran(None, timed_out=True)
        chan.shutdown_write()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return ran(None, timed_out=True)
            chan.settimeout(min(left, _POLL_S))
            try:
                data = chan.recv(65536)
            except TimeoutError:
                drain_stderr()
                if not conn.is_connected:
                    return ran(None)
                continue
            if not data:
                break
            out.append(data)
            drain_stderr()
        # EOF: everything the command wrote has come; its exit status follows.
        while not chan.status_event.wait(min(max(deadline - time.monotonic(), 0.0), _POLL_S)):
            if deadline - time.monotonic() <= 0:
                return ran(None, timed_out=True)
            if not conn.is_connected:
                return ran(None)
        rc = chan.recv_exit_status()
        # -1: no exit status was sent. With the transport gone, that is a lost connection (paramiko
        # ends a channel whose transport closes); with it alive, a command ended by a signal.
        return ran(None if rc == -1 and not conn.is_connected else rc)
    finally:
        chan.close()


def run_all(targets: Iterable[Target], script: str | Mapping[str, str] | Callable[[Target], str],
            timeout: float = 10.0) -> dict[str, HostResult]:
    """One-shot fan-out: connect to every node in parallel, run one script each, close."""
    with Fleet(targets) as fleet:
        return fleet.run(script, timeout)


# Ends each part of a joined script, on stdout (with the part's exit status) and on stderr.
PART_END = "SPARKCTL-PART-END"


def joined_script(*parts: str) -> str:
    """Shell text running ``parts`` one after the other in one SSH round, each in a subshell of its
    own (a part may ``exec``), each followed by a line marking its end on stdout, with its exit
    status, and on stderr: :func:`split_results` gives each part its own result back."""
    for part in parts:
        if PART_END in part:
            raise ValueError(f"a part of the script holds the end marker {PART_END}")
    ends = f"echo {PART_END} $?\necho {PART_END} >&2\n"
    return "".join(f"(\n{part.rstrip(chr(10))}\n)\n{ends}" for part in parts)


def _parts(text: str, count: int) -> list[tuple[str, int | None]]:
    """``count`` (text, exit status) pairs cut at the end markers; a part that never ended (the
    round was cut short) has what came and no status, the parts after it nothing."""
    out: list[tuple[str, int | None]] = []
    lines: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith(PART_END):
            status = line[len(PART_END):].strip()
            out.append(("".join(lines), int(status) if status.lstrip("-").isdigit() else None))
            lines = []
        else:
            lines.append(line)
    if len(out) < count:
        out.append(("".join(lines), None))
    return (out + [("", None)] * count)[:count]


def split_results(results: Mapping[str, HostResult], count: int) -> list[dict[str, HostResult]]:
    """Each part's results of a :func:`joined_script` round of ``count`` parts, in order: its own
    stdout, stderr and exit status; a node that was not reached (or whose round failed) gives every
    part that same reason."""
    out: list[dict[str, HostResult]] = [{} for _ in range(count)]
    for name, res in results.items():
        stdout = _parts(res.stdout, count)
        stderr = _parts(res.stderr, count)
        for i in range(count):
            rc = stdout[i][1] if stdout[i][1] is not None else res.rc
            out[i][name] = HostResult(name, rc, stdout[i][0], stderr[i][0], res.error, res.seconds)
    return out
