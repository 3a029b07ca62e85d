"""``specops alerts``: write the rule files, or check they are up to date."""

from __future__ import annotations

from pathlib import Path

import click

from specops.alerts._generate import stale_rule_files, write_rule_files

__all__ = ["alerts"]


@click.command()
@click.option(
    "--root",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=Path("."),
    show_default=True,
    help="The repository root; the files go to charts/specops/files and deploy/prometheus.",
)
@click.option("--check", is_flag=True, help="Write nothing; fail when the files are out of date.")
def alerts(root: Path, check: bool) -> None:
    """Generate the Prometheus alert rules into the chart and deploy/prometheus."""
    if check:
        stale = stale_rule_files(root)
        if stale:
            raise click.ClickException(
                f"{', '.join(map(str, stale))} differ from specops/alerts; "
                "run `specops alerts` and commit the result."
            )
        click.echo("alert rules up to date")
        return
    for path in write_rule_files(root):
        click.echo(f"wrote {path}")
