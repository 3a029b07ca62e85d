"""values.schema.json rejects wrong values with the key's path; the README documents every value."""

from __future__ import annotations

import json
import re
from typing import Any

import helm_python as helm
import pytest
import yaml

from .chart_render import CHART_DIR

# Values whose default is a whole object documented as one row.
DOCUMENTED_WHOLE = {"resources", "podSecurityContext", "securityContext"}


def _leaves(values: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(values, dict) and values and prefix not in DOCUMENTED_WHOLE:
        found: dict[str, Any] = {}
        for key, value in values.items():
            found |= _leaves(value, f"{prefix}.{key}" if prefix else key)
        return found
    return {prefix: values}


def test_lint_strict_passes_with_default_and_other_values() -> None:
    for values in (None, {"operator": {"clusterWide": True}, "replicaCount": 1}):
        report = helm.lint(CHART_DIR, values, strict=True)
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert not problems and not report["errors"], report


def test_defaults_pass_the_schema(chart: helm.Chart) -> None:
    chart.validate_schema({})


@pytest.mark.parametrize(
    ("values", "path"),
    [
        ({"replicaCount": 0}, "/replicaCount"),
        ({"replicas": 2}, "replicas"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"operator": {"watchNamespaces": ["Not_A_Namespace"]}}, "/operator/watchNamespaces/0"),
        ({"operator": {"metricsPort": 70000}}, "/operator/metricsPort"),
        (
            {"metrics": {"serviceMonitor": {"interval": "30 seconds"}}},
            "/metrics/serviceMonitor/interval",
        ),
        ({"dashboards": {"labelValue": 1}}, "/dashboards/labelValue"),
        ({"resources": {"requests": {"memory": "lots"}}}, "/resources/requests/memory"),
    ],
)
def test_wrong_values_are_rejected_naming_the_key(
    chart: helm.Chart, values: dict[str, Any], path: str
) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(path)):
        chart.validate_schema(values)


def test_readme_documents_every_value_with_its_default() -> None:
    defaults = _leaves(yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8")))
    readme = (CHART_DIR / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([^`]+)` \| `([^`]*)` \|", readme, re.MULTILINE))
    assert set(rows) == set(defaults)
    for key, default in defaults.items():
        assert yaml.safe_load(rows[key]) == default, key


def test_schema_documents_every_value() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    defaults = _leaves(yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8")))
    for key in defaults:
        node = schema
        for part in key.split("."):
            node = node["properties"][part]
        assert node.get("description"), key
