"""Pods as the API server returns them, from the Deployment rendered for examples/llama.yaml."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from specops.api import parse_service
from specops.render import RenderOptions, plan

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llama.yaml"


def llama_deployment(namespace: str = "default") -> dict[str, Any]:
    """The Deployment the operator renders for the example, in ``namespace``."""
    document = yaml.safe_load(EXAMPLE.read_text())
    document["metadata"]["namespace"] = namespace
    objects = plan(parse_service(document), RenderOptions()).objects
    return next(o for o in objects if o["kind"] == "Deployment")


def pod_of(
    deployment: dict[str, Any],
    name: str = "llama-abc-1",
    *,
    uid: str = "uid-1",
    node: str | None = "kwok-gpu-0",
    phase: str = "Running",
    ip: str | None = "127.200.0.1",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod of ``deployment`` as the scheduler and kwok leave it, with a loopback IP as the
    local cluster's nodes hand out."""
    template = copy.deepcopy(deployment["spec"]["template"])
    metadata = {
        **template["metadata"],
        "name": name,
        "namespace": deployment["metadata"]["namespace"],
        "uid": uid,
        "annotations": {**template["metadata"].get("annotations", {}), **(annotations or {})},
    }
    spec = {**template["spec"], **({"nodeName": node} if node else {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase, **({"podIP": ip} if ip else {})},
    }
