"""How a failure of `sparkctl bootstrap` on one node becomes one line: the node, the cause in
words (connection refused, timed out, host key mismatch, authentication failed, sudo refused), what
to check.

``stage`` wraps each step of a node: an exception there is recorded on the node's result (scrubbed
of the password) and ends that node's run with ``Stopped``; the other nodes go on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sparkctl.errors import EXIT_FAILED, EXIT_UNREACHABLE, SparkctlError
from sparkctl.site import hostkeys
from sparkctl.site.report import Address, NodeResult

__all__ = ["Address", "HostKeyChanged", "NodeResult", "Secret", "StepFailed", "Stopped", "scrub", "stage",
           "step_failed", "sudo_n_failed"]


class Secret:
    """The login password: printed, logged or put in an exception it shows as ``***``."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


def scrub(text: str, secret: Secret | None) -> str:
    """``text`` with every occurrence of the password replaced by ``***``."""
    value = secret.reveal() if secret is not None else ""
    return text.replace(value, "***") if value else text

class Stopped(Exception):
    """This node's run ended; its result says why."""


class StepFailed(Exception):
    def __init__(self, cause: str, check: str, unreachable: bool = False):
        super().__init__(cause)
        self.cause, self.check, self.unreachable = cause, check, unreachable


class HostKeyChanged(Exception):
    def __init__(self, seen: hostkeys.HostKey, expected: hostkeys.HostKey):
        super().__init__(f"host key of {seen.name} changed")
        self.seen, self.expected = seen, expected


def step_failed(rc: int, err: str, via_sudo: bool) -> StepFailed:
    """Why the node-side step gave no answer: sudo refused, no python3, or the last line it printed."""
    low = err.lower()
    if via_sudo and ("not in the sudoers" in low or "is not allowed" in low or "may not run sudo" in low):
        return StepFailed("sudo denied: the login user may not use sudo",
                          "that the --login user is in the sudo group (DGX OS's first user is)", True)
    refused = ("incorrect password", "password is required", "no password was provided")
    if via_sudo and any(s in low for s in refused):
        return StepFailed("sudo needs a password and refused the one given",
                          "that the login user's sudo password is its login password", True)
    if "python3" in low and "not found" in low:
        return StepFailed("python3 is missing on the node", "install python3 (DGX OS ships it)")
    last = (err.strip().splitlines() or [f"exit {rc}, no output"])[-1][:200]
    return StepFailed(f"the set-up step did not run ({last})", "the node's message, then run bootstrap again")


def sudo_n_failed(user: str, err: str) -> StepFailed:
    last = (err.strip().splitlines() or ["no message"])[-1][:200]
    return StepFailed(f"sudo -n true failed for {user} ({last})", f"/etc/sudoers.d/90-sparkctl-{user} on "
                      "the node, and that /etc/sudoers reads /etc/sudoers.d")


def _why(exc: BaseException, addr: Address, what: str, user: str, key_file: Path | None,
         known_hosts: Path | None) -> tuple[str, str, int]:
    import paramiko

    where = addr.label
    refused_check = f"that sshd runs on {where} and listens on port {addr.port}"
    timeout_check = f"the address {where}, that the node is on, and firewalls on the way"
    if isinstance(exc, StepFailed):
        return exc.cause, exc.check, EXIT_UNREACHABLE if exc.unreachable else EXIT_FAILED
    if isinstance(exc, HostKeyChanged):
        return (f"host key mismatch: {where} presented {exc.seen.keytype} {exc.seen.fingerprint}, not the "
                f"accepted {exc.expected.keytype} {exc.expected.fingerprint}",
                "the node's console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub); something may be in "
                "the middle", EXIT_UNREACHABLE)
    if isinstance(exc, SparkctlError):  # from site.hostkeys: unreachable, unconfirmed or changed key
        inner = exc.__cause__
        if isinstance(inner, ConnectionRefusedError):
            return "connection refused", refused_check, EXIT_UNREACHABLE
        if isinstance(inner, TimeoutError):
            return "timed out", timeout_check, EXIT_UNREACHABLE
        hint = exc.hint or "the message"
        if what == "host key" and ("does not match" in exc.message or "differs" in exc.message):
            return f"host key mismatch: {exc.message}; {known_hosts} keeps its entry", hint, EXIT_UNREACHABLE
        return exc.message, hint, exc.exit_code if what == "host key" else EXIT_UNREACHABLE
    if isinstance(exc, paramiko.BadAuthenticationType):
        return (f"authentication failed: {where} takes only {', '.join(exc.allowed_types)} for {user}",
                "that sshd allows password logins (PasswordAuthentication yes)", EXIT_UNREACHABLE)
    if isinstance(exc, paramiko.PasswordRequiredException):
        return (f"key login as {user} failed: {key_file} is encrypted",
                "load it into ssh-agent (ssh-add) and pass --key with its .pub", EXIT_UNREACHABLE)
    if isinstance(exc, paramiko.AuthenticationException):
        if what == "key login":
            return (f"key login as {user} failed (authentication failed)",
                    f"that {key_file or 'the agent key'} is the private half of the key installed",
                    EXIT_UNREACHABLE)
        return f"authentication failed for {user}@{where}", "the --login user and its password", \
            EXIT_UNREACHABLE
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError | ConnectionRefusedError):
        return "connection refused", refused_check, EXIT_UNREACHABLE
    if isinstance(exc, TimeoutError) and what in ("setup", "sudo", "check"):
        return (f"the {what} step did not finish in time", "the node's load, then run bootstrap again",
                EXIT_FAILED)
    if isinstance(exc, TimeoutError):
        return "timed out", timeout_check, EXIT_UNREACHABLE
    if isinstance(exc, paramiko.SSHException) and "banner" in str(exc).lower():
        return "no SSH banner", f"that port {addr.port} of {addr.host} is an SSH server", EXIT_UNREACHABLE
    if isinstance(exc, OSError):
        return f"cannot reach {where}: {exc.strerror or exc}", "the address and the network", EXIT_UNREACHABLE
    return f"{what} failed: {type(exc).__name__}: {exc}", "the message above", EXIT_FAILED


@contextmanager
def stage(res: NodeResult, what: str, user: str, key_file: Path | None = None, *,
          known_hosts: Path | None = None, secret: Any = None) -> Iterator[None]:
    """Run one step of a node: a failure is recorded on ``res`` (scrubbed) and raises Stopped."""
    try:
        yield
    except Stopped:
        raise
    except Exception as exc:
        cause, check, code = _why(exc, res.address, what, user, key_file, known_hosts)
        res.fail(what, scrub(cause, secret), scrub(check, secret), code)
        raise Stopped from None
