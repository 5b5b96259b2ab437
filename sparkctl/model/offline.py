"""What `sparkctl validate` checks beyond the inventory's values, still without contacting a node.

An inventory can be valid field by field and fail one command later: the pinned ``known_hosts`` it
names is not there, the SSH key file is missing or readable by others (ssh refuses it), the API
key's file is missing, unreadable, empty or open to the group, a value was never filled in (a
placeholder, ``sparkctl.model.placeholders``). ``check`` looks at each of those on this controller
and returns the problems in the inventory's own style (field, what is wrong, what to do, and the
file:line the field came from); ``validate_inventory`` reports them together with the inventory's
own problems, in one error (exit 2).

Every file is found by the model's one rule (``sshconfig.controller_path``): a relative path is
read from the inventory directory, whatever directory sparkctl runs from.

What cannot be known here is said as a note, not refused: a secret from an environment variable
that is not set in *this* shell (the one that runs `up` may set it).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkctl.errors import InputError, SparkctlError
from sparkctl.model import placeholders, secretenv, sshconfig
from sparkctl.model.loader import load_inventory, read_raw
from sparkctl.model.problems import Problem, Problems

# ssh refuses a private key that group or others may read; sparkctl holds secret files to the same.
PRIVATE_MODE_MASK = 0o077
KEY_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
ARG_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args")
_RELATIVE = "relative paths are read from the inventory directory"
_PIN = ("pin every node's host key in it after checking its fingerprint on the node's console "
        "(`sparkctl init` and `sparkctl bootstrap` write it; or `ssh-keyscan -p PORT ADDRESS`)")


@dataclass
class Offline:
    """The problems found (refused) and the notes (said, not refused)."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _shown(text: str, path: Path) -> str:
    return str(path) if Path(text).expanduser().is_absolute() else f"{path} ({text!r}; {_RELATIVE})"


def _readable_file(path: Path, text: str, where: str, what: str, p: Problems, todo_missing: str) -> bool:
    """Exists, is a file, can be read by this user; a problem under ``where`` otherwise."""
    shown = _shown(text, path)
    if not path.exists():
        p.add(where, f"{what} {shown} does not exist", todo_missing)
        return False
    if not path.is_file():
        p.add(where, f"{what} {shown} is not a file", "name the file itself")
        return False
    try:
        with path.open("rb") as fh:
            fh.read(1)
    except OSError as exc:
        p.add(where, f"{what} {shown} cannot be read: {exc.strerror}", "make it readable by the user running "
              "sparkctl (and Ansible)")
        return False
    return True


def _private(path: Path, where: str, what: str, p: Problems) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & PRIVATE_MODE_MASK:
        p.add(where, f"{what} {path} is mode {mode:04o}: the group or others may read it",
              f"chmod 600 {path}")


class _Files:
    """Each controller file checked once, its problem under the first field that names it."""

    def __init__(self, inv: Path, p: Problems):
        self.inv, self.p = inv, p
        self.seen: set[tuple[str, Path]] = set()

    def _first(self, kind: str, path: Path) -> bool:
        key = (kind, path)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def known_hosts(self, text: str, where: str) -> None:
        path = sshconfig.controller_path(text, self.inv)
        if self._first("known_hosts", path):
            _readable_file(path, text, where, "UserKnownHostsFile", self.p, f"create it and {_PIN}")

    def private_key(self, text: str, where: str) -> None:
        path = sshconfig.controller_path(text, self.inv)
        if not self._first("key", path):
            return
        todo = f"point it at the SSH private key the controller logs in with ({_RELATIVE})"
        if not _readable_file(path, text, where, "SSH key file", self.p, todo):
            return
        head = path.read_bytes()[:64].lstrip()
        if head.startswith((b"ssh-", b"ecdsa-", b"sk-")):
            self.p.add(where, f"SSH key file {path} holds a public key",
                       f"name the private key (probably {path.with_suffix('')})")
            return
        _private(path, where, "SSH key file", self.p)

    def ssh_config(self, text: str, where: str) -> None:
        path = sshconfig.controller_path(text, self.inv)
        if self._first("ssh_config", path):
            _readable_file(path, text, where, "ssh_config (-F)", self.p, "create it, or drop -F")


def _connection_files(raw: Any, inv: Path, p: Problems) -> None:
    files = _Files(inv, p)
    scopes: list[tuple[str, dict[str, Any]]] = [("", raw.site)]
    scopes += [(f"{h.group}.{h.name}", h.vars) for h in raw.hosts.values()]
    for prefix, values in scopes:
        def at(key: str, prefix: str = prefix) -> str:
            return f"{prefix}.{key}" if prefix else key

        for key in KEY_VARS:
            if isinstance(values.get(key), str) and values[key].strip():
                files.private_key(values[key].strip(), at(key))
        for key in ARG_VARS:
            if not isinstance(values.get(key), str):
                continue
            opts = sshconfig.ssh_options_from_args(values[key])
            for value in opts.get("userknownhostsfile", []):
                for name in value.split():  # ssh takes several files, space-separated
                    files.known_hosts(name, at(key))
            for value in opts.get("identityfile", []):
                files.private_key(value, at(key))
            for value in opts.get("-F", []):
                files.ssh_config(value, at(key))


def _effective(raw: Any, host: Any, key: str) -> Any:
    value = host.vars.get(key)
    return raw.site.get(key) if value is None else value


