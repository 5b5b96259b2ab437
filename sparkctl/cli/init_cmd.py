"""`sparkctl init SITE_DIR`: a site inventory from the nodes themselves (``sparkctl.site.init``).

Parse the flags, hand the terminal's questions in, print what came back. Interactive where a
terminal is attached (host key fingerprints, the diff of an existing site); fully scriptable with
--host-keys / --trust-on-first-use and --yes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from sparkctl import ui
from sparkctl.cli.shell import INVENTORY, example
from sparkctl.errors import InputError
from sparkctl.serve.tools import interactive
from sparkctl.site import hostkeys
from sparkctl.site import init as site_init
from sparkctl.site.propose import SWITCH_CONNECTION, SwitchOptions

DEFAULT_KEY = Path("~/.ssh/id_ed25519")


def _address(text: str, flag: str) -> tuple[str, int]:
    """ADDR or ADDR:PORT (an IPv6 address as [ADDR]:PORT)."""
    host, port = text, hostkeys.DEFAULT_PORT
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest.startswith(":"):
            port = _port(rest[1:], flag, text)
    elif text.count(":") == 1:
        host, raw = text.split(":")
        port = _port(raw, flag, text)
    if not host:
        raise InputError(f"{flag} {text!r}: no address", hint=f"write {flag} ADDR or ADDR:PORT")
    return host, port


def _port(raw: str, flag: str, text: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise InputError(f"{flag} {text!r}: {raw!r} is not a port", hint=f"write {flag} ADDR or ADDR:PORT")
    return int(raw)


def _pairs(values: list[str], flag: str, what: str) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for v in values:
        left, sep, right = v.partition("=")
        if not left or (sep and not right):
            raise InputError(f"{flag} {v!r}", hint=f"write {flag} {what}")
        out.append((left, right or None))
    return out


def _switch(address: str | None, kind: str | None, name: str, user: str | None, mtu: int | None,
            ports: list[str], key: Path | None = None) -> SwitchOptions | None:
    if address is None:
        if kind or ports:
            raise InputError("--switch-kind and --switch-port need --switch ADDR",
                             hint="give the switch's management address with --switch")
        return None
    if kind not in SWITCH_CONNECTION:
        raise InputError(f"--switch-kind {kind!r}" if kind else "--switch needs --switch-kind",
                         hint=f"one of {', '.join(SWITCH_CONNECTION)}")
    host, port = _address(address, "--switch")
    mapping: dict[str, tuple[str, ...]] = {}
    for node, value in _pairs(ports, "--switch-port", "NODE=PORT or NODE=PORT_A,PORT_B"):
        if value is None:
            raise InputError(f"--switch-port {node!r}", hint="write --switch-port NODE=PORT")
        mapping[node] = tuple(p for p in value.split(",") if p)
    return SwitchOptions(address=host, kind=kind, name=name, user=user, key=key.expanduser() if key else None,
                         port=port if port != hostkeys.DEFAULT_PORT else None, mtu=mtu, ports=mapping)


def _ask_key(key: hostkeys.HostKey) -> bool | None:
    if not interactive():
        return None
    return typer.confirm(f"{key.name} presents {key.keytype} {key.fingerprint}. Pin this key?",
                         default=False, err=True)


def _ask_port(node: str, netdevs: Sequence[str]) -> str | None:
    if not interactive():
        return None
    return str(typer.prompt(f"Switch port {node} is cabled to ({', '.join(netdevs)}; one port, or one per "
                            "half separated by a comma)", err=True))


def _ask_write(diff: str) -> bool | None:
    if not interactive():
        return None
    return typer.confirm("Write these changes?", default=False, err=True)


def _say(line: str) -> None:
    ui.err_console.print(f"{ui.OK} {escape(line)}")


def _show_and_ask(diff: str) -> bool | None:
    _print_diff(diff)
    return _ask_write(diff)


def _print_diff(diff: str) -> None:
    if diff:
        ui.err_console.print(Syntax(diff, "diff", theme="ansi_dark", background_color="default"))


def make_tools(json_out: bool) -> site_init.Tools:
    """init's collaborators: real SSH and the terminal's questions (CLI tests replace this factory)."""
    if json_out:  # the diff still goes to stderr: the document on stdout stays JSON
        return site_init.Tools(ask_key=_ask_key, ask_write=_show_and_ask)
    return site_init.Tools(ask_key=_ask_key, ask_write=_show_and_ask, say=_say, ask_port=_ask_port)


def _table(result: site_init.Result) -> Table:
    table = Table(title=f"{ui.OK} site {result.site_dir}", title_justify="left")
    for col in ("node", "address", "host", "DGX OS / OS", "driver", "fabric (ConnectX-7 halves)"):
        table.add_column(col)
    for n in result.nodes:
        halves = "; ".join(
            f"port {p['port']}: " + ", ".join(f"{h['netdev']}/{h['hca'] or '-'} {h['link']}"
                                              for h in p["halves"])
            for p in n["cx7_ports"]) or "no ConnectX-7"
        table.add_row(n["name"], n["address"], n["hostname"], n["dgx_os"] or n["os"] or "?",
                      n["nvidia_driver"] or "none", escape(halves))
    return table


def init(
    ctx: typer.Context,
    site_dir: Annotated[Path, typer.Argument(
        metavar="SITE_DIR", help="The site's inventory directory (created if absent).")],
    node: Annotated[list[str] | None, typer.Option(
        "--node", metavar="ADDR[:PORT]",
        help="A node's management address, repeated, in rank order (the first is the head).")] = None,
    user: Annotated[str, typer.Option(
        "--user", help="The SSH user (root or passwordless sudo).")] = "sparkctl",
    key: Annotated[Path | None, typer.Option("--key", help="Private key to log in with "
                                             "(default: ~/.ssh/id_ed25519).")] = None,
    known_hosts: Annotated[Path | None, typer.Option(
        "--known-hosts", help="known_hosts file to verify and pin host keys in "
        "(default: SITE_DIR/known_hosts).")] = None,
    host_keys: Annotated[Path | None, typer.Option("--host-keys", help="Take the host keys from this "
                                                   "known_hosts file instead of asking.")] = None,
    trust_on_first_use: Annotated[bool, typer.Option("--trust-on-first-use", help="Pin the keys the nodes "
                                                     "present now without asking.")] = False,
    switch: Annotated[str | None, typer.Option(
        "--switch", help="The RoCE switch's management ADDR[:PORT].")] = None,
    switch_kind: Annotated[str | None, typer.Option("--switch-kind", help="routeros | nvue | linux.")] = None,
    switch_name: Annotated[str, typer.Option(
        "--switch-name", help="The switch's inventory name.")] = "switch",
    switch_user: Annotated[str | None, typer.Option("--switch-user", help="SSH user on the switch.")] = None,
    switch_key: Annotated[Path | None, typer.Option(
        "--switch-key", help="SSH private key for the switch (default: the nodes' --key).")] = None,
    switch_mtu: Annotated[int | None, typer.Option(
        "--switch-mtu", help="Switch port MTU (default: 9216).")] = None,
    switch_port: Annotated[list[str] | None, typer.Option(
        "--switch-port", metavar="NODE=PORT",
        help="NODE=PORT (both halves) or NODE=PORT_A,PORT_B, repeated; else LLDP.")] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", help="Serving profile (default: r4-nvme).")] = None,
    cluster_name: Annotated[str | None, typer.Option("--cluster-name", help="The site's name "
                                                     "(default: from SITE_DIR).")] = None,
    fabric: Annotated[list[str] | None, typer.Option(
        "--fabric", metavar="NETDEV[=HCA]",
        help="One per PCIe half, repeated, instead of the discovered ConnectX-7 port.")] = None,
    fabric_subnet: Annotated[list[str] | None, typer.Option(
        "--fabric-subnet", metavar="CIDR",
        help="One per PCIe half (default: 10.77.0.0/24 10.77.1.0/24).")] = None,
    mgmt_interface: Annotated[str | None, typer.Option("--mgmt-interface", help="Management interface "
                                                       "(default: the one holding the address).")] = None,
    mgmt_subnet: Annotated[str | None, typer.Option("--mgmt-subnet", help="Management subnet.")] = None,
    nvme_mount: Annotated[str | None, typer.Option("--nvme-mount", help="NVMe filesystem for the checkpoint "
                                                   "(default: /mnt/nvme).")] = None,
    api_key_file: Annotated[Path | None, typer.Option("--api-key-file", help="File holding the API key "
                                                      "(default: SITE_DIR/.api_key, made 0600).")] = None,
    vault: Annotated[bool, typer.Option(
        "--vault", help="Keep the made API key in a vault-encrypted group_vars/all/vault.yml (with "
        "sparkctl's --vault-password-file) instead of SITE_DIR/.api_key.")] = False,
    from_file: Annotated[Path | None, typer.Option(
        "--from", help="YAML of inventory keys that override the defaults (runtime, kit, checkpoint, "
        "ansible_*…).")] = None,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Write changes to an existing site without asking.")] = False,
    show_example: Annotated[bool, typer.Option("--example", help="Write the shipped example inventory "
                                               "instead.")] = False,
) -> None:
    """Write a site inventory from the nodes themselves: host keys, identity, ConnectX-7 halves, NVMe.

    Each node's host key is shown and pinned after confirmation; discovery logs in with the key
    and only reads. The site is validated before it is written; re-running shows a diff and writes
    nothing unconfirmed. Secrets are file references (SITE_DIR/.api_key, 0600), never in the YAML."""
    state = ctx.obj
    nodes = list(node or [])
    if not nodes and not show_example and interactive():
        answer = typer.prompt("Management addresses of the nodes, in rank order (space-separated)", err=True)
        nodes = answer.split()
    if key is None and DEFAULT_KEY.expanduser().is_file():
        key = DEFAULT_KEY.expanduser()
    request = site_init.Request(
        site_dir=site_dir, nodes=[_address(n, "--node") for n in nodes], user=user,
        key=key.expanduser() if key else None, known_hosts=known_hosts, host_keys=host_keys,
        trust_on_first_use=trust_on_first_use,
        switch=_switch(switch, switch_kind, switch_name, switch_user, switch_mtu, list(switch_port or []),
                       switch_key),
        profile=profile, cluster_name=cluster_name,
        fabric=_pairs(list(fabric or []), "--fabric", "NETDEV or NETDEV=HCA"),
        fabric_subnets=list(fabric_subnet) if fabric_subnet else None, mgmt_interface=mgmt_interface,
        mgmt_subnet=mgmt_subnet, nvme_mount=nvme_mount, api_key_file=api_key_file, vault=vault,
        defaults_file=from_file,
        yes=yes,
    )
    tools = make_tools(state.json)
    result = site_init.example(request, tools) if show_example else site_init.run(request, tools)
    if state.json:
        ui.print_json({**result.as_dict(), "diff": result.diff})
        return
    if result.nodes:
        ui.console.print(_table(result))
    for note in result.notes:
        ui.console.print(f"{ui.SKIP} {escape(note)}")
    if result.written:
        if result.existed and yes:
            _print_diff(result.diff)
        ui.console.print(f"{ui.OK} wrote {', '.join(result.written)} in {escape(str(result.site_dir))}")
    else:
        ui.console.print(f"{ui.OK} {escape(str(result.site_dir))} is up to date")
    rel = os.path.relpath(result.site_dir)
    shown = str(result.site_dir) if rel.startswith("..") else rel
    ui.console.print(f"next: [cyan]sparkctl -i {escape(shown)} validate[/cyan]")


def register(app: typer.Typer) -> None:
    """Add `init` to the main app."""
    app.command(
        "init", rich_help_panel=INVENTORY,
        epilog=example("sparkctl init inventory/site --node 192.168.7.10 --node 192.168.7.11 "
                       "--node 192.168.7.12 --node 192.168.7.13 --switch 192.168.7.2 --switch-kind routeros"),
    )(init)
