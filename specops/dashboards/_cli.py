"""``specops dashboards``: write the dashboards into the chart, or check they are up to date."""

from __future__ import annotations

from pathlib import Path

import click

from specops.dashboards._generate import stale_dashboards, write_dashboards

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
