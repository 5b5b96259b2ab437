"""One error type and one exit-code table for every command.

Exit codes (documented in the README, stable):
  0  ok
  1  an operation failed, or a node did not answer (every verb: EXIT_UNREACHABLE)
  2  bad input or usage; nothing was touched
  3  the cluster is not healthy
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNHEALTHY = 3
# A node that did not answer (SSH refused, timed out, host key, login...): the same code from every verb
# (provision, stage, up, down, check fabric, preflight, status, logs, bundle); 3 is for a cluster that
# answered and is not healthy.
EXIT_UNREACHABLE = EXIT_FAILED
# What each code means: `sparkctl --help` lists these and the README's table says the same (a test
# holds them together).
EXIT_MEANINGS = {
    EXIT_OK: "ok",
    EXIT_FAILED: "an operation failed (a task, a transfer, a gate, a check), or a node did not answer",
    EXIT_USAGE: "bad input or usage — nothing was touched",
    EXIT_UNHEALTHY: "the cluster is not healthy (`status`, health gates)",
}


@dataclass
class SparkctlError(Exception):
    """An expected failure: a message for the admin, a hint on what to do, an exit code."""

    message: str
    hint: str | None = None
    exit_code: int = EXIT_FAILED
    details: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # the nodes it is about (rank order), for --json

    def __str__(self) -> str:
        return self.message


class InputError(SparkctlError):
    """Bad inventory, flags or files: exit 2, nothing contacted."""

    def __init__(self, message: str, hint: str | None = None, details: list[str] | None = None):
        super().__init__(message, hint, EXIT_USAGE, details or [])


class UnhealthyError(SparkctlError):
    """The cluster answered, but is not healthy: exit 3."""

    def __init__(self, message: str, hint: str | None = None, details: list[str] | None = None):
        super().__init__(message, hint, EXIT_UNHEALTHY, details or [])
