"""Every object the chart renders is valid against the Kubernetes OpenAPI schemas, strictly.

Built-in kinds use the Kubernetes JSON schemas (kubernetes-validate, strict: unknown fields
fail). Custom kinds use the openAPIV3Schema of their CRD: the chart's own CRDs, and a subset
of the Prometheus Operator's, with unknown fields rejected as `kubectl --validate=strict` does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from .chart_render import MONITORING_API, chart_crds
from .conftest import Render
from .test_chart_render import NON_DEFAULT

KUBERNETES_VERSION = "1.36.0"
MONITORING_SUBSET = Path(__file__).with_name("monitoring.coreos.com-subset.yaml")
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "non-default": NON_DEFAULT,
    "cluster-wide": {
        "operator": {"clusterWide": True, "peering": {"enabled": True}},
        "replicaCount": 3,
    },
    "minimal": {
        "rbac": {"create": False},
        "serviceAccount": {"create": False, "name": "existing"},
        "dashboards": {"enabled": False},
        "tests": {"enabled": False},
    },
}


def _strict(schema: Any) -> Any:
    """Reject unknown fields where a CRD schema lists properties, as strict validation does."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if (
            schema.get("type") == "object"
            and "properties" in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema.setdefault("additionalProperties", False)
        if schema.pop("x-kubernetes-int-or-string", False):
            schema["type"] = ["integer", "string"]
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


def _custom_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    crds = chart_crds() + yaml.safe_load(MONITORING_SUBSET.read_text(encoding="utf-8"))["items"]
    schemas = {}
    for crd in crds:
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
            schema["properties"].update(
                apiVersion={"const": f"{group}/{version['name']}"},
                kind={"const": kind},
                metadata={"type": "object"},
            )
            schema["additionalProperties"] = False
            schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


CUSTOM = _custom_schemas()


def validate(obj: dict[str, Any]) -> None:
    key = (obj["apiVersion"], obj["kind"])
    if key in CUSTOM:
        jsonschema.validate(obj, CUSTOM[key])
        # A CRD's schema leaves metadata to the API server, which checks it as ObjectMeta.
        obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_objects_match_the_openapi_schemas(render: Render, name: str) -> None:
    objects = render(VALUE_SETS[name], api_versions=MONITORING_API)
    assert objects
    for obj in objects:
        try:
            validate(obj)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as error:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {error.message}")


def test_the_chart_crds_are_valid_custom_resource_definitions() -> None:
    crds = chart_crds()
    assert {crd["spec"]["group"] for crd in crds} >= {"kopf.dev"}
    for crd in crds:
        kubernetes_validate.validate(crd, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    "broken",
    [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"portz": []}},
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "x"},
            "spec": {"selector": {}, "endpoints": [{"port": "metrics", "interval": "30 s"}]},
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {"name": "x"},
            "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expresion": "up"}]}]},
        },
    ],
)
def test_the_validation_catches_typos(broken: dict[str, Any]) -> None:
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        validate(broken)
