"""`sparkctl plan` and `sparkctl profiles [show NAME]`.

Both only read: the inventory and the shipped profiles go in, rendered text comes out.
Nothing is contacted. The JSON of `plan` is the contract of design.md (`render.plan_document`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from sparkctl import ui
from sparkctl.cli.completion import complete_node, complete_profile
from sparkctl.cli.shell import INVENTORY, OrderedGroup, example
from sparkctl.model import load_inventory
from sparkctl.profiles import list_profiles, load_profile, profile_text
from sparkctl.render import common, plan_document

InventoryOpt = Annotated[
    Path | None, typer.Option("--inventory", "-i", help="Inventory directory (same as the global option).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]


def command_options(ctx: typer.Context, inventory: Path | None, json_out: bool) -> tuple[Path, bool, bool]:
    """Options may come before the command (global) or after it (here); the later one wins."""
    state = ctx.obj
    if inventory is not None:
        state.inventory = inventory
    return state.inventory_dir(), json_out or state.json, state.verbose


# -- plan ---------------------------------------------------------------------------------------


def _syntax_for(path: str) -> str:
    if path.endswith((".yaml", ".yml")):
        return "yaml"
    if path.endswith((".service", ".env")):
        return "ini"
    return "bash"


def _node_panel(entry: dict[str, Any], verbose: bool) -> Panel:
    launch = entry["rank_launch"]
    fabric = ", ".join(f"{p['netdev']}/{p['hca']} {p['ip']}" for p in entry["fabric"])
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    # On a site of several serving groups the rank is the node's rank in its group (null: spare).
    where = ""
    if "group" in entry:
        where = f" of group {entry['group']}" if entry["group"] else " (in no serving group: never started)"
    facts.add_row("role", f"rank {entry['rank']}{where} ({entry['role']}), runtime {launch['runtime']}")
    facts.add_row("mgmt", entry["mgmt"])
    facts.add_row("fabric", fabric)
    facts.add_row("unit", f"{launch['unit_name']} (started by `sparkctl up`, Restart=no)")

    argv = Text(common.shell_command(launch["argv"]), style="cyan", overflow="fold")
    env = Table(box=None, show_header=False, padding=(0, 1))
    env.add_column(style="green", no_wrap=True)
    env.add_column(overflow="fold")
    for key, value in launch["env"].items():
        env.add_row(key, value)

    files = Table(box=None, padding=(0, 1))
    files.add_column("file", style="bold")
    files.add_column("mode")
    files.add_column("bytes", justify="right")
    files.add_column("")
    for path, text in entry["files"].items():
        secret = "holds secrets (written by the role)" if path in entry["secret_files"] else ""
        files.add_row(path, entry["file_modes"][path], str(len(text.encode())), secret)

    parts: list[Any] = [facts, Text("\nargv", style="bold"), argv, Text("\nenv", style="bold"), env,
                        Text("\nfiles", style="bold"), files]
    if verbose:
        for path, text in entry["files"].items():
            body = Syntax(text, _syntax_for(path), word_wrap=True)
            parts.append(Panel(body, title=path, title_align="left"))
    return Panel(Group(*parts), title=f"[bold]{entry['name']}[/bold]", title_align="left")


def plan(
    ctx: typer.Context,
    node: Annotated[
        str | None, typer.Option("--node", help="Only this node.", autocompletion=complete_node)
    ] = None,
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Everything that would be applied: per node argv, env, unit, netplan, QoS, firewall; the switch.

    Rendered locally; nothing is contacted."""
    inv, as_json, verbose = command_options(ctx, inventory, json_out)
    cluster = load_inventory(inv)
    doc = plan_document(cluster, node)
    if as_json:
        ui.print_json(doc)
        return
    ui.console.print(
        f"[bold]plan[/bold] for [bold]{doc['cluster']}[/bold] ({inv}), profile [bold]{doc['profile']}[/bold] "
        "— rendered locally, nothing contacted"
    )
    for entry in doc["nodes"]:
        ui.console.print(_node_panel(entry, verbose))
    sw = doc["switch"]
    if sw["type"] == "none":
        ui.console.print(f"{ui.SKIP} no switch in the inventory")
    else:
        lines = sw["config"].count("\n")
        ui.console.print(
            f"switch [bold]{sw['name']}[/bold] ({sw['type']}, {sw['host']}): {sw['file']}, {lines} lines "
            "— `sparkctl switch show` prints it"
        )
    if not verbose:
        ui.console.print("[dim]--verbose shows every file's contents; --json gives the whole document[/dim]")