def _known_hosts_of(raw: Any, host: Any, inv: Path) -> Path | None:
    """The pinned file a host is checked against (as ``ssh.targets`` and the loader choose it)."""
    for key in ARG_VARS:
        value = _effective(raw, host, key)
        opts = sshconfig.ssh_options_from_args(value) if isinstance(value, str) else {}
        files = opts.get("userknownhostsfile")
        if files:
            return sshconfig.controller_path(files[0].split()[0], inv)
    default = inv / "known_hosts"
    return default if default.is_file() else None


def _unpinned(raw: Any, inv: Path, notes: list[str]) -> None:
    """Hosts whose pinned known_hosts holds no key for them: the first contact will refuse them (a
    note: the file is filled in by `sparkctl init`/`bootstrap` or by hand once the nodes are up)."""
    import paramiko

    missing: dict[Path, list[str]] = {}
    parsed: dict[Path, Any] = {}
    for host in raw.hosts.values():
        path = _known_hosts_of(raw, host, inv)
        address = host.vars.get("ansible_host")
        if path is None or not isinstance(address, str) or not os.access(path, os.R_OK) or not path.is_file():
            continue  # no pinned file (ssh's own), or its problem is reported above
        if path not in parsed:
            keys = paramiko.HostKeys()
            try:
                keys.load(str(path))
                parsed[path] = keys
            except Exception:  # a malformed line: ssh and paramiko name it at the first contact
                parsed[path] = None
        if parsed[path] is None:
            continue
        hostvars = {k: v for k, v in {**raw.site, **host.vars}.items() if k.startswith("ansible_")}
        port = sshconfig.resolve_port(hostvars, inv, address, host.name)
        name = address if port == sshconfig.DEFAULT_PORT else f"[{address}]:{port}"
        if parsed[path].lookup(name) is None:
            missing.setdefault(path, []).append(f"{host.name} ({name})")
    for path, hosts in missing.items():
        notes.append(f"{path} pins no host key for {', '.join(hosts)}: the first command will refuse "
                     f"{'it' if len(hosts) == 1 else 'them'} as an unknown host key; {_PIN}")


def _secrets(raw: Any, inv: Path, p: Problems, notes: list[str]) -> None:
    refs = raw.site.get("sparkctl_secrets")
    if not isinstance(refs, dict):
        return
    for name, ref in refs.items():
        if not isinstance(ref, dict):
            continue
        where = f"sparkctl_secrets.{name}"
        text = ref.get("file")
        if isinstance(text, str) and text.strip() and "~" not in text:  # '~' is the model's own error
            path = sshconfig.controller_path(text, inv)
            if not _readable_file(path, text, f"{where}.file", "secret file", p,
                                  f"write the secret into it, mode 0600 ({_RELATIVE})"):
                continue
            _private(path, f"{where}.file", "secret file", p)
            value = path.read_text(errors="replace").strip()
            if not value:
                p.add(f"{where}.file", f"secret file {path} is empty", "write the secret into it (one line)")
            elif placeholders.why(value):
                p.add(f"{where}.file", f"secret file {path} holds {placeholders.why(value)}",
                      "write the real secret into it")
        env = ref.get("env")
        if isinstance(env, str) and env and not secretenv.get(env):
            notes.append(f"{where}: ${env} is not set in this environment; `up`, `qualify` and `bench` "
                         f"need it (export {env}=... in the shell that runs them)")


def _dig(site: dict[str, Any], dotted: str) -> Any:
    value: Any = site
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _placeholders(raw: Any, p: Problems) -> None:
    for dotted in placeholders.FIELDS:
        value = _dig(raw.site, dotted)
        reason = placeholders.why(value)
        if reason:
            p.add(dotted, f"{value!r} is {reason}",
                  "write the real value (the example's values show the shape; the publisher's pin, "
                  "`git ls-remote`, the Hub's commit page or `docker image inspect` give the value)")


def check(inv: Path | str, vault_password_file: Path | str | None = None) -> Offline:
    """The offline problems of inventory ``inv`` (none when it cannot even be read: the inventory's
    own error says why)."""
    inv = Path(inv)
    try:
        raw = read_raw(inv, Problems(), vault_password_file)
    except SparkctlError:
        return Offline()
    p = Problems()
    notes: list[str] = []
    _connection_files(raw, inv, p)
    _unpinned(raw, inv, notes)
    _secrets(raw, inv, p, notes)
    _placeholders(raw, p)
    p.locate(raw.origins)
    return Offline(p.items, notes)


def validate_inventory(path: Path | str, *, vault_password_file: Path | str | None = None) -> Any:
    """``load_inventory`` and ``check`` together: every problem in one InputError (exit 2), the
    inventory's own first; the notes join the cluster's warnings."""
    inv = Path(path)
    try:
        cluster = load_inventory(inv, vault_password_file=vault_password_file)
        first: InputError | None = None
    except InputError as exc:
        cluster, first = None, exc
    if first is not None and not first.details:
        raise first  # not a list of problems (no inventory there, a missing password file)
    found = check(inv, vault_password_file) if inv.is_dir() else Offline()
    details = [*(first.details if first else []), *(str(pr) for pr in found.problems)]
    if details:
        count = len(details)
        raise InputError(
            f"inventory {inv} has {count} {'problem' if count == 1 else 'problems'}; nothing was contacted",
            hint="fix every line above, then run `sparkctl validate` again",
            details=details,
        )
    assert cluster is not None
    if found.notes:
        cluster = cluster.model_copy(update={"warnings": [*cluster.warnings, *found.notes]})
    return cluster
