"""The proposed site as files: hosts.yml and group_vars/all/sparkctl.yml, commented, in the layout of
inventory/example/. Pure: a Proposal (and the example's own text, for its comments) in, text out.

The comment above each site-wide key is the example's own (one place documents a key), followed by
where init took the value from; each node carries what discovery read of it as comments.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import yaml

from sparkctl.site.propose import Proposal, ProposedNode

HOSTS_FILE = "hosts.yml"
GROUP_VARS_FILE = "group_vars/all/sparkctl.yml"
_TOP_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):")


class _Indented(yaml.SafeDumper):
    """Block sequences indented under their key (yamllint's and inventory/example's style)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def flow(value: Any) -> str:
    """One value on one line (a scalar, or a mapping/list in flow style), as YAML reads it back."""
    text = yaml.dump(value, Dumper=yaml.SafeDumper, default_flow_style=True, width=10**6, sort_keys=False)
    return text.removesuffix("\n...\n").strip()


WRAP = 96  # columns of a wrapped comment or long value (the repository's yamllint allows 160)


def scalar_lines(key: str, value: Any, indent: int) -> list[str]:
    """``key: value``; a long string as a folded block scalar (``>-``: its lines join with single
    spaces, as they were split), so no line outgrows the repository's yamllint."""
    pad = " " * indent
    line = f"{pad}{key}: {flow(value)}"
    if not isinstance(value, str) or len(line) <= WRAP or "  " in value or value != value.strip():
        return [line]
    return [f"{pad}{key}: >-", *(f"{pad}  {part}" for part in textwrap.wrap(
        value, WRAP - indent, break_long_words=False, break_on_hyphens=False))]


def comment(text: str, indent: int) -> list[str]:
    """A comment wrapped at WRAP columns."""
    pad = " " * indent
    return [f"{pad}# {part}" for part in textwrap.wrap(text, WRAP - indent - 2, break_long_words=False,
                                                        break_on_hyphens=False)]


def block(key: str, value: Any, indent: int = 0) -> list[str]:
    """``key: value`` in block style, indented by ``indent`` spaces."""
    text = yaml.dump({key: value}, Dumper=_Indented, default_flow_style=False, sort_keys=False, width=100)
    return [" " * indent + line if line else line for line in text.rstrip("\n").split("\n")]


def comment_blocks(example_text: str) -> dict[str, list[str]]:
    """The comment lines right above each top-level key of the example's file."""
    out: dict[str, list[str]] = {}
    pending: list[str] = []
    for line in example_text.splitlines():
        if line.startswith("#"):
            pending.append(line)
            continue
        m = _TOP_KEY.match(line)
        if m:
            out[m.group(1)] = pending
        pending = []
    return out


def _node_lines(n: ProposedNode, first: bool, per_host: dict[str, Any]) -> list[str]:
    f = n.facts
    ident = ", ".join(x for x in (
        f.hostname or None,
        f"DGX OS {f.dgx_os}" if f.dgx_os else None,
        f.os,
        f"kernel {f.kernel}" if f.kernel else None,
        f"NVIDIA driver {f.nvidia_driver}" if f.nvidia_driver else "no NVIDIA driver",
        f"BIOS {f.bios}" if f.bios else None,
        f"{f.memory_bytes / 1024**3:.0f} GiB memory" if f.memory_bytes else None,
    ) if x)
    out = [f"    {n.name}:", *comment(ident, 6)]
    used = {p["netdev"] for p in n.fabric}
    fws = sorted({nd.hca_fw for nd in f.netdevs if nd.hca_fw and nd.name in used})
    if fws:
        out.append(f"      # ConnectX-7 firmware {', '.join(fws)}")
    if first:
        out.append("      # Management IPv4 address (the LAN the controller reaches; never model traffic).")
    out.append(f"      ansible_host: {flow(n.address)}")
    if n.port != 22:
        out.append(f"      ansible_port: {n.port}")
    if first and "ansible_ssh_private_key_file" in per_host:
        out.append("      # The private key init logged in with.")
    for k, v in per_host.items():
        out += scalar_lines(k, v, 6)
    if first:
        out.append("      # Rank of this node; rank 0 is the head: it hosts the rendezvous and the HTTP API.")
    out.append(f"      sparkctl_rank: {n.rank}")
    if first:
        out.append("      # The cabled ConnectX-7 port, seen by Linux as two PCIe halves: each gets its own")
        out.append("      # address (one fabric subnet per half) and NCCL uses both RDMA devices.")
    out.append("      sparkctl_fabric_ports:")
    for port, note in zip(n.fabric, n.half_notes, strict=True):
        out.append(f"        - {flow(port)}  # {note}")
    if n.nvme_gib is not None:
        if first:
            out.append("      # Size of the NVMe filesystem holding the checkpoint and the Engram shards")
            out.append("      # (GiB), as the node reported it: `validate` checks that they fit.")
        out.append(f"      sparkctl_nvme_gib: {n.nvme_gib}")
    return out


