"""Ansible strategy plugin: ``linear``, run through Mitogen when Mitogen is installed.

Every playbook of sparkctl runs task by task on all hosts (``linear``). With Mitogen (a dependency
of sparkctl, pinned in constraints.txt) each node keeps one Python interpreter for the whole run
and modules are sent to it over the SSH connection, instead of one SSH round trip, one upload and
one fresh interpreter per task and host: a full `provision` of the lab takes ~1.6x less wall time
and ~2.1x less CPU (bench/provision_strategy.py). Connections Mitogen does not handle (a switch's
network_cli or httpapi) run as they would under ``linear``.

Where Mitogen is missing (an ``ansible-playbook`` whose Python lacks it) this is plain ``linear``;
``ANSIBLE_STRATEGY=linear`` in the environment runs one command (sparkctl's or ansible-playbook's)
without Mitogen.

A loaded node's sshd may drop a new connection or send its banner late ("Connection timed out
during banner exchange", "kex_exchange_identification: ... Connection reset by peer"). Ansible's
ssh connection tries such a connection again (ansible.cfg ``[ssh_connection] retries``); Mitogen's
does not, so its connection step is wrapped here: the same failures are tried again, twice, after
2 s and then 4 s. A refused connection, a changed host key or a refused login fail at once.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

DOCUMENTATION = r"""
name: sparkctl_linear
short_description: linear, through Mitogen when it is installed
description:
  - The linear strategy; with the mitogen package installed, Mitogen's connection and module
    execution are used for the connections it supports.
"""

try:
    from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule
except ImportError:  # no Mitogen in this Python: plain linear
    from ansible.plugins.strategy.linear import StrategyModule

MITOGEN = StrategyModule.__module__.startswith("ansible_mitogen")

# What ssh prints when sshd accepted the TCP connection but, being busy, did not answer in time or
# dropped it before the login: worth another attempt (never a refusal, a host key or a login).
TRANSIENT = (
    "during banner exchange",
    "kex_exchange_identification",
    "Connection reset by peer",
    "Connection closed by remote host",
    "ssh_exchange_identification",
)
ATTEMPTS = 3
BACKOFF_S = 2.0


def transient(message: str) -> bool:
    return any(marker in message for marker in TRANSIENT)


def retrying(connect: Callable[..., Any], sleep: Callable[[float], Any] = time.sleep) -> Callable[..., Any]:
    """``connect`` (Mitogen's ``Connection._connect_stack``) tried again after a transient failure
    (AnsibleConnectionFailure naming one of TRANSIENT), with a doubling pause."""
    from ansible.errors import AnsibleConnectionFailure

    @functools.wraps(connect)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        pause = BACKOFF_S
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return connect(*args, **kwargs)
            except AnsibleConnectionFailure as exc:
                if attempt == ATTEMPTS or not transient(str(exc)):
                    raise
            sleep(pause)
            pause *= 2
        raise AssertionError("unreachable")

    wrapper.sparkctl_retrying = True  # type: ignore[attr-defined]
    return wrapper


if MITOGEN:
    from ansible_mitogen.connection import Connection as _MitogenConnection

    if not getattr(_MitogenConnection._connect_stack, "sparkctl_retrying", False):
        _MitogenConnection._connect_stack = retrying(_MitogenConnection._connect_stack)

__all__ = ["MITOGEN", "StrategyModule", "retrying", "transient"]
