"""``specops crd``: print the SpeculativeService CRD generated from the API models."""

from __future__ import annotations

import click

from specops.api import crd_yaml

__all__ = ["crd"]


@click.command("crd")
def crd() -> None:
    """Print the SpeculativeService CustomResourceDefinition (YAML)."""
    click.echo(crd_yaml(), nl=False)
