"""The node's half of `provision`'s fast path (``sparkctl.serve.provfast``): is every role up to date?

``provfast.check_script`` ships this module, after the modules it reads with (``provfast.NODE_MODULES``,
``sparkctl.nodeside.ship``), to every node in one SSH round, with what the last whole provision run
decided from on the controller: per role the digest of its inputs and its state spec (what it owns
on the node, from ``roles/spark_<role>/vars/applied.yml``). :func:`main` prints one JSON line,
``{"mode": "provcheck", …}``:

* ``roles``: per role ``{run, reasons}`` — the very probe the ``sparkctl_applied`` module runs in the
  playbook (``nodeside.applied.probe``: every file, managed block, unit, package, sysctl, link MTU and
  address, nftables table and command output against the node's record of what the role applied);
* ``links``: for a switch (``ports`` asked for), each port's MTU, or ``absent``.

Read only: the record is never written here (the playbook writes it after a role ran). A record that
cannot be read is "never recorded", a reason for the playbook, never a pass.

Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

MODE = "provcheck"


def check(p: Mapping[str, Any], applied: Any, links: Any) -> dict[str, Any]:
    """The answer to ``p``: ``roles`` ({role: {inputs, state}}) with the record at ``path``, and/or
    ``ports`` (a switch's ports, whose MTUs are read)."""
    answer: dict[str, Any] = {"mode": MODE}
    roles = p.get("roles")
    if roles:
        try:
            answer["roles"] = applied.probe(dict(roles), p.get("path") or applied.RECORD)
        except (OSError, ValueError) as exc:
            answer["error"] = f"the roles' state could not be read: {exc}"
    ports = p.get("ports")
    if ports:
        out = {}
        for port in ports:
            link = links.read_link(str(port))
            out[str(port)] = int(link["mtu"]) if link.get("present") else "absent"
        answer["ports"] = out
    return answer


def main(p: Mapping[str, Any], shipped: Callable[[str], Any]) -> None:
    """Print the answer as one JSON line; ``shipped`` gives the loaded modules by name."""
    print(json.dumps(check(p, shipped("nodeside.applied"), shipped("nodeside.links"))))


__all__ = ["MODE", "check", "main"]
