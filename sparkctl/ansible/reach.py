"""Which nodes answer a TCP connect on their SSH port at all, asked of every node at once before a
playbook runs (``runner.execute``).

Ansible's SSH gives the TCP connect and the whole handshake one timeout (ansible.cfg's ``timeout``,
60 s: a node at load ~12 needs most of it for its banner and Mitogen's bootstrap). A node that is
powered off or cut from the management network, while the controller still holds its neighbour
entry, answers nothing at all, and every verb waited the whole minute before naming it. A node's
kernel answers a SYN whatever its load, so a node whose port gives no answer at all within
``sshconfig.CONNECT_TIMEOUT_S`` (sparkctl's own SSH waits the same) is not there: the runner
gives it a short SSH timeout for that run (:data:`SILENT_SSH_TIMEOUT_S`), and Ansible still tries
it and reports it unreachable in its own words. A refused connection is an answer (ssh fails at
once by itself); a node reached through a jump host or a ProxyCommand is not dialled here (its
path is not the controller's to test).
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.model import sshconfig
from sparkctl.model.sshconfig import CONNECT_TIMEOUT_S

if TYPE_CHECKING:
    from sparkctl.model import Cluster

# The SSH timeout (ssh's ConnectTimeout, Mitogen's connection) Ansible gets for a silent node: a node
# that comes back in the meantime is still reached.
SILENT_SSH_TIMEOUT_S = 5


def endpoints(cluster: Cluster) -> dict[str, tuple[str, int]]:
    """``name -> (address, SSH port)`` of the nodes the controller dials directly (no ProxyJump or
    ProxyCommand in their ssh arguments or ssh_config)."""
    inv = Path(cluster.inventory_dir)
    return {n.name: (str(n.mgmt_ip), n.ssh_port) for n in cluster.nodes
            if sshconfig.proxies(n.hostvars, inv, str(n.mgmt_ip), n.name) == (None, None)}


def _silent(address: str, port: int, timeout: float) -> bool:
    try:
        socket.create_connection((address, port), timeout=timeout).close()
    except TimeoutError:
        return True
    except OSError as exc:  # refused: an answer; no route (the neighbour entry failed): none
        return exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN)
    return False


def silent(nodes: Mapping[str, tuple[str, int]], timeout: float | None = None) -> list[str]:
    """The nodes (sorted) whose SSH port answered nothing within ``timeout`` (default
    :data:`CONNECT_TIMEOUT_S`), all dialled at once."""
    if not nodes:
        return []
    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
    with ThreadPoolExecutor(max_workers=min(32, len(nodes))) as pool:
        quiet = dict(zip(nodes, pool.map(lambda ep: _silent(ep[0], ep[1], timeout), nodes.values()),
                         strict=True))
    return sorted(n for n, q in quiet.items() if q)


__all__ = ["CONNECT_TIMEOUT_S", "SILENT_SSH_TIMEOUT_S", "endpoints", "silent"]
