"""Inventory refusals that protect a first day on real hardware (nothing is contacted)."""

from __future__ import annotations

from ipaddress import IPv4Address
from pathlib import Path

import pytest

from sparkctl.errors import InputError
from sparkctl.model import checks, connection, load_inventory

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example"


def test_a_fabric_subnet_that_holds_the_controllers_address_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []

    def source(address: str) -> IPv4Address:
        seen.append(address)
        return IPv4Address("10.77.1.250")  # a VPN or a second NIC inside the second fabric subnet

    monkeypatch.setattr(checks, "controller_source", source)
    with pytest.raises(InputError) as err:
        load_inventory(EXAMPLE)
    assert seen == ["192.168.7.10"]
    assert any(d.startswith("sparkctl_fabric.subnets[1]: 10.77.1.0/24 contains 10.77.1.250")
               for d in err.value.details), err.value.details


def test_the_controllers_route_lookup_sends_nothing_and_may_fail_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no `ip` at all: no verdict, no crash
    assert checks.controller_source("192.168.7.10") is None


@pytest.mark.parametrize(
    ("args", "weak"),
    [
        ("-o StrictHostKeyChecking=no", True),
        ("-oStrictHostKeyChecking=accept-new", True),
        ("-o 'StrictHostKeyChecking off'", True),
        ("-o StrictHostKeyChecking=yes -o UserKnownHostsFile=/dev/null", True),
        ("-o UserKnownHostsFile=/etc/sparkctl/known_hosts -o StrictHostKeyChecking=yes", False),
        ("-o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes", False),
        ("-o ProxyJump=bastion", False),
    ],
)
def test_ssh_arguments_that_weaken_host_key_checking(args: str, weak: bool) -> None:
    assert (connection._weak_args(args) is not None) is weak
