"""A fresh DGX OS box for `sparkctl bootstrap`'s tests: an in-process SSH server (paramiko server
mode) with a login user that has a password and no key, sudo, and the node-side step run for real.

What it serves:

* password login for the login user (``login``, ``password``); key login for any user whose
  ``~/.ssh/authorized_keys`` in the box holds the key;
* ``sudo -S -p '' -- sh -c SCRIPT``: sudo reads the password line from stdin unless the user has a
  valid NOPASSWD file in the box's sudoers directory (as sudo does), refuses a wrong one or a user
  not allowed to use sudo, then runs SCRIPT as root; ``sh -c SCRIPT`` as the user itself;
  ``sudo -n true``;
* SCRIPT is what ``nodeside.ship`` makes of ``nodeside.bootstrap``: its parameters are read back
  from the script and ``nodeside.bootstrap.answer`` runs against ``FakeSystem`` (users, homes and
  /etc/sudoers.d under ``tmp``), so its files are real and survive from one run to the next.

Everything a client sends is recorded (``commands``, ``stdins``, ``passwords``) for the tests that
look for the password where it must not be.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import socket
import threading
from pathlib import Path

import paramiko

from sparkctl.nodeside import bootstrap as node

NOPASSWD = re.compile(r"^(\S+) ALL=\(ALL(:ALL)?\) NOPASSWD: ALL$")


class FakeSystem:
    """The box's operating system as ``nodeside.bootstrap`` reaches it."""

    def __init__(self, root: Path, users: set[str], tools: set[str], docker: str):
        self.base, self.users, self.tools, self.docker = root, users, tools, docker
        self.root_ids = (os.getuid(), os.getgid())  # the test cannot chown to root
        self.sudoers_dir = root / "etc/sudoers.d"
        self.sudoers_dir.mkdir(parents=True, exist_ok=True)

    def home(self, name: str) -> Path:
        return self.base / "home" / name

    def user(self, name: str) -> tuple[str, int, int] | None:
        return (str(self.home(name)), os.getuid(), os.getgid()) if name in self.users else None

    def add_user(self, name: str) -> None:
        self.users.add(name)
        self.home(name).mkdir(parents=True, exist_ok=True)

    def visudo_check(self, path: str) -> str | None:
        for line in Path(path).read_text().splitlines():
            if line.strip() and not line.startswith("#") and not NOPASSWD.match(line):
                return f"{path}: syntax error near line {line!r}"
        return None

    def which(self, program: str) -> str | None:
        return f"/usr/bin/{program}" if program in self.tools else None

    def service_state(self, unit: str) -> str:
        return self.docker

    def nopasswd(self, user: str) -> bool:
        f = self.sudoers_dir / f"90-sparkctl-{user}"
        return f.is_file() and any(
            (m := NOPASSWD.match(line)) and m.group(1) == user for line in f.read_text().splitlines())


def shipped_params(script: str) -> dict[str, object]:
    """The parameters ``nodeside.ship.python_script`` wrote into ``script``."""
    line = next(ln for ln in script.splitlines() if ln.startswith("main(json.loads("))
    return dict(json.loads(json.loads(line[len("main(json.loads("):-2])))


class _Iface(paramiko.ServerInterface):
    def __init__(self, box: FakeBox):
        self.box = box
        self.user = ""

    def get_allowed_auths(self, username: str) -> str:
        return "publickey,password" if self.box.password_auth else "publickey"

    def check_auth_password(self, username: str, password: str) -> int:
        self.box.passwords.append(password)
        if self.box.password_auth and username == self.box.login and password == self.box.password:
            self.user = username
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        if username not in self.box.system.users:
            return paramiko.AUTH_FAILED
        auth = self.box.system.home(username) / ".ssh/authorized_keys"
        if auth.is_file() and any(key.get_base64() in ln.split() for ln in auth.read_text().splitlines()):
            self.user = username
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        threading.Thread(target=self.box.serve_exec, args=(channel, self.user, command.decode()),
                         daemon=True).start()
        return True


class FakeBox:
    """Listen on 127.0.0.1:<free port> as a fresh box with ``login``/``password``."""

    def __init__(self, tmp: Path, *, login: str = "admin", password: str = "s3cret-Pa55word",
                 sudo_users: tuple[str, ...] | None = None, tools: tuple[str, ...] = ("docker",),
                 docker: str = "active", password_auth: bool = True, rsa_host_key: bool = False):
        self.login, self.password, self.password_auth = login, password, password_auth
        self.sudo_users = set(sudo_users if sudo_users is not None else (login,))
        self.system = FakeSystem(tmp / "box", {login}, set(tools), docker)
        self.host_key: paramiko.PKey = paramiko.ECDSAKey.generate()
        # A second host key, of a type paramiko prefers less (a node with several, as sshd has).
        self.rsa_key: paramiko.PKey | None = paramiko.RSAKey.generate(2048) if rsa_host_key else None
        self.commands: list[str] = []
        self.stdins: list[bytes] = []
        self.passwords: list[str] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._transports: list[paramiko.Transport] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_key.get_name()} {self.host_key.get_base64()}\n"

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        transport = paramiko.Transport(conn)
        transport.add_server_key(self.host_key)
        if self.rsa_key is not None:
            transport.add_server_key(self.rsa_key)
        self._transports.append(transport)
        # A client that read the host key and hung up (a key scan) resets the connection mid-handshake.
        with contextlib.suppress(paramiko.SSHException, EOFError, OSError):
            transport.start_server(server=_Iface(self))

    def _run_script(self, script: str, as_root: bool) -> tuple[int, str, str]:
        params = shipped_params(script)
        if params.get("step") == "apply" and not as_root:
            return 1, "", "useradd: Permission denied.\n"
        params = {**params, "sudoers_dir": str(self.system.sudoers_dir)}
        return 0, json.dumps(node.answer(params, self.system)) + "\n", ""

    def _answer(self, user: str, argv: list[str], stdin: bytes) -> tuple[int, str, str]:
        if argv == ["sudo", "-n", "true"]:
            return (0, "", "") if self.system.nopasswd(user) else (1, "", "sudo: a password is required\n")
        if argv[:5] == ["sudo", "-S", "-p", "", "--"] and argv[5:7] == ["sh", "-c"] and len(argv) == 8:
            if not self.system.nopasswd(user):
                line = stdin.split(b"\n", 1)[0].decode()
                if user not in self.sudo_users:
                    return 1, "", f"{user} is not in the sudoers file.\n"
                if line != self.password:
                    return 1, "", "sudo: 1 incorrect password attempt\n"
            return self._run_script(argv[7], as_root=True)
        if argv[:2] == ["sh", "-c"] and len(argv) == 3:
            return self._run_script(argv[2], as_root=user == "root")
        return 127, "", f"sh: {argv[0] if argv else ''}: not found\n"

    def serve_exec(self, channel: paramiko.Channel, user: str, command: str) -> None:
        self.commands.append(command)
        data = bytearray()
        while chunk := channel.recv(65536):
            data += chunk
        self.stdins.append(bytes(data))
        rc, out, err = self._answer(user, shlex.split(command), bytes(data))
        try:
            if out:
                channel.sendall(out.encode())
            if err:
                channel.sendall_stderr(err.encode())
            channel.send_exit_status(rc)
            channel.shutdown_write()
        except OSError:
            pass
        finally:
            channel.close()

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)
        for transport in self._transports:
            transport.close()
        self.sock.close()
