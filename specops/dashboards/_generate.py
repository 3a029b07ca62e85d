"""Dashboards as JSON files: rendered from the builders, written into the chart, drift-checked."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from specops.dashboards._fleet import fleet
from specops.dashboards._overview import overview

__all__ = ["DASHBOARDS", "iter_panels", "render_dashboards", "stale_dashboards", "write_dashboards"]

# File name in the chart's dashboards/ folder -> the builder of its dashboard.
DASHBOARDS: dict[str, Callable[[], db.Dashboard]] = {
    "specops-overview.json": overview,
    "specops-fleet.json": fleet,
}


def iter_panels(model: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel of a dashboard model, those nested in rows included, rows themselves not."""
    for panel in model.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def _to_model(builder: db.Dashboard) -> dict[str, Any]:
    model: dict[str, Any] = json.loads(JSONEncoder().encode(builder.build()))
    # Grafana keys panel state (links, edits) on ids, so they must be unique and stable.
    for panel_id, panel in enumerate(model.get("panels", []), start=1):
        panel["id"] = panel_id
    return model


def render_dashboards() -> dict[str, str]:
    """Each dashboard's JSON text, keyed by its file name; stable, so diffs stay readable."""
    return {
        name: json.dumps(_to_model(build()), indent=2, sort_keys=True) + "\n"
        for name, build in DASHBOARDS.items()
    }


def write_dashboards(directory: Path) -> list[Path]:
    """Write every dashboard into ``directory`` and drop JSON files no builder makes any more."""
    directory.mkdir(parents=True, exist_ok=True)
    rendered = render_dashboards()
    for stale in directory.glob("*.json"):
        if stale.name not in rendered:
            stale.unlink()
    written = []
    for name, text in rendered.items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def stale_dashboards(directory: Path) -> list[str]:
    """File names in ``directory`` that are missing, differ from the builders, or are left over."""
    rendered = render_dashboards()
    present = {path.name for path in directory.glob("*.json")}
    stale = [
        name
        for name, text in rendered.items()
        if name not in present or (directory / name).read_text(encoding="utf-8") != text
    ]
    return sorted([*stale, *(present - rendered.keys())])
