"""The committed CRD is exactly what the models generate, and it is structural and bounded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from specops.api import crd, crd_yaml
from specops.cli import main

CRD_FILE = Path(__file__).resolve().parents[2] / "crds" / "specops.io_speculativeservices.yaml"


def _nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for name, child in node.get("properties", {}).items():
        found += _nodes(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        found += _nodes(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        found += _nodes(node["items"], f"{path}[]")
    return found


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crd_matches_the_models() -> None:
    assert CRD_FILE.read_text() == crd_yaml(), "run: specops crd > " + str(CRD_FILE)


def test_specops_crd_prints_the_committed_file() -> None:
    result = CliRunner().invoke(main, ["crd"])
    assert result.exit_code == 0, result.output
    assert result.output == CRD_FILE.read_text()


def test_every_field_is_described_typed_and_bounded() -> None:
    for path, node in _nodes(_schema()):
        if path in (".apiVersion", ".kind", ".metadata"):
            continue
        assert node.get("description") or path.endswith(("[]", "*")), path
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, (
            path
        )
        assert not {"$ref", "allOf", "oneOf", "anyOf", "title"} & set(node), path
        if node["type"] == "string":
            assert "maxLength" in node or "enum" in node, f"{path}: unbounded string"
        if node["type"] == "array":
            assert "maxItems" in node, f"{path}: unbounded list"
        if node["type"] == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, f"{path}: unbounded map"


def test_defaults_enums_and_rules_reach_the_schema() -> None:
    spec = _schema()["properties"]["spec"]["properties"]
    speculation = spec["speculation"]
    # Object defaults are spelled out: the API server checks them against the CEL rules.
    assert spec["engine"]["default"]["tensorParallelSize"] == 1
    assert spec["policy"]["default"]["minDwellSeconds"] == 900
    assert spec["engine"]["properties"]["image"]["default"] == "vllm/vllm-openai:v0.33.0"
    assert speculation["properties"]["mode"]["enum"] == ["Auto", "Advise", "Fixed", "Off"]
    assert "eagle3" in speculation["properties"]["method"]["enum"]
    messages = [rule["message"] for rule in speculation["x-kubernetes-validations"]]
    assert any("draftModel is required" in message for message in messages)


def test_names_subresources_and_printer_columns() -> None:
    spec = crd()["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["shortNames"]) == (
        "specops.io",
        "Namespaced",
        ["specsvc"],
    )
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Mode",
        "K",
        "Concurrency",
        "AcceptLen",
        "Recommended",
        "Reason",
        "Ready",
        "Age",
    ]
    assert yaml.safe_load(CRD_FILE.read_text()) == crd()
