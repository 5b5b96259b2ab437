"""SSH fan-out for fast reads (status, logs, bundle, the boot watch of `up`).

One connection per node, opened in parallel, host keys verified against the inventory's
known_hosts (paramiko ``RejectPolicy``: an unknown or changed key is an error, never accepted).
Each call runs one script per node and returns one ``HostResult`` per node, including the nodes
that could not be reached and why. Nothing here changes a node; changes go through playbooks.
"""

from __future__ import annotations

import contextlib
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # paramiko costs ~0.3 s to import: only the commands that connect pay for it
    import paramiko

CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Target:
    """How to reach one node over SSH."""

    name: str
    address: str
    user: str = "root"
    port: int = 22
    key_files: tuple[Path, ...] = ()
    known_hosts: Path | None = None
    sudo: bool = False          # wrap scripts in `sudo -n` (the SSH user is not root)
    rank: int | None = None


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


# --- building targets from the inventory -------------------------------------------------------


def known_hosts_from_args(common_args: str | None, base: Path) -> Path | None:
    """The UserKnownHostsFile named in ``ansible_ssh_common_args`` (relative paths from ``base``)."""
    if not common_args:
        return None
    words = shlex.split(common_args)
    for i, word in enumerate(words):
        value = None
        if word == "-o" and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith("-o") and len(word) > 2:
            value = word[2:]
        if value and value.lower().startswith("userknownhostsfile"):
            path = Path(value.split("=", 1)[1].strip() if "=" in value else value.split(None, 1)[1])
            return path if path.is_absolute() else (base / path)
    return None


def targets_for(cluster: Any) -> list[Target]:
    """One Target per node of a ``Cluster`` (rank order).

    Connection details come from the cluster model (user, known_hosts, per-node key) and, where
    the inventory ships one (the lab does), from ``<inventory>/ssh_config``.
    """
    inv = Path(cluster.inventory_dir)
    cfg = _ssh_config(inv / "ssh_config")
    out: list[Target] = []
    for node in cluster.nodes:
        hc: dict[str, Any] = dict(cfg.lookup(node.name)) if cfg else {}
        hv: dict[str, Any] = dict(getattr(node, "hostvars", None) or {})
        user = str(hv.get("ansible_user") or getattr(cluster, "ssh_user", None) or hc.get("user") or "root")
        keys: list[Path] = []
        if hv.get("ansible_ssh_private_key_file"):
            keys.append(Path(str(hv["ansible_ssh_private_key_file"])))
        keys += [Path(k) for k in hc.get("identityfile", []) if k]
        known = getattr(cluster, "known_hosts", None)
        if known is None and hc.get("userknownhostsfile"):
            known = Path(str(hc["userknownhostsfile"]).split()[0])
        out.append(
            Target(
                name=node.name,
                address=str(node.mgmt_ip),
                user=user,
                port=int(hv.get("ansible_port") or hc.get("port", 22)),
                key_files=tuple(_abs(k, inv) for k in keys),
                known_hosts=_abs(Path(known), inv) if known else None,
                sudo=user != "root",
                rank=node.rank,
            )
        )
    return out


def _abs(path: Path, base: Path) -> Path:
    path = path.expanduser()
    if path.is_absolute() or path.exists():
        return path
    candidate = base / path
    return candidate if candidate.exists() else path


def _ssh_config(path: Path) -> paramiko.SSHConfig | None:
    if not path.is_file():
        return None
    import paramiko

    return paramiko.SSHConfig.from_path(str(path))


# --- connections ------------------------------------------------------------------------------


def _reason(exc: BaseException, target: Target) -> str:
    import paramiko

    where = f"{target.address}:{target.port}"
    if isinstance(exc, paramiko.BadHostKeyException):
        return f"host key of {where} does not match {target.known_hosts or 'known_hosts'} (possible impostor)"
    if isinstance(exc, paramiko.AuthenticationException):
        return f"SSH authentication failed for {target.user}@{where}"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return f"connection refused by {where}"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {where}"
    if isinstance(exc, TimeoutError):
        return f"timed out connecting to {where}"
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"cannot reach {where}: {exc.strerror or exc}"
    text = str(exc)
    if "not found in known_hosts" in text:
        return f"host key of {where} is not in {target.known_hosts or 'known_hosts'} (refused)"
    return f"{type(exc).__name__}: {text or 'SSH error'} ({where})"