# -- profiles -------------------------------------------------------------------------------------


def _profile_row(name: str) -> dict[str, Any]:
    p = load_profile(name)
    pub = p.published
    return {
        "name": p.name,
        "description": p.description,
        "tp_size": p.tp_size,
        "ep_size": p.ep_size,
        "context_length": p.context_length,
        "max_total_tokens": p.max_total_tokens,
        "chunked_prefill_size": p.chunk,
        "max_running_requests": p.max_running_requests,
        "mem_fraction_static": p.mem_fraction_static,
        "published": pub.model_dump(mode="json") if pub else None,
    }


profiles_app = typer.Typer(
    name="profiles",
    help="The serving profiles sparkctl ships (`profiles show NAME` prints one, comments included).",
    cls=OrderedGroup,
    epilog=example("sparkctl profiles show r4-nvme"),
    invoke_without_command=True,
    no_args_is_help=False,
)


@profiles_app.callback()
def profiles(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the serving profiles."""
    if ctx.invoked_subcommand is not None:
        return
    rows = [_profile_row(n) for n in list_profiles()]
    if json_out or ctx.obj.json:
        ui.print_json(rows)
        return
    table = Table(title="serving profiles (sparkctl_profile in group_vars picks one)", title_justify="left")
    for col in ("name", "TP/EP", "context", "KV pin", "chunk", "slots", "static"):
        table.add_column(col, justify="left" if col == "name" else "right", no_wrap=True)
    table.add_column("published C1 tok/s")
    for r in rows:
        pub = r["published"] or {}
        c1 = [f"{kind} {pub[kind]['1']:g}" for kind in ("coding", "prose") if "1" in (pub.get(kind) or {})]
        table.add_row(
            r["name"],
            f"{r['tp_size']}/{r['ep_size']}",
            f"{r['context_length']:,}",
            f"{r['max_total_tokens']:,}",
            f"{r['chunked_prefill_size']:,}",
            str(r["max_running_requests"] or "-"),
            f"{r['mem_fraction_static']:g}",
            ", ".join(c1) or "-",
        )
    ui.console.print(table)
    for r in rows:
        ui.console.print(f"[bold]{r['name']}[/bold]: {r['description']}")


@profiles_app.command("show", epilog=example("sparkctl profiles show lab --json"))
def profiles_show(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(help="Profile name (see `sparkctl profiles`).", autocompletion=complete_profile)
    ],
    json_out: JsonOpt = False,
) -> None:
    """Print one profile: the YAML with the reason for every value, or its resolved JSON."""
    if json_out or ctx.obj.json:
        p = load_profile(name)
        ui.print_json(
            {
                **p.model_dump(mode="json"),
                "derived": {
                    "kv_pool_gib": round(p.kv_pool_gib, 3),
                    "static_pool_gib": round(p.static_pool_gib, 3),
                    "prefill_transient_gib": round(p.prefill_transient_gib, 3),
                    "transient_limit_gib": round(p.transient_limit_gib, 3),
                    "memory_problems": p.memory_problems(),
                },
            }
        )
        return
    text = profile_text(name)
    load_profile(name)  # a shipped file that does not validate is an error, not a listing
    sys.stdout.write(text)


def register(app: typer.Typer) -> None:
    """Add plan and profiles to the main app."""
    app.command("plan", rich_help_panel=INVENTORY, epilog=example("sparkctl plan --node spark-3 --verbose"))(
        plan
    )
    app.add_typer(profiles_app, rich_help_panel=INVENTORY)
