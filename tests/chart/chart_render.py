"""Render the specops chart offline, with or without the Prometheus Operator's API present."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml
from helm_python import _native

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "charts" / "specops"
RELEASE = "specops"
NAMESPACE = "specops-system"
# What a cluster with the Prometheus Operator reports: the group version and each kind.
MONITORING_API = (
    "monitoring.coreos.com/v1",
    "monitoring.coreos.com/v1/PodMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
    "monitoring.coreos.com/v1/ServiceMonitor",
)


def render_manifests(
    chart: helm.Chart,
    values: dict[str, Any] | None = None,
    *,
    api_versions: Sequence[str] = (),
) -> dict[str, str]:
    """Template path -> rendered text, like `helm template --api-versions ...`."""
    options: dict[str, Any] = {"name": RELEASE, "namespace": NAMESPACE, "is_install": True}
    if api_versions:
        options["api_versions"] = list(api_versions)
    # Chart.render does not pass api_versions through; the library underneath accepts it.
    rendered = _native.call_string(
        "helm_render",
        chart._raw(),
        None if values is None else json.dumps(values),
        json.dumps(options),
    )
    manifests: dict[str, str] = json.loads(rendered)
    return manifests


def render_objects(
    chart: helm.Chart, values: dict[str, Any] | None = None, *, api_versions: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The chart's Kubernetes objects (NOTES.txt left out)."""
    manifests = render_manifests(chart, values, api_versions=api_versions)
    return [
        document
        for path, text in sorted(manifests.items())
        if path.endswith((".yaml", ".yml"))
        for document in yaml.safe_load_all(text)
        if document
    ]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def chart_crds() -> list[dict[str, Any]]:
    """The CustomResourceDefinitions the chart installs from its crds/ folder."""
    return [
        document
        for path in sorted((CHART_DIR / "crds").glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if document
    ]
