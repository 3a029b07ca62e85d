"""``specops render -f FILE``: print the objects the operator would create (a dry run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import yaml

from specops.api import parse_service
from specops.errors import SpecValidationError
from specops.render import RenderOptions, plan

__all__ = ["render"]


def _services(path: Path) -> list[dict[str, Any]]:
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    except yaml.YAMLError as exc:
        raise click.ClickException(f"{path}: not valid YAML: {exc}") from exc
    services = [doc for doc in documents if doc.get("kind") == "SpeculativeService"]
    if not services:
        raise click.ClickException(f"{path}: no SpeculativeService in the file")
    return services


@click.command("render")
@click.option(
    "-f",
    "--filename",
    "path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML file with one or more SpeculativeService objects.",
)
@click.option("--sidecar-image", default=RenderOptions.sidecar_image, show_default=True)
@click.option("--pod-monitor/--no-pod-monitor", default=False, help="Also render a PodMonitor.")
def render(path: Path, sidecar_image: str, pod_monitor: bool) -> None:
    """Print, as YAML, every object the operator would create for FILE."""
    options = RenderOptions(sidecar_image=sidecar_image, pod_monitor=pod_monitor)
    objects: list[dict[str, Any]] = []
    for document in _services(path):
        try:
            objects.extend(plan(parse_service(document), options).objects)
        except SpecValidationError as exc:
            raise click.ClickException(f"{path}: {exc}") from exc
    click.echo(yaml.safe_dump_all(objects, sort_keys=False, width=1000), nl=False)
