"""Host keys for a new site: read a node's key, show its fingerprint, pin it in known_hosts.

The file is OpenSSH's known_hosts format (what ``ssh``, Ansible and sparkctl's SSH fan-out read,
and what ``sparkctl bootstrap`` writes): ``address keytype base64``, or ``[address]:port ...`` for
a port other than 22; hashed and comma-separated host fields are read too. A key is only ever
added after it was confirmed (asked, taken from a file of known keys, or trusted on first use by
an explicit flag); a key that differs from a pinned one is refused, never replaced.
"""

from __future__ import annotations

import base64
import hashlib
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.errors import EXIT_FAILED, EXIT_USAGE, InputError, SparkctlError

if TYPE_CHECKING:  # paramiko is imported by the functions that use it (~0.1 s)
    import paramiko

DEFAULT_PORT = 22
SCAN_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class HostKey:
    """One host's public key: the known_hosts name it is pinned under, its type and base64 blob."""

    name: str
    keytype: str
    blob: str

    @property
    def fingerprint(self) -> str:
        """As ``ssh`` prints it: SHA256:<base64 of the key's sha256, unpadded>."""
        digest = hashlib.sha256(base64.b64decode(self.blob)).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")

    def line(self) -> str:
        return f"{self.name} {self.keytype} {self.blob}"


def known_name(address: str, port: int = DEFAULT_PORT) -> str:
    """The host field known_hosts uses for ``address``:``port``."""
    return address if port == DEFAULT_PORT else f"[{address}]:{port}"


def read(path: Path) -> paramiko.HostKeys:
    """The keys of a known_hosts file (an absent file has none)."""
    import paramiko

    keys = paramiko.HostKeys()
    if not path.exists():
        return keys
    if not path.is_file():
        raise InputError(f"{path} is not a file", hint="name a known_hosts file")
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"known_hosts file {path} cannot be read: {exc}",
                         hint="fix its permissions, or name another file") from exc
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
        except Exception as exc:  # paramiko and the key libraries raise many kinds for a bad key
            raise InputError(f"{path}:{lineno}: not a known_hosts line ({type(exc).__name__}: {exc})",
                             hint="fix or remove that line (ssh-keygen -R HOST -f FILE)") from exc
        if entry is None or entry.key is None:  # a type paramiko does not know (e.g. a certificate)
            continue
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)
    return keys


def pinned(keys: paramiko.HostKeys, name: str) -> list[HostKey]:
    """The keys ``keys`` pins for the host field ``name``."""
    entry = keys.lookup(name)
    if not entry:
        return []
    return [HostKey(name, keytype, key.get_base64()) for keytype, key in entry.items()]


def _algorithms(key_types: Sequence[str], offered: Sequence[str]) -> list[str]:
    """The host key algorithms to ask for, ``key_types`` (as known_hosts names them) first: a server
    with several host keys then presents the one that is pinned, not the one paramiko prefers."""
    wanted: list[str] = []
    for kt in key_types:
        wanted += ["rsa-sha2-512", "rsa-sha2-256"] if kt == "ssh-rsa" else [kt]
    first = [a for a in dict.fromkeys(wanted) if a in offered]
    return first + [a for a in offered if a not in first]


def scan(address: str, port: int = DEFAULT_PORT, timeout: float = SCAN_TIMEOUT_S,
         key_types: Sequence[str] = ()) -> HostKey:
    """The key the SSH server at ``address``:``port`` presents, of the first of ``key_types`` it has
    (the types pinned for it) else of the type paramiko prefers. Nothing is authenticated, nothing
    trusted: the caller decides. SparkctlError (exit 1) naming the host when it cannot be read."""
    import paramiko

    name = known_name(address, port)
    try:
        sock = socket.create_connection((address, port), timeout=min(timeout, 5.0))
    except OSError as exc:
        raise SparkctlError(f"cannot reach {address}:{port}: {exc.strerror or exc}",
                            hint="check the address and that sshd runs there", exit_code=EXIT_FAILED) from exc
    transport = paramiko.Transport(sock)
    transport.banner_timeout = timeout
    options = transport.get_security_options()
    options.key_types = _algorithms(key_types, list(options.key_types))
    try:
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
        return HostKey(name, key.get_name(), key.get_base64())
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise SparkctlError(f"{address}:{port} did not complete the SSH key exchange: {exc}",
                            hint="check that sshd runs there", exit_code=EXIT_FAILED) from exc
    finally:
        transport.close()
        sock.close()


Ask = Callable[[HostKey], bool | None]  # True: accept, False: refuse, None: nobody to ask


@dataclass(frozen=True)
class Decision:
    key: HostKey
    new: bool  # not pinned before: its line is added to known_hosts
    how: str  # "pinned" | "confirmed" | "trusted on first use" | "from <file>"


def decide(name: str, known: paramiko.HostKeys, *, offered: HostKey | None, from_file: list[HostKey] | None,
           file_name: str = "", ask: Ask, trust_on_first_use: bool = False) -> Decision:
    """Whether the key of host ``name`` may be pinned, and how it was confirmed.

    ``offered`` is the key the host presented (scanned); ``from_file`` the keys a file of known keys
    gives for it (``--host-keys``), or None when no such file is used. A key that differs from the
    pinned one is refused (exit 1); an unconfirmed one too (exit 2)."""
    have = pinned(known, name)
    if from_file is not None:
        if not from_file:
            raise InputError(f"{file_name} has no host key for {name}",
                             hint=f"add it (ssh-keyscan {name.strip('[]').split(']:')[0]} on a trusted path)")
        key = from_file[0]
        if have and not any(h.blob == k.blob for h in have for k in from_file):
            raise SparkctlError(f"the host key {file_name} gives for {name} differs from the one pinned",
                                hint="find out which one is right before removing either",
                                exit_code=EXIT_FAILED)
        return Decision(key, not have, "pinned" if have else f"from {file_name}")
    assert offered is not None
    if have:
        if any(h.blob == offered.blob for h in have):
            return Decision(offered, False, "pinned")
        raise SparkctlError(
            f"host key of {name} ({offered.keytype} {offered.fingerprint}) does not match the pinned one "
            "(possible impostor)",
            hint="if the node was reinstalled, remove its old line from known_hosts after checking the "
                 "new fingerprint on its console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)",
            exit_code=EXIT_FAILED,
        )
    if trust_on_first_use:
        return Decision(offered, True, "trusted on first use")
    answer = ask(offered)
    if answer:
        return Decision(offered, True, "confirmed")
    why = "refused" if answer is False else "not confirmed (no terminal to ask)"
    raise SparkctlError(
        f"host key of {name} ({offered.keytype} {offered.fingerprint}) {why}",
        hint="compare it with the node's console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), then "
             "confirm it, or pass --host-keys FILE with the keys, or --trust-on-first-use",
        exit_code=EXIT_USAGE,
    )


def text_with(existing: str, added: list[HostKey]) -> str:
    """known_hosts text: what it held, then one line per added key."""
    out = existing if not existing or existing.endswith("\n") else existing + "\n"
    return out + "".join(k.line() + "\n" for k in added)


__all__ = ["Ask", "Decision", "HostKey", "decide", "known_name", "pinned", "read", "scan", "text_with"]
