"""Run the real kopf operator against kmock's in-memory Kubernetes API, and read what it wrote.

kmock stores objects and merges patches; it does not default fields, run controllers,
filter by label or garbage-collect. :class:`ApplyingEmulator` adds the one part of
server-side apply the operator needs to run here: an apply creates a missing object. It keeps
no field managers (an apply merges like a merge patch), so what an apply removes is checked
on the real API server by the e2e suite.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp.web
import kmock
import kopf
import kubernetes
import pytest
import yaml

__all__ = [
    "APPLY_PATCH",
    "DEPLOY_PATH",
    "EXAMPLE",
    "NS",
    "SVC_PATH",
    "ApplyingEmulator",
    "eventually",
    "live",
    "run_operator",
    "service_body",
]

NS = "ml"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama.yaml"
SVC_PATH = f"/apis/specops.io/v1alpha1/namespaces/{NS}/speculativeservices"
DEPLOY_PATH = f"/apis/apps/v1/namespaces/{NS}/deployments"
RESOURCES = {
    "specops.io/v1alpha1/speculativeservices": "SpeculativeService",
    "apps/v1/deployments": "Deployment",
    "v1/services": "Service",
    "v1/pods": "Pod",
    "policy/v1/poddisruptionbudgets": "PodDisruptionBudget",
    "v1/events": "Event",
    # kopf watches these to notice new resources and namespaces.
    "apiextensions.k8s.io/v1/customresourcedefinitions": "CustomResourceDefinition",
    "v1/namespaces": "Namespace",
}
CLUSTER_SCOPED = {"CustomResourceDefinition", "Namespace"}
APPLY_PATCH = "application/apply-patch+yaml"


class ApplyingEmulator(kmock.KubernetesEmulator):
    """kmock's Kubernetes emulator, where a server-side apply of a missing object creates it.

    The object is stored before kmock handles the request as a patch of it, so the apply
    answers 200 with the object and watchers see it as modified.
    """

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if (
            request.method == kmock.method.PATCH
            and request.headers.get("Content-Type") == APPLY_PATCH
            and request.resource is not None
            and request.name is not None
        ):
            key = (request.resource, request.namespace, request.name)
            if key not in self.objects or self.objects[key].deleted:
                self.objects[key] = request.data
        return await super()._handle(request)


def service_body() -> dict[str, Any]:
    """The example SpeculativeService, in the test namespace."""
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"].update(namespace=NS, uid="uid-llama-1", generation=1, resourceVersion="1")
    return body


async def eventually(check: Callable[[], bool], what: str) -> None:
    """Poll until ``check`` holds; the deadline only stops a hung test, it is not a speed target."""
    for _ in range(600):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def live(kmock: Any, resource: str, name: str) -> dict[str, Any] | None:
    """The stored object, or None."""
    for (res, namespace, obj_name), obj in kmock.objects.items():
        key = f"{res.group}/{res.version}/{res.plural}".lstrip("/")
        if key == resource and namespace == NS and obj_name == name and not obj.deleted:
            return dict(obj.raw)
    return None


@contextlib.asynccontextmanager
async def run_operator(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memo: kopf.Memo | None = None
) -> AsyncIterator[Any]:
    """The operator, logged in to kmock, until the block ends (stopped also on failure)."""
    for resource, kind in RESOURCES.items():
        kmock.resources[resource] = kmock.ResourceInfo(
            kind=kind,
            namespaced=kind not in CLUSTER_SCOPED,
            verbs={"get", "list", "watch", "create", "patch", "update", "delete"},
            subresources={"status"} if kind == "SpeculativeService" else set(),
        )
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": str(kmock.url).rstrip("/")}}],
        "users": [{"name": "kmock", "user": {"token": "test"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
        "current-context": "kmock",
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    # The client library (kopf logs in through it) read KUBECONFIG when it was imported.
    monkeypatch.setattr(
        kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "kubeconfig")
    )

    import specops_operator._handlers  # noqa: F401  (registers the handlers)

    stop = asyncio.Event()
    task = asyncio.create_task(
        kopf.operator(clusterwide=True, standalone=True, stop_flag=stop, memo=memo)
    )
    try:
        yield kmock
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=30)
