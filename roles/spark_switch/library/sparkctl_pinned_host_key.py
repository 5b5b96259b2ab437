#!/usr/bin/python
"""Check a switch's SSH host key against the inventory's pinned known_hosts, before any session.

Ansible's network_cli (paramiko or libssh) consults only ~/.ssh/known_hosts and the system file;
sparkctl pins every host key in the inventory's own known_hosts. This module runs on the controller
(delegate_to: localhost) ahead of the first RouterOS command: it completes the SSH key exchange
with the switch (no login) and refuses a key that the pinned file does not hold, or holds
differently. Standard library plus paramiko, which network_cli needs anyway.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkctl_pinned_host_key
short_description: Refuse a switch whose SSH host key is not the one pinned in the inventory
description:
  - Completes an SSH key exchange with C(host):C(port) (no authentication) and compares the
    server's host key with the entries for that host in C(known_hosts).
  - Fails when the file has no entry for the host, or when no entry equals the key offered.
options:
  host: {type: str, required: true, description: Address of the switch.}
  port: {type: int, default: 22, description: SSH port.}
  known_hosts: {type: path, required: true, description: The inventory's pinned known_hosts file.}
  timeout: {type: float, default: 10, description: Seconds for the connection and key exchange.}
author: sparkctl
"""

RETURN = r"""
fingerprint: {description: SHA-256 fingerprint of the key the switch offered, returned: success, type: str}
"""

import base64
import hashlib
import socket

import paramiko
from ansible.module_utils.basic import AnsibleModule


def fingerprint(key) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def check(host: str, port: int, known_hosts: str, timeout: float = 10.0) -> tuple[bool, str, str | None]:
    """(ok, message, fingerprint of the offered key)."""
    try:
        pinned = paramiko.HostKeys(known_hosts)
    except OSError as exc:
        return False, f"cannot read the pinned known_hosts {known_hosts}: {exc.strerror}", None
    name = host if port == 22 else f"[{host}]:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        return False, f"cannot reach {name} for its host key: {exc}", None
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=timeout)
        if not transport.is_active() or not transport.initial_kex_done:
            return False, f"{name}: no SSH key exchange within {timeout:g} s", None
        key = transport.get_remote_server_key()
    except (paramiko.SSHException, EOFError, OSError) as exc:
        return False, f"{name}: the SSH key exchange failed: {exc}", None
    finally:
        transport.close()
    offered = fingerprint(key)
    entries = pinned.lookup(name)
    if not entries:
        return False, (f"{name} offers {key.get_name()} {offered}, and {known_hosts} pins no key for it: add "
                       "the switch's key there (and check its fingerprint on the switch's console)"), offered
    if entries.get(key.get_name()) == key:
        return True, f"{name}: host key {offered} is the pinned one", offered
    return False, (f"{name} offers {key.get_name()} {offered}, which is NOT the key pinned in {known_hosts}: "
                   "refusing to connect (a replaced switch, or someone in the middle)"), offered


def main():
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str", "required": True},
            "port": {"type": "int", "default": 22},
            "known_hosts": {"type": "path", "required": True},
            "timeout": {"type": "float", "default": 10.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    ok, msg, offered = check(p["host"], p["port"], p["known_hosts"], p["timeout"])
    if not ok:
        module.fail_json(msg=msg, fingerprint=offered)
    module.exit_json(changed=False, msg=msg, fingerprint=offered)


if __name__ == "__main__":
    main()
