"""`sparkctl bootstrap ADDR…`: first contact with fresh DGX OS boxes (a login user with a password,
no key) — an operator user with your key and passwordless sudo on each, proven by a key login.

Parse, read the key and the password (file, ``-`` for stdin, else asked without echo), call
``site.bootstrap.run``, print one row per node (changed / ok / failed) or one JSON document.
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from sparkctl import ui
from sparkctl.cli.shell import INVENTORY, example
from sparkctl.errors import EXIT_FAILED, InputError, SparkctlError
from sparkctl.site import bootstrap as boot
from sparkctl.site import hostkeys, keys, report
from sparkctl.site.access import Address, NodeResult, Secret
from sparkctl.site.bootstrap import USER_NAME

STYLE = {"changed": "yellow", "ok": "green", "failed": "bold red"}
STEP_NAMES = {"user": "user", "authorized_keys": "key", "sudoers": "sudoers"}


def _interactive() -> bool:
    return sys.stdin.isatty()


def _password(source: Path | None, login: str) -> Secret:
    if source is not None and str(source) == "-":
        text = sys.stdin.readline()
    elif source is not None:
        try:
            text = source.expanduser().read_text()
        except OSError as exc:
            raise InputError(f"--password-file {source}: {exc.strerror or exc}",
                             hint="name a readable file holding the password on its first line") from exc
    elif _interactive():
        text = getpass.getpass(f"password of {login} on the nodes: ")
    else:
        raise InputError("no terminal to ask the password on",
                         hint="pass --password-file FILE (or - to read it from stdin)")
    value = text.splitlines()[0] if text else ""
    if not value:
        raise InputError(f"the password of {login} is empty", hint="give the password on the first line")
    return Secret(value)


def _ask(known_hosts: Path) -> hostkeys.Ask:
    def ask(key: hostkeys.HostKey) -> bool | None:
        if not _interactive():
            return None
        ui.err_console.print(f"[bold]{key.name}[/bold] presents an unknown host key (not in {known_hosts}):\n"
                             f"  {key.keytype} {key.fingerprint}")
        return typer.confirm("Is it the node's own key (compare with its console)?", default=False, err=True)

    return ask


def _confirm(n: int, operator: str, yes: bool) -> None:
    what = f"make user {operator} with your key and passwordless sudo on {n} node{'s' if n > 1 else ''}"
    if yes:
        return
    if not _interactive():
        raise InputError(f"{what}; refusing without a confirmation",
                         hint="pass --yes to go ahead without asking (there is no terminal to ask)")
    if not typer.confirm(f"{what}. Go ahead?", default=False, err=True):
        raise SparkctlError("nothing was changed", exit_code=EXIT_FAILED)


def _table(results: list[NodeResult], operator: str) -> Table:
    """One row per node: its result (changed / ok / failed), what changed, and what it runs."""
    table = Table(title=f"bootstrap · operator {operator}", title_justify="left")
    table.add_column("node", no_wrap=True)
    table.add_column("result", no_wrap=True)
    for col in ("changed", "host key", "sudo -n", "docker", "nvidia runtime"):
        table.add_column(col, overflow="fold")
    for r in results:
        changed = ", ".join(STEP_NAMES[s] for s, v in r.steps.items() if v == "changed")
        runtime = r.gpu_runtime or "–"
        table.add_row(r.address.label, Text(r.status, style=STYLE.get(r.status, "")),
                      changed or ("nothing" if r.steps else "–"), r.host_key or "–", "ok" if r.sudo else "–",
                      r.docker or "–", Text(runtime, style="yellow" if runtime == "missing" else ""))
    return table


def bootstrap(
    ctx: typer.Context,
    addresses: Annotated[list[str], typer.Argument(metavar="ADDR...", help="Each node: host or host:port.")],
    login: Annotated[str | None, typer.Option(
        "--login", help="The user that logs in with the password (default: the operator).")] = None,
    password_file: Annotated[Path | None, typer.Option(
        "--password-file", help="The login password, first line ('-': stdin); else it is asked.")] = None,
    operator: Annotated[str, typer.Option(
        "--operator", help="The user sparkctl works as on the nodes (made if missing).")] = "sparkctl",
    key: Annotated[Path | None, typer.Option(
        "--key", help="Your SSH key, its .pub or private file (default: ~/.ssh/id_ed25519).")] = None,
    generate_key: Annotated[bool, typer.Option(
        "--generate-key", help="Make an ed25519 pair at --key's path first (never replaces one).")] = False,
    known_hosts: Annotated[Path, typer.Option(
        "--known-hosts", help="Where the nodes' host keys are pinned.")] = Path("known_hosts"),
    host_keys: Annotated[Path | None, typer.Option(
        "--host-keys", help="The nodes' host keys, known_hosts format, got out of band.")] = None,
    trust_on_first_use: Annotated[bool, typer.Option(
        "--trust-on-first-use", help="Pin the key an unpinned node presents, without asking.")] = False,
    port: Annotated[int, typer.Option("--port", help="SSH port of an ADDR without one.",
                                      min=1, max=65535)] = 22,
    require_gpu_runtime: Annotated[bool, typer.Option(
        "--require-gpu-runtime", help="A node without Docker or the NVIDIA container toolkit fails.")]
    = False,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Go ahead without asking (needed without a terminal).")] = False,
) -> None:
    """First contact with fresh DGX OS boxes: the operator user, your key, passwordless sudo."""
    state = ctx.obj
    if host_keys is not None and trust_on_first_use:
        raise InputError("--host-keys and --trust-on-first-use exclude each other",
                         hint="give the keys you know (--host-keys), or trust first use, not both")
    for name, user in (("--operator", operator), ("--login", login)):
        if user is not None and not USER_NAME.fullmatch(user):
            raise InputError(f"{name} {user!r} is not a user name",
                             hint="lower-case letters, digits, '-' and '_', starting with a letter or '_'")
    nodes = [Address.parse(a, port) for a in addresses]
    if len(set(nodes)) != len(nodes):
        raise InputError("a node is given twice", hint="give each address once")
    if host_keys is not None and not host_keys.is_file():
        raise InputError(f"--host-keys {host_keys}: no such file", hint="name a known_hosts file")
    admin_key = keys.generate(key, f"{getpass.getuser()}@sparkctl") if generate_key else keys.resolve(key)
    who = login or operator
    secret = _password(password_file, who)
    _confirm(len(nodes), operator, yes)
    req = boot.Request(nodes, who, operator, secret, admin_key, known_hosts, host_keys, trust_on_first_use,
                       require_gpu_runtime)
    results = boot.run(req, _ask(known_hosts))
    doc = report.document(req, results)
    record = report.record(doc)
    error = report.failure(results)
    if state.json:
        if error is not None:
            doc["error"] = report.error_document(error)
        ui.print_json(doc)
    else:
        ui.console.print(_table(results, operator))
        for r in results:
            for w in r.warnings:
                ui.console.print(f"[yellow]![/yellow] {r.address.label}: {w}")
        changed = sum(r.status == "changed" for r in results)
        ok = sum(r.status == "ok" for r in results)
        failed = len(results) - changed - ok
        ui.console.print(f"{ui.OK if not failed else ui.FAIL} {changed} changed, {ok} unchanged, "
                         f"{failed} failed · host keys in {known_hosts} · [dim]record: {record}[/dim]")
    if error is not None:
        raise error


def register(app: typer.Typer) -> None:
    app.command("bootstrap", rich_help_panel=INVENTORY, epilog=example(
        "sparkctl bootstrap 192.168.7.10 192.168.7.11 192.168.7.12 192.168.7.13 --login nvidia "
        "--host-keys keys.txt"))(bootstrap)

