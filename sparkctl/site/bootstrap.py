"""`sparkctl bootstrap`: first contact with a fresh DGX OS box, which has a login user with a
password and no key.

1. Every node's host key is read (in parallel) and decided in the order given
   (``site.hostkeys.decide``: pinned already, from ``--host-keys``, confirmed, or trusted on first
   use); the new ones are pinned in ``--known-hosts``, a changed one is refused.
2. Per node, in parallel: log in with the password (the host key must be the one decided: the
   policy below records what the node presents, then accepts only that key), run
   ``nodeside.bootstrap`` as root (``sudo -S`` reads the password from stdin unless the login user
   is root), then log in BY KEY as the operator, prove ``sudo -n true`` and report Docker and the
   NVIDIA container toolkit.

The password travels only to sshd's password authentication and to sudo's stdin: never in argv,
and every text that comes back from a node is scrubbed of it before it is kept.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl.errors import InputError
from sparkctl.nodeside import ship
from sparkctl.site import access, hostkeys
from sparkctl.site.access import Address, NodeResult, Secret, scrub
from sparkctl.site.keys import AdminKey

if TYPE_CHECKING:
    import paramiko

__all__ = ["USER_NAME", "Address", "NodeResult", "Request", "Secret", "run"]

SUDOERS_DIR = "/etc/sudoers.d"
# A user name useradd and a sudoers file take as they are (no quoting, no '.': sudo skips such files).
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
CONNECT_TIMEOUT_S = 10.0
# A loaded node's sshd takes its turn for CPU before its banner and the login (sparkctl.ssh.fleet's
# figures: 3 s once timed out a node at load ~12 that answered seconds later).
BANNER_TIMEOUT_S = 20.0
AUTH_TIMEOUT_S = 20.0
COMMAND_TIMEOUT_S = 120.0
EOF = "SPARKCTL_BOOTSTRAP_EOF"


@dataclass
class Request:
    addresses: list[Address]
    login: str
    operator: str
    password: Secret
    key: AdminKey
    known_hosts: Path
    host_keys: Path | None = None
    trust_on_first_use: bool = False
    require_gpu_runtime: bool = False


def _expect(expected: hostkeys.HostKey) -> paramiko.MissingHostKeyPolicy:
    """A MissingHostKeyPolicy that records the key the node presents, then accepts it only when it
    is the one decided for that node (the client loads no known_hosts: every key is 'missing' to it,
    so every connection goes through this decision). Never AutoAddPolicy."""
    import paramiko

    class Expect(paramiko.MissingHostKeyPolicy):
        seen: hostkeys.HostKey | None = None

        def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
            self.seen = hostkeys.HostKey(hostname, key.get_name(), key.get_base64())
            if self.seen.blob != expected.blob:
                raise access.HostKeyChanged(self.seen, expected)

    return Expect()


def _only(keytype: str) -> dict[str, list[str]]:
    """paramiko's ``disabled_algorithms`` that leave only ``keytype`` for the host key: a node with
    several host keys then presents the one decided for it, not the one paramiko prefers."""
    import paramiko

    wanted = {"rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"} if keytype == "ssh-rsa" else {keytype}
    return {"keys": [k for k in getattr(paramiko.Transport, "_preferred_keys", ()) if k not in wanted]}


def _connect(addr: Address, user: str, expected: hostkeys.HostKey, *, password: Secret | None = None,
             key_file: Path | None = None) -> paramiko.SSHClient:
    import paramiko

    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(_expect(expected))
    try:
        client.connect(addr.host, addr.port, username=user, password=password.reveal() if password else None,
                       key_filename=str(key_file) if key_file else None, look_for_keys=False,
                       allow_agent=password is None and key_file is None, timeout=CONNECT_TIMEOUT_S,
                       banner_timeout=BANNER_TIMEOUT_S, auth_timeout=AUTH_TIMEOUT_S,
                       disabled_algorithms=_only(expected.keytype))
    except BaseException:
        client.close()
        raise
    return client


def _exec(client: paramiko.SSHClient, command: str, stdin: bytes = b"") -> tuple[int, str, str]:
    chan = client.get_transport().open_session()  # type: ignore[union-attr]
    chan.settimeout(COMMAND_TIMEOUT_S)
    chan.exec_command(command)
    if stdin:
        chan.sendall(stdin)
    chan.shutdown_write()
    out, err = chan.makefile("rb").read(), chan.makefile_stderr("rb").read()
    rc = chan.recv_exit_status()
    chan.close()
    return rc, out.decode(errors="replace"), err.decode(errors="replace")


def node_command(params: dict[str, Any], sudo: bool) -> str:
    """The command line that runs ``nodeside.bootstrap`` with ``params`` on a node, as root through
    ``sudo -S`` (which reads the password from stdin) when ``sudo``. The script goes in the command
    line because stdin is sudo's; it holds no secret (the public key, the user's name)."""
    command = f"sh -c {shlex.quote(ship.python_script(['nodeside.bootstrap'], params, EOF))}"
    return f"sudo -S -p '' -- {command}" if sudo else command


def _node_step(client: paramiko.SSHClient, params: dict[str, Any], sudo: Secret | None,
               secret: Secret) -> dict[str, Any]:
    """Run ``nodeside.bootstrap`` (as root through ``sudo -S`` when ``sudo`` is the password) and
    return its JSON answer; access.StepFailed says why there is none."""
    command = node_command(params, sudo is not None)
    rc, out, err = _exec(client, command, (sudo.reveal() + "\n").encode() if sudo else b"")
    out, err = scrub(out, secret), scrub(err, secret)
    try:
        doc = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise access.step_failed(rc, err, sudo is not None) from None
    if not doc.get("ok"):
        raise access.StepFailed(f"the node could not set up the operator: {doc.get('error')}",
                                "the message above; then run bootstrap again")
    return dict(doc)


def _bootstrap(req: Request, res: NodeResult, key: hostkeys.HostKey) -> None:
    addr, secret = res.address, req.password
    params = {"step": "apply", "user": req.operator, "key": req.key.public, "sudoers_dir": SUDOERS_DIR}
    with access.stage(res, "login", req.login, secret=secret):
        client = _connect(addr, req.login, key, password=secret)
    try:
        with access.stage(res, "setup", req.login, secret=secret):
            res.steps = _node_step(client, params, None if req.login == "root" else secret, secret)["steps"]
    finally:
        client.close()
    with access.stage(res, "key login", req.operator, req.key.private, secret=secret):
        client = _connect(addr, req.operator, key, key_file=req.key.private)
    try:
        with access.stage(res, "sudo", req.operator, secret=secret):
            rc, _out, err = _exec(client, "sudo -n true")
            if rc != 0:
                raise access.sudo_n_failed(req.operator, scrub(err, secret))
            res.sudo = True
        with access.stage(res, "check", req.operator, secret=secret):
            found = _node_step(client, {"step": "check"}, None, secret)
    finally:
        client.close()
    res.observe(found["docker"], found["gpu_runtime"], req.require_gpu_runtime)


def _decide(req: Request, results: list[NodeResult], offered: list[hostkeys.HostKey | None],
            known: paramiko.HostKeys, vouched: paramiko.HostKeys | None,
            ask: hostkeys.Ask) -> dict[int, hostkeys.HostKey]:
    """Each reachable node's key, decided in the order given; the new ones pinned."""
    decided: dict[int, hostkeys.HostKey] = {}
    new: list[hostkeys.HostKey] = []
    for i, (res, key) in enumerate(zip(results, offered, strict=True)):
        if key is None:
            continue
        from_file = None
        if vouched is not None:  # the offered type first: that key is the one the node will present
            from_file = sorted(hostkeys.pinned(vouched, key.name), key=lambda k: k.keytype != key.keytype)
        try:
            with access.stage(res, "host key", req.login, known_hosts=req.known_hosts):
                    decision = hostkeys.decide(key.name, known, offered=key, from_file=from_file,
                                           file_name=str(req.host_keys), ask=ask,
                                           trust_on_first_use=req.trust_on_first_use)
        except access.Stopped:
            continue
        decided[i] = decision.key
        res.host_key, res.fingerprint = decision.how, decision.key.fingerprint
        if decision.new:
            new.append(decision.key)
    if new:
        existing = req.known_hosts.read_text() if req.known_hosts.is_file() else ""
        tmp = req.known_hosts.with_name(f".{req.known_hosts.name}.tmp")
        tmp.write_text(hostkeys.text_with(existing, new))
        tmp.replace(req.known_hosts)
    return decided


