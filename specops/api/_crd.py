"""Generate the SpeculativeService CRD from the pydantic models.

Pydantic emits JSON Schema 2020-12 with ``$ref``s and ``anyOf [X, null]`` for optional
fields; Kubernetes wants a structural OpenAPI v3 schema: everything inlined, one type per
node, descriptions everywhere (``kubectl explain``), bounded strings and lists (so the CEL
cost estimator accepts the rules). :func:`structural_schema` does that translation and
refuses a model that would produce a field without a description.
"""

from __future__ import annotations

from typing import Any

import yaml

from specops.api._models import (
    GROUP,
    KIND,
    NAME_RULE,
    PLURAL,
    VERSION,
    SpeculativeServiceSpec,
    SpeculativeServiceStatus,
)
from specops.errors import SpecopsError

__all__ = ["crd", "crd_yaml", "structural_schema"]

_DROPPED_KEYS = frozenset({"title", "$defs", "additionalProperties"})
_PRINTER_COLUMNS: tuple[dict[str, Any], ...] = (
    {
        "name": "Mode",
        "type": "string",
        "jsonPath": ".spec.speculation.mode",
        "description": "Speculation mode",
    },
    {
        "name": "K",
        "type": "integer",
        "jsonPath": ".status.speculativeConfig.numSpeculativeTokens",
        "description": "Draft tokens per step in force (0: off)",
    },
    {
        "name": "Concurrency",
        "type": "number",
        "jsonPath": ".status.lastMeasurements.concurrency",
        "description": "Mean running requests per pod",
    },
    {
        "name": "AcceptLen",
        "type": "number",
        "jsonPath": ".status.lastMeasurements.acceptanceLength",
        "description": "Mean acceptance length",
    },
    {
        "name": "Recommended",
        "type": "integer",
        "jsonPath": ".status.lastDecision.recommended.numSpeculativeTokens",
        "description": "k the last decision chose; in Advise mode it is not applied",
    },
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": ".status.lastDecision.reasonCode",
        "description": "Why the last decision acted or held back (e.g. MinDwell, MetricsStale)",
    },
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        "description": "Ready condition",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline a ``$ref`` and unwrap ``anyOf [X, null]``; sibling keys win over the target's."""
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        return _resolve({**target, **siblings}, defs)
    variants = node.get("anyOf")
    if variants is not None:
        non_null = [variant for variant in variants if variant.get("type") != "null"]
        rest = {key: value for key, value in node.items() if key != "anyOf"}
        if len(non_null) == 1:
            return _resolve({**_resolve(non_null[0], defs), **rest}, defs)
        if rest.get("x-kubernetes-int-or-string"):
            pattern = next((v["pattern"] for v in non_null if "pattern" in v), None)
            int_or_string = {"anyOf": [{"type": "integer"}, {"type": "string"}], **rest}
            return int_or_string if pattern is None else {**int_or_string, "pattern": pattern}
        raise SpecopsError(f"cannot express anyOf {variants} in a structural schema")
    return node


def structural_schema(node: dict[str, Any], defs: dict[str, Any], path: str = "") -> dict[str, Any]:
    """Translate one pydantic JSON-schema node (and its children) into structural OpenAPI v3."""
    node = _resolve(node, defs)
    out = _own_keywords(node)
    if "properties" in node:
        out["properties"] = _properties(node["properties"], defs, path)
        if isinstance(out.get("default"), dict):
            # Spelled out rather than {}: the API server checks a default against the CEL
            # rules at CRD creation without filling the nested defaults first.
            out["default"] = {
                name: child["default"]
                for name, child in out["properties"].items()
                if "default" in child
            }
    elif isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = structural_schema(
            node["additionalProperties"], defs, f"{path}.*"
        )
    if "items" in node:
        out["items"] = structural_schema(node["items"], defs, f"{path}[]")
    if node.get("x-kubernetes-preserve-unknown-fields"):
        out["type"] = "object"
    return _ordered(out)


def _own_keywords(node: dict[str, Any]) -> dict[str, Any]:
    """A resolved node's keywords that OpenAPI v3 keeps: exclusive bounds spelled as a bound
    and a flag, no empty or null default."""
    out: dict[str, Any] = {key: value for key, value in node.items() if key not in _DROPPED_KEYS}
    if "exclusiveMinimum" in out:
        out["minimum"], out["exclusiveMinimum"] = out["exclusiveMinimum"], True
    if "exclusiveMaximum" in out:
        out["maximum"], out["exclusiveMaximum"] = out["exclusiveMaximum"], True
    if out.get("default") is None or out.get("default") in ([], {}):
        out.pop("default", None)
    return out


def _properties(
    properties: dict[str, Any], defs: dict[str, Any], path: str
) -> dict[str, dict[str, Any]]:
    """Each property translated; every one must carry a description (the CRD documents them)."""
    for name, child in properties.items():
        if "description" not in _resolve(child, defs):
            raise SpecopsError(f"field {path}.{name} has no description")
    return {
        name: structural_schema(child, defs, f"{path}.{name}") for name, child in properties.items()
    }


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    """Description and type first, the rest sorted: a stable, readable generated file."""
    head = [key for key in ("description", "type") if key in node]
    return {key: node[key] for key in head + sorted(set(node) - set(head))}


def _root_schema() -> dict[str, Any]:
    specs = [
        (name, model.model_json_schema(by_alias=True, mode="validation"))
        for name, model in (("spec", SpeculativeServiceSpec), ("status", SpeculativeServiceStatus))
    ]
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string", "description": "API version: specops.io/v1alpha1."},
        "kind": {"type": "string", "description": "Kind: SpeculativeService."},
        "metadata": {"type": "object"},
    }
    for name, schema in specs:
        properties[name] = structural_schema(schema, schema.get("$defs", {}), name)
    return {
        "type": "object",
        "description": (
            "SpeculativeService runs a vLLM model with speculative decoding on Kubernetes "
            "and keeps the speculation right for the load."
        ),
        "required": ["spec"],
        "properties": properties,
        "x-kubernetes-validations": [NAME_RULE.to_crd()],
    }


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition of SpeculativeService, as a plain dict."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "specops"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": ["specsvc"],
                "categories": ["specops"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _root_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": list(_PRINTER_COLUMNS),
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The CRD as the YAML committed at crds/specops.io_speculativeservices.yaml."""
    header = "# Generated by `specops crd` from specops/api; do not edit by hand.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=100, allow_unicode=True)
