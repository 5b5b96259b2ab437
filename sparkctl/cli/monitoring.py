"""`sparkctl monitoring config|dashboard`: Prometheus and Grafana for a site.

config:     a prometheus.yml generated from the inventory: every node's exporter
            (sparkctl-exporter.service, installed by `provision`) and rank 0's SGLang /metrics, each
            target labelled cluster, node and rank. The API key travels as a bearer token that
            Prometheus reads from a file; the key itself is never printed.
dashboard:  the Grafana dashboard JSON sparkctl ships (import it, or drop it into a provisioning
            directory); its queries use exactly the series the exporter and SGLang publish.

Nothing is contacted.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sparkctl import ui
from sparkctl.cli.plan_cmd import InventoryOpt, command_options
from sparkctl.cli.shell import OBSERVE, OrderedGroup, example
from sparkctl.errors import InputError
from sparkctl.model import Cluster, load_inventory
from sparkctl.render import monitoring

monitoring_app = typer.Typer(
    name="monitoring",
    help="Prometheus scrape configuration and Grafana dashboard for the site.",
    cls=OrderedGroup,
    no_args_is_help=True,
)

OutputOpt = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write to this file instead of standard output.")
]


def _emit(text: str, output: Path | None, what: str) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text)
    except OSError as exc:
        raise InputError(f"--output {output}: {exc.strerror or exc}", hint="choose a writable path") from exc
    ui.err_console.print(f"{ui.OK} {what} written to {output}")


def key_file_for(cluster: Cluster, given: Path | None) -> str | None:
    """Where Prometheus reads the API key: --api-key-file, else the inventory's file reference."""
    ref = cluster.secrets.get("api_key")
    if ref is None:
        return None
    if given is not None:
        return str(given.expanduser().absolute())
    path = monitoring.api_key_file(cluster)
    if path is None:
        raise InputError(
            f"sparkctl_secrets.api_key is {ref.describe()}: Prometheus reads rank 0's bearer token "
            "from a file",
            hint="pass --api-key-file PATH: a file holding the API key that Prometheus can read (mode 0600, "
            "owned by the prometheus user)",
        )
    return path


@monitoring_app.command(
    "config",
    epilog=example("sparkctl monitoring config -o /etc/prometheus/prometheus.yml",
                   "sparkctl monitoring config --api-key-file /etc/prometheus/sparkctl-api-key"),
)
def monitoring_config(
    ctx: typer.Context,
    inventory: InventoryOpt = None,
    api_key_file: Annotated[
        Path | None,
        typer.Option("--api-key-file", help="File Prometheus reads the API key from (default: the "
                     "inventory's sparkctl_secrets.api_key file)."),
    ] = None,
    interval: Annotated[
        int, typer.Option("--interval", min=1, max=3600, help="Scrape interval in seconds.")
    ] = 15,
    output: OutputOpt = None,
) -> None:
    """Print a Prometheus configuration scraping every node's exporter and rank 0's /metrics."""
    inv, _, _ = command_options(ctx, inventory, False)
    cluster = load_inventory(inv)
    text = monitoring.scrape_config(cluster, api_key_file=key_file_for(cluster, api_key_file),
                                    interval_s=interval)
    _emit(text, output, "Prometheus configuration")


@monitoring_app.command(
    "dashboard", epilog=example("sparkctl monitoring dashboard -o sparkctl-dashboard.json")
)
def monitoring_dashboard(output: OutputOpt = None) -> None:
    """Print the Grafana dashboard JSON (SGLang serving panels, per-node GPU, memory, NVMe, links)."""
    _emit(monitoring.dashboard_text(), output, "Grafana dashboard")


def register(app: typer.Typer) -> None:
    app.add_typer(monitoring_app, rich_help_panel=OBSERVE)