def _scan(res: NodeResult, key_types: list[str]) -> hostkeys.HostKey | None:
    """The node's host key, of the first of ``key_types`` (those pinned or vouched for it) it has."""
    try:
        with access.stage(res, "connect", ""):
            return hostkeys.scan(res.address.host, res.address.port, timeout=CONNECT_TIMEOUT_S,
                                 key_types=key_types)
    except access.Stopped:
        return None


def run(req: Request, ask: hostkeys.Ask,
        progress: Callable[[NodeResult], None] | None = None) -> list[NodeResult]:
    """Bootstrap every node of ``req``; one result per node, in the order given. The known_hosts
    files are read first: one that cannot be is InputError (exit 2) before any node is contacted."""
    if not req.known_hosts.absolute().parent.is_dir():
        raise InputError(f"--known-hosts {req.known_hosts}: its directory does not exist",
                         hint="create it, or name a file in an existing directory")
    known = hostkeys.read(req.known_hosts)
    vouched = hostkeys.read(req.host_keys) if req.host_keys is not None else None
    results = [NodeResult(a) for a in req.addresses]
    workers = max(1, min(16, len(results)))
    names = [hostkeys.known_name(a.host, a.port) for a in req.addresses]
    files = [f for f in (known, vouched) if f is not None]
    types = [[k.keytype for f in files for k in hostkeys.pinned(f, n)] for n in names]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        offered = list(pool.map(_scan, results, types))
    decided = _decide(req, results, offered, known, vouched, ask)

    def one(i: int) -> None:
        if i in decided:
            with contextlib.suppress(access.Stopped):  # the node's result says why
                _bootstrap(req, results[i], decided[i])
        if progress is not None:
            progress(results[i])

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, range(len(results))))
    return results

