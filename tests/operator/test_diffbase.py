"""The essence kopf compares spec changes by, built without copying what it discards."""

from __future__ import annotations

import copy
from typing import Any, cast

import kopf
import pytest
from specops_operator._diffbase import LeanDiffBase

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "llama-0",
        "namespace": "ml",
        "uid": "u-1",
        "resourceVersion": "42",
        "labels": {"app": "llama"},
        "annotations": {
            "team": "ml",
            "kopf.zalando.org/last-handled-configuration": '{"spec": {}}',
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        },
        "ownerReferences": [{"kind": "ReplicaSet", "name": "llama-1", "uid": "r-1"}],
        "managedFields": [{"manager": "kube-scheduler", "fieldsV1": {"f:spec": {}}}] * 20,
    },
    "spec": {"containers": [{"name": "vllm", "args": ["--port", "8000"]}]},
    "status": {"phase": "Running", "podIP": "127.1.0.1"},
}


def _body(raw: dict[str, Any]) -> kopf.Body:
    return kopf.Body(cast(kopf.RawBody, copy.deepcopy(raw)))


@pytest.mark.parametrize(
    "extra",
    [None, ["status.phase"], [("metadata", "name")], ["spec.containers"]],
    ids=["plain", "a status field", "a metadata field", "a spec field"],
)
def test_the_lean_essence_is_kopfs_own(extra: list[Any] | None) -> None:
    kopfs = kopf.AnnotationsDiffBaseStorage().build(body=_body(POD), extra_fields=extra)
    lean = LeanDiffBase().build(body=_body(POD), extra_fields=extra)
    assert lean == kopfs
    if extra == ["status.phase"]:
        assert lean["status"] == {"phase": "Running"}


def test_the_lean_essence_leaves_the_body_as_it_was() -> None:
    body = _body(POD)
    essence = LeanDiffBase().build(body=body)
    essence["spec"]["containers"][0]["args"].append("--changed")  # a copy, not the body's
    assert dict(body) == POD
    assert "managedFields" not in essence.get("metadata", {})
