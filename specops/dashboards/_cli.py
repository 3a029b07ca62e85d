"""``specops dashboards``: write the dashboards into the chart, or check they are up to date."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import click
import httpx

from specops.dashboards._generate import render_dashboards, stale_dashboards, write_dashboards
from specops.dashboards._preview import fetch_panels, render_preview

__all__ = ["dashboards"]

DEFAULT_DIRECTORY = Path("charts/specops/dashboards")


@click.group(invoke_without_command=True)
@click.option(
    "--directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_DIRECTORY,
    show_default=True,
    help="Where the dashboard JSON files go (the chart's dashboards/ folder).",
)
@click.option("--check", is_flag=True, help="Write nothing; fail when the files are out of date.")
@click.pass_context
def dashboards(ctx: click.Context, directory: Path, check: bool) -> None:
    """Generate the Grafana dashboards into the Helm chart."""
    if ctx.invoked_subcommand is not None:
        return
    if check:
        stale = stale_dashboards(directory)
        if stale:
            raise click.ClickException(
                f"{', '.join(stale)} in {directory} differ from specops/dashboards; "
                "run `specops dashboards` and commit the result."
            )
        click.echo(f"{directory}: dashboards up to date")
        return
    for path in write_dashboards(directory):
        click.echo(f"wrote {path}")


@dashboards.command()
@click.option("--prometheus", "prometheus_url", required=True, help="Prometheus base URL.")
@click.option("--namespace", required=True, help="Namespace of the SpeculativeService.")
@click.option("--service", required=True, help="The SpeculativeService.")
@click.option("--minutes", default=15.0, show_default=True, help="Time span to draw.")
@click.option(
    "--scrape-interval", default=15.0, show_default=True, help="Prometheus's, in seconds."
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("out/dashboards/overview.png"),
    show_default=True,
)
def preview(
    prometheus_url: str,
    namespace: str,
    service: str,
    minutes: float,
    scrape_interval: float,
    output: Path,
) -> None:
    """Draw the overview dashboard's panels from a Prometheus into a PNG."""
    end = time.time()
    start = end - minutes * 60
    step = max(1.0, (end - start) / 200)
    # Grafana's $__rate_interval: at least four scrapes, and at least a step plus a scrape.
    rate = f"{math.ceil(max(4 * scrape_interval, step + scrape_interval))}s"
    variables = {
        "namespace": namespace,
        "service": service,
        "datasource": "prometheus",
        "__rate_interval": rate,
        "__interval": f"{int(step)}s",
    }
    model = json.loads(render_dashboards()["specops-overview.json"])
    with httpx.Client(base_url=prometheus_url, timeout=30) as client:
        panels = fetch_panels(client, model, variables, start, end, step)
    render_preview(panels, f"{model['title']}: {namespace}/{service}", output)
    click.echo(f"wrote {output}")
