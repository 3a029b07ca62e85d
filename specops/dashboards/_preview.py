"""A PNG preview of a dashboard drawn from a real Prometheus, for places without a Grafana.

It runs each panel's PromQL the way Grafana would (variables substituted, a range query
over the chosen time span) and draws the series with matplotlib: a line chart per time
series panel, the last value as a big number for a stat panel.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from specops.dashboards._generate import iter_panels
from specops.errors import MetricsError

__all__ = ["PanelData", "Series", "fetch_panels", "query_range", "render_preview", "substitute"]

_VARIABLE = re.compile(r"\$(\{)?(__\w+|\w+)(?(1)\})")


@dataclass(frozen=True)
class Series:
    legend: str
    times: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class PanelData:
    title: str
    kind: str
    unit: str
    series: tuple[Series, ...]


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """Replace ``$name`` and ``${name}`` as Grafana does; an unknown variable is an error."""

    def value(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in variables:
            raise MetricsError(f"no value for the dashboard variable ${name} in: {expr}")
        return variables[name]

    return _VARIABLE.sub(value, expr)


def _legend(template: str, labels: Mapping[str, str]) -> str:
    if not template or template == "__auto":
        return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def query_range(
    client: httpx.Client, expr: str, start: float, end: float, step: float
) -> list[dict[str, Any]]:
    """The ``matrix`` result of a range query; a Prometheus error raises MetricsError."""
    try:
        response = client.get(
            "/api/v1/query_range",
            params={"query": expr, "start": start, "end": end, "step": step},
        )
        body = response.json()
    except (httpx.HTTPError, ValueError) as error:
        raise MetricsError(f"range query failed: {expr}: {error}") from error
    if body.get("status") != "success":
        raise MetricsError(f"Prometheus rejected {expr}: {body.get('error', body)}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def fetch_panels(
    client: httpx.Client,
    model: Mapping[str, Any],
    variables: Mapping[str, str],
    start: float,
    end: float,
    step: float,
) -> list[PanelData]:
    """Every non-row panel of ``model`` with the series its queries return."""
    panels = []
    for panel in iter_panels(dict(model)):
        series: list[Series] = []
        for target in panel.get("targets", []):
            for found in query_range(
                client, substitute(target["expr"], variables), start, end, step
            ):
                points = [(float(t), float(v)) for t, v in found["values"]]
                series.append(
                    Series(
                        _legend(target.get("legendFormat", ""), found["metric"]),
                        tuple(t for t, _ in points),
                        tuple(v for _, v in points),
                    )
                )
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        panels.append(PanelData(panel["title"], panel["type"], unit, tuple(series)))
    return panels


def _last(series: Series) -> float:
    finite = [v for v in series.values if math.isfinite(v)]
    return finite[-1] if finite else math.nan


def render_preview(panels: list[PanelData], title: str, output: Path, *, columns: int = 3) -> Path:
    """Draw ``panels`` into one PNG at ``output``."""
    # Imported here: generating the dashboards must not pay for matplotlib.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = math.ceil(len(panels) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 3.2 * rows), squeeze=False)
    figure.suptitle(title, fontsize=16)
    for ax, panel in zip(axes.flat, panels, strict=False):
        ax.set_title(panel.title, fontsize=10)
        if not panel.series:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        elif panel.kind == "stat":
            value = _last(panel.series[0])
            ax.plot(panel.series[0].times, panel.series[0].values, alpha=0.3)
            ax.text(
                0.5,
                0.5,
                f"{value:.3g}",
                ha="center",
                va="center",
                fontsize=28,
                transform=ax.transAxes,
            )
            ax.set_xticks([])
        else:
            start = min(s.times[0] for s in panel.series if s.times)
            for s in panel.series:
                ax.plot([t - start for t in s.times], s.values, label=s.legend, linewidth=1.5)
            ax.set_xlabel("seconds", fontsize=8)
            ax.set_ylabel(panel.unit, fontsize=8)
            ax.legend(fontsize=7, loc="best")
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=80)
    plt.close(figure)
    return output
