"""`sparkctl ansible-command VERB [WHAT]`: the exact ``ansible-playbook`` line a verb would run.

The verb's own plan (``sparkctl.ansible.plan.for_<verb>``, the same options the verb takes) turned
into a runnable command by ``sparkctl.ansible.command``: ``ansible-playbook`` of sparkctl's
environment, the inventory and the playbook by absolute path (inside the installed package from a
wheel), ``ANSIBLE_CONFIG`` and the collections path, ``--limit``/``--tags``/``--check``, and the
plan's extra variables in a file (``-e @FILE`` under the state directory). The line alone goes to
stdout (``eval "$(sparkctl ansible-command up)"`` runs it); which environment variables the
inventory's secrets are read from goes to stderr, names only. Nothing is contacted or changed.
Where a verb has a fast path over SSH (`up`, `down`, `stage`), this is the playbook it runs when
the fast path does not apply, or with ``--full``.

Run records keep the same line: ``<run dir>/command`` and ``command`` of every ``--json`` run
document.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from sparkctl import ui
from sparkctl.ansible import command as playbook_command
from sparkctl.ansible import plan as planning
from sparkctl.cli.completion import complete_hosts
from sparkctl.cli.plan_cmd import InventoryOpt, JsonOpt, command_options
from sparkctl.cli.shell import PROVISION, example
from sparkctl.errors import InputError
from sparkctl.model import Cluster, load_inventory
from sparkctl.stage import verb as stage_verb


def _no_what(verb: str, what: str | None) -> None:
    if what is not None:
        raise InputError(f"ansible-command {verb}: unexpected argument {what!r}",
                         hint=f"`sparkctl ansible-command {verb}` takes no WHAT")


def _provision(c: Cluster, what: str | None, o: dict[str, Any]) -> planning.Plan:
    _no_what("provision", what)
    return planning.for_provision(c, check=o["check"], diff=o["diff"], limit=o["limit"],
                                  tags=o["tags"], full=o["full"])


def _preflight(c: Cluster, what: str | None, o: dict[str, Any]) -> planning.Plan:
    _no_what("preflight", what)
    return planning.for_preflight(c, o["limit"])


def _check(c: Cluster, what: str | None, o: dict[str, Any]) -> planning.Plan:
    if what != "fabric":
        raise InputError(f"ansible-command check: unknown check {what!r}",
                         hint="the check that runs a playbook: `sparkctl ansible-command check fabric`")
    return planning.for_check_fabric(c)


def _switch(c: Cluster, what: str | None, o: dict[str, Any]) -> planning.Plan:
    if what not in ("diff", "apply"):
        raise InputError(f"ansible-command switch: unknown action {what!r}",
                         hint="give `switch diff` or `switch apply`")
    if c.switch is None:
        raise InputError(f"{c.inventory_dir} has no switch (a switchless site): no switch playbook to run",
                         hint="add the switch to hosts.yml (as the example site does: "
                              "`sparkctl init --example DIR`)")
    if what == "diff":
        return planning.for_switch(c, check=True, diff=True)
    return planning.for_switch(c, check=False, diff=o["diff"], rollback=o["rollback"])


def _stage(c: Cluster, what: str | None, o: dict[str, Any]) -> planning.Plan:
    what = what or "all"
    if what not in planning.STAGE_WHAT:
        raise InputError(f"ansible-command stage: unknown WHAT {what!r}",
                         hint=f"one of {', '.join(planning.STAGE_WHAT)}")
    stage_verb.refuse_what_cannot_be_staged(c, what)
    settings = stage_verb.playbook_settings(0.0, stage_verb.STALL_TIMEOUT_S)
    return planning.for_stage(c, what, verify_only=o["verify_only"], force=o["force"], settings=settings)


def _up(c: Cluster, what: str | None, o: dict[str, Any]) -> planning.Plan:
    _no_what("up", what)
    return planning.for_up(c)


def _down(c: Cluster, what: str | None, o: dict[str, Any]) -> planning.Plan:
    _no_what("down", what)
    return planning.for_down(c, o["grace"])


def _upgrade(c: Cluster, what: str | None, o: dict[str, Any]) -> planning.Plan:
    _no_what("upgrade", what)
    return planning.for_upgrade(c, check=o["check"])


def _reset(c: Cluster, what: str | None, o: dict[str, Any]) -> planning.Plan:
    _no_what("reset", what)
    return planning.for_reset(c, purge_data=o["purge_data"], check=o["check"])


# Every verb that runs a playbook, with the options of its own command that change its plan.
VERBS: dict[str, tuple[Callable[[Cluster, str | None, dict[str, Any]], planning.Plan], tuple[str, ...]]] = {
    "preflight": (_preflight, ("limit",)),
    "provision": (_provision, ("check", "diff", "limit", "tags", "full")),
    "check": (_check, ()),
    "switch": (_switch, ("diff", "rollback")),
    "stage": (_stage, ("verify_only", "force")),
    "up": (_up, ()),
    "down": (_down, ("grace",)),
    "upgrade": (_upgrade, ("check",)),
    "reset": (_reset, ("check", "purge_data")),
}
# Option defaults: an option given to a verb that does not take it is refused by its flag name.
_DEFAULTS: dict[str, Any] = {"check": False, "diff": False, "limit": None, "tags": [], "full": False,
                             "rollback": False, "verify_only": False, "force": False, "grace": None,
                             "purge_data": False}


def plan_for(cluster: Cluster, verb: str, what: str | None, options: dict[str, Any]) -> planning.Plan:
    """The plan `sparkctl VERB [WHAT] [options]` runs (InputError for an unknown verb or an option
    the verb does not take)."""
    if verb not in VERBS:
        raise InputError(f"ansible-command: {verb!r} runs no playbook",
                         hint=f"verbs that run one: {', '.join(VERBS)}")
    build, takes = VERBS[verb]
    given = [k for k, v in options.items() if v != _DEFAULTS[k] and k not in takes]
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise InputError(f"ansible-command {verb}: {flags} is not an option of `sparkctl {verb}`",
                         hint=f"`sparkctl ansible-command {verb}` takes "
                              + (", ".join("--" + k.replace("_", "-") for k in takes) or "no option"))
    return build(cluster, what, {**_DEFAULTS, **options})


def ansible_command(
    ctx: typer.Context,
    verb: Annotated[str, typer.Argument(help=f"The sparkctl verb: {', '.join(VERBS)}.", show_default=False)],
    what: Annotated[
        str | None,
        typer.Argument(help="stage: kit|image|weights|engram|all; switch: diff|apply; check: fabric.",
                       show_default=False),
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="provision, upgrade, reset: check mode.")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="provision, switch apply: show the changes.")] = False,
    limit: Annotated[
        str | None,
        typer.Option("--limit", help="provision, preflight: only these hosts (comma-separated).",
                     autocompletion=complete_hosts),
    ] = None,
    tags: Annotated[
        list[str] | None, typer.Option("--tags", help="provision: only these roles (comma-separated).")
    ] = None,
    full: Annotated[bool, typer.Option("--full", help="provision: every role, changed or not.")] = False,
    rollback: Annotated[
        bool, typer.Option("--rollback", help="switch apply: restore the last backup.")
    ] = False,
    verify_only: Annotated[bool, typer.Option("--verify-only", help="stage: verify only.")] = False,
    force: Annotated[bool, typer.Option("--force", help="stage: delete Engram leftovers.")] = False,
    grace: Annotated[int | None, typer.Option("--grace", help="down: seconds rank 0 may drain.")] = None,
    purge_data: Annotated[bool, typer.Option("--purge-data", help="reset: the NVMe data too.")] = False,
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Print the exact, runnable `ansible-playbook` line a verb would run (nothing is contacted).

    The playbook and ansible.cfg are the installed ones (from a wheel too); the plan's variables go
    in a file under the state directory, secrets never appear: a manual run reads them from the
    environment variables the inventory names (listed on stderr)."""
    inv, as_json, _ = command_options(ctx, inventory, json_out)
    options = {"check": check, "diff": diff, "limit": limit, "tags": list(tags or []), "full": full,
               "rollback": rollback, "verify_only": verify_only, "force": force, "grace": grace,
               "purge_data": purge_data}
    plan = plan_for(load_inventory(inv), verb, what, options)
    vars_file = playbook_command.write_vars(plan, playbook_command.shared_vars_path(plan))
    cmd = playbook_command.for_plan(plan, vars_file)
    if as_json:
        ui.print_json({"verb": verb, "what": what, "playbook": str(cmd.playbook), "line": cmd.line(),
                       "command": cmd.as_argv(), "env": cmd.env,
                       "vars_file": str(vars_file) if vars_file else None,
                       "secret_env": list(cmd.secret_env)})
        return
    # Plain stdout (no console wrapping): the line must stay one line for a shell or a script.
    sys.stdout.write(cmd.line() + "\n")
    if cmd.secret_env:
        ui.err_console.print(
            f"[dim]# secrets are not on the line: the run reads {', '.join(cmd.secret_env)} "
            "from the environment where the inventory names them[/dim]")


def register(app: typer.Typer) -> None:
    app.command(
        "ansible-command", rich_help_panel=PROVISION,
        epilog=example("sparkctl ansible-command provision --limit spark-1 --check",
                       'eval "$(sparkctl ansible-command stage weights)"'),
    )(ansible_command)