def hosts_text(p: Proposal) -> str:
    out = [
        "---",
        "# sparkctl inventory: the DGX Sparks and the RoCE switch of one site, written by `sparkctl init`",
        "# from what each node reported. Same layout as inventory/example/ (every key is explained there);",
        "# edit freely: `sparkctl validate` checks every field, and a re-run of init shows a diff first.",
        "all:",
        "  vars:",
        "    # SSH user sparkctl and Ansible log in as on every node (root or passwordless sudo).",
        f"    ansible_user: {flow(p.all_vars['ansible_user'])}",
    ]
    out += ["    # Host keys are verified against the file init pinned them in; never turn checking off.",
            *scalar_lines("ansible_ssh_common_args", p.all_vars["ansible_ssh_common_args"], 4)]
    written = {"ansible_user", "ansible_become", "ansible_ssh_common_args"}
    for key, value in p.all_vars.items():
        if key not in written:
            out += block(key, value, 4)
    out += ["  children:", "    # Exactly the serving nodes; one SGLang rank per node, in the order given.",
            "    sparks:",
            "      vars:",
            "        # Escalate to root for the roles (false only when ansible_user is root). Set here, not",
            "        # under all: `all`'s variables reach the controller's own tasks too (Ansible's implicit",
            "        # localhost), which would then run sudo on the controller.",
            f"        ansible_become: {flow(p.all_vars['ansible_become'])}",
            "      hosts:"]
    for i, n in enumerate(p.nodes):
        out += ["    " + line for line in _node_lines(n, i == 0, p.per_host)]
    if p.switch_name is not None:
        out += ["    # The RoCE switch: four or more Sparks need it (`validate` refuses four without one).",
                "    switches:", "      hosts:", f"        {p.switch_name}:"]
        for key, value in p.switch_vars.items():
            if key == "sparkctl_switch_ports":
                out.append("          # Which switch port each node's fabric netdev is cabled to (both PCIe "
                           "halves of one cable share it).")
                out.append("          sparkctl_switch_ports:")
                for node, mapping in value.items():
                    out.append(f"            {node}: {flow(mapping)}")
                continue
            out += block(key, value, 10)
    return "\n".join(out) + "\n"


def group_vars_text(p: Proposal, example_text: str) -> str:
    comments = comment_blocks(example_text)
    out = [
        "---",
        "# Cluster-wide settings of the site, written by `sparkctl init`. Every key is checked by",
        "# `sparkctl validate`; inventory/example/group_vars/all/sparkctl.yml explains each one in full.",
    ]
    for key, value in p.site.items():
        out.append("")
        out += comments.get(key, [])
        out.append(f"# init: {p.sources.get(key, 'given')}.")
        out += block(key, value)
    return "\n".join(out) + "\n"


def render(p: Proposal, example_text: str) -> dict[str, str]:
    """Relative path -> content of the site's inventory files."""
    return {HOSTS_FILE: hosts_text(p), GROUP_VARS_FILE: group_vars_text(p, example_text)}


__all__ = ["GROUP_VARS_FILE", "HOSTS_FILE", "block", "comment_blocks", "flow", "render"]
