"""The node's half of `sparkctl bootstrap` (``sparkctl.site.bootstrap``): the operator account.

Shipped by ``nodeside.ship`` and run as root (the login user through ``sudo -S``), ``apply`` makes
the operator user if it is missing, puts the admin's public key in its ``authorized_keys`` (0600,
owned by the user, one line per key) and writes ``/etc/sudoers.d/90-sparkctl-<user>`` with
NOPASSWD for it: a temporary name first (sudo skips names with a dot), checked by ``visudo -cf``,
then renamed into place. Each step answers ``changed`` or ``ok``, so a second run says it changed
nothing. ``check`` (run as the operator, nothing changed) reports Docker and the NVIDIA container
toolkit. :func:`main` prints one JSON line, ``{"mode": "bootstrap", "ok": …}``.

The operating system is reached through ``System`` (users, ``visudo``, programs, services), so the
tests run the same steps against a fake box; files are read and written here, under the home and
sudoers directory it gives. Standard library only.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Callable, Mapping
from typing import Any, Protocol

MODE = "bootstrap"
# Where `sudo` looks for a program: a non-interactive SSH session's PATH may lack the sbin dirs.
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GPU_RUNTIMES = ("nvidia-ctk", "nvidia-container-runtime")


class NodeError(Exception):
    """A step could not be done; the message says which and why."""


class System(Protocol):
    """What the steps need of the operating system."""

    root_ids: tuple[int, int]  # the owner (uid, gid) of the sudoers file

    def user(self, name: str) -> tuple[str, int, int] | None: ...  # (home, uid, gid), or None
    def add_user(self, name: str) -> None: ...
    def visudo_check(self, path: str) -> str | None: ...  # None when the file is valid, else why
    def which(self, program: str) -> str | None: ...
    def service_state(self, unit: str) -> str: ...


class OsSystem:
    """The node itself."""

    root_ids = (0, 0)

    def user(self, name: str) -> tuple[str, int, int] | None:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            return None
        return pw.pw_dir, pw.pw_uid, pw.pw_gid

    def add_user(self, name: str) -> None:
        proc = _run(["useradd", "--create-home", "--shell", "/bin/bash", name])
        if proc.returncode != 0:
            raise NodeError(f"useradd {name} failed: {(proc.stderr or proc.stdout).strip()}")

    def visudo_check(self, path: str) -> str | None:
        proc = _run(["visudo", "-cf", path])
        return None if proc.returncode == 0 else (proc.stderr or proc.stdout).strip() or "rejected"

    def which(self, program: str) -> str | None:
        return shutil.which(program, path=SEARCH_PATH)

    def service_state(self, unit: str) -> str:
        if self.which("systemctl") is None:
            return "unknown"
        return _run(["systemctl", "is-active", unit]).stdout.strip() or "unknown"


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": SEARCH_PATH, "LANG": "C"}
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not found")


def _not_a_link(path: str) -> None:
    if os.path.islink(path):
        raise NodeError(f"{path} is a symbolic link; refusing to write through it")


def _own(path: str, mode: int, uid: int, gid: int) -> bool:
    """Give ``path`` this mode and owner; True when something had to change."""
    st = os.lstat(path)
    changed = False
    if st.st_mode & 0o7777 != mode:
        os.chmod(path, mode)
        changed = True
    if (st.st_uid, st.st_gid) != (uid, gid):
        os.chown(path, uid, gid)
        changed = True
    return changed


def authorize(home: str, uid: int, gid: int, key: str) -> str:
    """The key in ``home``/.ssh/authorized_keys, once; ``changed`` or ``ok``."""
    blob = key.split()[1]
    ssh_dir = os.path.join(home, ".ssh")
    _not_a_link(ssh_dir)
    changed = False
    if not os.path.isdir(ssh_dir):
        os.makedirs(ssh_dir, mode=0o700)
        changed = True
    changed |= _own(ssh_dir, 0o700, uid, gid)
    path = os.path.join(ssh_dir, "authorized_keys")
    _not_a_link(path)
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    if not any(blob in line.split() for line in text.splitlines()):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(("\n" if text and not text.endswith("\n") else "") + key + "\n")
        changed = True
    changed |= _own(path, 0o600, uid, gid)
    return "changed" if changed else "ok"


def sudoers_text(user: str) -> str:
    return (f"# Written by `sparkctl bootstrap`: {user} runs sudo without a password (sparkctl's\n"
            f"# playbooks become root through it). Remove this file to take that away.\n"
            f"{user} ALL=(ALL:ALL) NOPASSWD: ALL\n")


def sudoers(system: System, directory: str, user: str) -> str:
    """``directory``/90-sparkctl-``user``, checked by visudo before it is renamed into place."""
    path = os.path.join(directory, f"90-sparkctl-{user}")
    want = sudoers_text(user)
    _not_a_link(path)
    if os.path.isfile(path):
        with open(path) as f:
            same = f.read() == want
        if same:
            return "changed" if _own(path, 0o440, *system.root_ids) else "ok"
    tmp = os.path.join(directory, f".90-sparkctl-{user}.{os.getpid()}")  # sudo skips names with a dot
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o440)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(want)
        _own(tmp, 0o440, *system.root_ids)
        why = system.visudo_check(tmp)
        if why is not None:
            raise NodeError(f"visudo rejected the sudoers file for {user}: {why}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return "changed"


def apply(params: Mapping[str, Any], system: System) -> dict[str, Any]:
    """The operator account: user, key, sudoers; each step ``changed`` or ``ok``."""
    user, key = str(params["user"]), str(params["key"]).strip()
    steps: dict[str, str] = {}
    found = system.user(user)
    if found is None:
        system.add_user(user)
        found = system.user(user)
        if found is None:
            raise NodeError(f"useradd did not make {user}")
        steps["user"] = "changed"
    else:
        steps["user"] = "ok"
    home, uid, gid = found
    steps["authorized_keys"] = authorize(home, uid, gid, key)
    steps["sudoers"] = sudoers(system, str(params["sudoers_dir"]), user)
    return {"steps": steps}


def check(params: Mapping[str, Any], system: System) -> dict[str, Any]:
    """Docker (``missing``, or systemd's state of docker.service) and the NVIDIA container toolkit
    (the first of ``GPU_RUNTIMES`` found, or ``missing``). Nothing is changed."""
    docker = "missing" if system.which("docker") is None else system.service_state("docker.service")
    runtime = next((p for p in GPU_RUNTIMES if system.which(p)), "missing")
    return {"docker": "running" if docker == "active" else docker, "gpu_runtime": runtime}


STEPS: dict[str, Callable[[Mapping[str, Any], System], dict[str, Any]]] = {"apply": apply, "check": check}


def answer(params: Mapping[str, Any], system: System) -> dict[str, Any]:
    """The JSON document :func:`main` prints for ``params["step"]``."""
    try:
        return {"mode": MODE, "ok": True, **STEPS[str(params["step"])](params, system)}
    except (NodeError, OSError) as exc:
        return {"mode": MODE, "ok": False, "error": str(exc)}


def main(params: Mapping[str, Any], shipped: Callable[[str], Any]) -> None:
    print(json.dumps(answer(params, OsSystem())), flush=True)