def connect(target: Target, timeout: float = CONNECT_TIMEOUT_S) -> paramiko.SSHClient:
    """Open a verified SSH connection (raises on unknown/changed host keys)."""
    import paramiko

    client = paramiko.SSHClient()
    if target.known_hosts is not None:
        if not target.known_hosts.is_file():
            raise paramiko.SSHException(f"known_hosts file {target.known_hosts} does not exist")
        client.load_host_keys(str(target.known_hosts))
    else:
        client.load_system_host_keys()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    keys = [str(k) for k in target.key_files if k.exists()]
    client.connect(
        hostname=target.address,
        port=target.port,
        username=target.user,
        key_filename=keys or None,  # type: ignore[arg-type]  # paramiko accepts a list
        look_for_keys=not keys,
        allow_agent=not keys,
        timeout=timeout,
        banner_timeout=timeout,
        auth_timeout=timeout,
        channel_timeout=timeout,
    )
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)
    return client


def _run_on(client: paramiko.SSHClient, target: Target, script: str, timeout: float) -> HostResult:
    """Run ``script`` with /bin/sh on an open connection; stdin carries the script (never argv)."""
    import paramiko

    start = time.monotonic()
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        raise paramiko.SSHException("connection closed")
    chan = transport.open_session(timeout=timeout)
    shell = "sudo -n /bin/sh -s" if target.sudo else "/bin/sh -s"
    chan.exec_command(shell)
    chan.sendall(script.encode())
    chan.shutdown_write()
    out, err = bytearray(), bytearray()
    deadline = start + timeout
    chan.settimeout(0.2)
    while True:
        got = False
        while chan.recv_ready():
            out += chan.recv(65536)
            got = True
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
            got = True
        if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
            break  # the exit status follows the last data on the channel
        if time.monotonic() > deadline:
            chan.close()
            return HostResult(
                target.name, None, out.decode(errors="replace"), err.decode(errors="replace"),
                f"command timed out after {timeout:.0f} s", time.monotonic() - start,
            )
        if not got:
            with contextlib.suppress(TimeoutError):
                data = chan.recv(65536)
                if data:
                    out += data
    rc = chan.recv_exit_status()
    chan.close()
    return HostResult(target.name, rc, out.decode(errors="replace"), err.decode(errors="replace"), None,
                      time.monotonic() - start)


class Fleet:
    """Persistent verified connections to a set of nodes; ``run`` fans one script out in parallel.

    Used once by ``status`` and repeatedly by the boot watch of ``up`` (a broken connection is
    reopened on the next call). Use as a context manager.
    """

    def __init__(self, targets: Iterable[Target], connect_timeout: float = CONNECT_TIMEOUT_S):
        self.targets = {t.name: t for t in targets}
        self.connect_timeout = connect_timeout
        self._clients: dict[str, paramiko.SSHClient] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.targets)), thread_name_prefix="ssh")

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _client(self, target: Target) -> paramiko.SSHClient:
        with self._lock:
            client = self._clients.get(target.name)
        if client is not None:
            transport = client.get_transport()
            if transport is not None and transport.is_active():
                return client
            client.close()
        client = connect(target, self.connect_timeout)
        with self._lock:
            self._clients[target.name] = client
        return client

    def _one(self, target: Target, script: str, timeout: float) -> HostResult:
        start = time.monotonic()
        try:
            client = self._client(target)
        except Exception as exc:
            return HostResult(target.name, error=_reason(exc, target), seconds=time.monotonic() - start)
        try:
            return _run_on(client, target, script, timeout)
        except Exception as exc:
            with self._lock:
                self._clients.pop(target.name, None)
            client.close()
            return HostResult(target.name, error=_reason(exc, target), seconds=time.monotonic() - start)

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
        """Run a long command (e.g. ``journalctl -f``) on one node, calling ``on_line(node, line)``."""
        target = self.targets[name]
        client = self._client(target)
        transport = client.get_transport()
        assert transport is not None
        chan = transport.open_session()
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
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            client.close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def run_all(targets: Iterable[Target], script: str | Mapping[str, str] | Callable[[Target], str],
            timeout: float = 10.0) -> dict[str, HostResult]:
    """One-shot fan-out: connect to every node in parallel, run one script each, close."""
    with Fleet(targets) as fleet:
        return fleet.run(script, timeout)


# --- parsing helpers for probe output ----------------------------------------------------------


@dataclass
class Sections:
    """Probe output split into ``key=value`` facts and ``--- name`` text sections."""

    facts: dict[str, str] = field(default_factory=dict)
    blocks: dict[str, str] = field(default_factory=dict)


def parse_sections(text: str) -> Sections:
    """Parse probe output: ``key=value`` lines, and blocks opened by ``--- name`` lines."""
    out = Sections()
    block: str | None = None
    lines: list[str] = []
    for raw in text.splitlines():
        if raw.startswith("--- "):
            if block is not None:
                out.blocks[block] = "\n".join(lines)
            block, lines = raw[4:].strip(), []
            continue
        if block is not None:
            lines.append(raw)
        elif "=" in raw:
            key, value = raw.split("=", 1)
            out.facts[key.strip()] = value.strip()
    if block is not None:
        out.blocks[block] = "\n".join(lines)
    return out
