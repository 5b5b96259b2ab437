"""What several command modules share: the serving verbs' collaborators (``tools``, the one factory the
CLI tests replace), loading the model, the confirmation rule, shared option types, the playbook run
with its live host table, the playbook event display and the configured kit's reference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from sparkctl import ui
from sparkctl.ansible import plan as planning
from sparkctl.ansible import runner
from sparkctl.ansible.runner import RunnerEvent
from sparkctl.errors import EXIT_FAILED, InputError, SparkctlError
from sparkctl.model import load_inventory
from sparkctl.render import plan_document
from sparkctl.render.kit import kit_facts
from sparkctl.serve.tools import Tools

# What only `up`, `stage` and the playbook verbs use is imported where they use it (qualify on up,
# the kit's reference, the live host table): `status`, the most frequent command, pays for none.
if TYPE_CHECKING:
    from sparkctl.model import Cluster
    from sparkctl.serve import fastup

YesOption = Annotated[
    bool, typer.Option("--yes", "-y", help="Go ahead without asking (needed without a terminal).")
]


def _ask(question: str) -> bool:
    return typer.confirm(question, default=False, err=True)


def tools() -> Tools:
    """The serving verbs' collaborators: the real runner, SSH, HTTP and run directories, the
    terminal's question, qualify on `up` and the configured kit (CLI tests replace this factory)."""
    return Tools(ask=_ask, qualify=_qualify_on_up, kit_reference=kit_reference)


def _qualify_on_up(*args: Any, **kwargs: Any) -> Any:
    """``sparkctl.qa.onup.qualify_on_up``, imported when `up` qualifies the group."""
    from sparkctl.qa.onup import qualify_on_up

    return qualify_on_up(*args, **kwargs)


def load(ctx: typer.Context) -> tuple[Cluster, dict[str, Any]]:
    """The checked cluster (exit 2 on a bad inventory) and its plan document."""
    cluster = load_inventory(ctx.obj.inventory_dir())
    return cluster, plan_document(cluster)


def confirm(what: str, yes: bool) -> None:
    """Ask before a verb that takes the cluster down or removes things; without a terminal refuse
    (exit 2, nothing touched) unless --yes was given — the same rule as `up` replacing ranks."""
    if yes:
        return
    t = tools()
    if not t.interactive():
        raise InputError(
            f"{what}; refusing without a confirmation",
            hint="pass --yes to go ahead without asking (there is no terminal to ask)",
        )
    if not t.ask(f"{what}. Go ahead?"):
        raise SparkctlError("nothing was changed", exit_code=EXIT_FAILED)


def event_printer(verbose: bool) -> runner.EventHandler:
    """A quiet playbook display: every task with --verbose. Failures are not printed as they happen:
    the verb's error prints them once, one line per node in rank order (ansible.failures)."""

    def on_event(ev: RunnerEvent) -> None:
        if ev.kind in ("failed", "unreachable") and not ev.ignored:
            if verbose:
                ui.err_console.print(f"  {ui.FAIL} {ev.host}: {ev.task}: {ev.kind}")
        elif verbose and ev.kind in ("ok", "changed"):
            mark = "[yellow]changed[/yellow]" if ev.kind == "changed" else "ok"
            ui.err_console.print(f"  {ui.OK} {ev.host}: {ev.task} ({mark})")

    return on_event


def run_with_table(ctx: typer.Context, plan: planning.Plan, title: str, hosts: list[str]) -> runner.RunResult:
    """Run a plan with the live host table (plain when --json), then print the summary."""
    state = ctx.obj
    if state.verbose and not state.json:
        ui.console.print(Text("$ " + " ".join(plan.argv()), style="dim"))
    from sparkctl.ansible import hosttable as progress

    table = progress.HostTable(title, hosts, enabled=not state.json, show_diff=plan.diff)
    with table:
        result = runner.execute(plan, table)
    if not state.json:
        progress.print_summary(result, table)
    return result


def kit_reference(cluster: Cluster) -> fastup.KitReference | str | None:
    """The configured kit as spark_kit's verify reads it on the controller (from what the playbook
    fetched or unpacked into the state directory; a fast path never fetches); None without a kit,
    a string saying why it cannot be had here (the fast paths of `up` and `stage` share it)."""
    from sparkctl.ansible import roledefaults
    from sparkctl.serve import fastup
    from sparkctl.stage import kit as stage_kit
    from sparkctl.stage.kitdefaults import kit_layout_defaults

    facts = kit_facts(cluster)
    if facts is None:
        return None
    if facts["location"] != "controller":
        return "the kit is kept on the head; the playbook reads it there"
    layout = kit_layout_defaults()
    try:
        cache = roledefaults.controller_path("spark_kit", "spark_kit_cache_dir")
        ref = stage_kit.prepare(
            facts["source"], cache, url=facts.get("url"),
            commit=facts.get("commit"), path=facts.get("path"), sha256=facts.get("sha256"),
            manifest=facts.get("manifest") or layout.manifest,
            overlay_source=facts.get("overlay_source") or layout.overlay_source,
            overlays=list(facts.get("overlays") or []), offline=True,
        )
    except (stage_kit.KitSourceError, OSError) as exc:
        return str(exc)
    return fastup.KitReference(str(facts["store"]), str(ref["version"]), ref["manifest"])
