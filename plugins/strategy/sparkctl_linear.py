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
"""

from __future__ import annotations

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

__all__ = ["MITOGEN", "StrategyModule"]
