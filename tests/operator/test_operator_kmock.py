"""The real kopf operator against kmock's in-memory Kubernetes API.

kmock stores objects and merges patches; it does not default fields, run controllers or
garbage-collect, so cascade deletion is checked through the owner references it would use.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kopf
import kubernetes
import pytest
import yaml

pytestmark = pytest.mark.integration

NS = "ml"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama.yaml"
SVC_PATH = f"/apis/specops.io/v1alpha1/namespaces/{NS}/speculativeservices"
DEPLOY_PATH = f"/apis/apps/v1/namespaces/{NS}/deployments"
RESOURCES = {
    "specops.io/v1alpha1/speculativeservices": "SpeculativeService",
    "apps/v1/deployments": "Deployment",
    "v1/services": "Service",
    "policy/v1/poddisruptionbudgets": "PodDisruptionBudget",
    "v1/events": "Event",
    # kopf watches these to notice new resources and namespaces.
    "apiextensions.k8s.io/v1/customresourcedefinitions": "CustomResourceDefinition",
    "v1/namespaces": "Namespace",
}
CLUSTER_SCOPED = {"CustomResourceDefinition", "Namespace"}


def _service() -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"].update(namespace=NS, uid="uid-llama-1", generation=1, resourceVersion="1")
    return body


async def _eventually(check: Callable[[], bool], what: str) -> None:
    """Poll until ``check`` holds; the deadline only stops a hung test, it is not a speed target."""
    for _ in range(600):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def _live(kmock: Any, resource: str, name: str) -> dict[str, Any] | None:
    for (res, namespace, obj_name), obj in kmock.objects.items():
        key = f"{res.group}/{res.version}/{res.plural}".lstrip("/")
        if key == resource and namespace == NS and obj_name == name and not obj.deleted:
            return dict(obj.raw)
    return None


def _writes(kmock: Any) -> list[str]:
    """Create and patch requests to owned kinds (not to the SpeculativeService or Events)."""
    return [
        f"{r.method.value} {r.url.path}"
        for r in list(kmock)
        if r.method.value in ("POST", "PATCH", "PUT")
        and r.resource is not None
        and r.resource.plural in ("deployments", "services", "poddisruptionbudgets")
    ]


def _reconciles(kmock: Any) -> int:
    """Each reconciliation reads the Deployment once by name."""
    return sum(
        1 for r in list(kmock) if r.method.value == "GET" and r.url.path == f"{DEPLOY_PATH}/llama"
    )


@pytest.fixture
async def operator(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
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
    task = asyncio.create_task(kopf.operator(clusterwide=True, standalone=True, stop_flag=stop))
    try:
        yield kmock
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=30)


async def test_operator_creates_children_reports_status_and_reverts_drift(operator: Any) -> None:
    kmock = operator
    body = _service()
    async with kmock.post(SVC_PATH, json=body) as response:
        assert response.status in (200, 201)

    await _eventually(
        lambda: _live(kmock, "apps/v1/deployments", "llama") is not None, "Deployment"
    )
    await _eventually(
        lambda: (
            (_live(kmock, "specops.io/v1alpha1/speculativeservices", "llama") or {})
            .get("status", {})
            .get("speculativeConfig")
            is not None
        ),
        "status written",
    )
    deployment = _live(kmock, "apps/v1/deployments", "llama")
    assert deployment is not None
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    config = args[args.index("--speculative-config") + 1]
    assert '"method":"eagle3"' in config
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]] == [
        "vllm",
        "specops-sidecar",
    ]
    for resource, name in (
        ("apps/v1/deployments", "llama"),
        ("v1/services", "llama"),
        ("policy/v1/poddisruptionbudgets", "llama-pdb"),
    ):
        child = _live(kmock, resource, name)
        assert child is not None, name
        (owner,) = child["metadata"]["ownerReferences"]
        assert (
            owner["uid"] == "uid-llama-1"
            and owner["controller"]
            and owner["kind"] == ("SpeculativeService")
        )
    assert _live(kmock, "monitoring.coreos.com/v1/podmonitors", "llama") is None
    events = [obj.raw for (res, _, _), obj in kmock.objects.items() if res.plural == "events"]
    assert any(e.get("reason") == "Created" for e in events), events  # kmock keeps only the first

    service = _live(kmock, "specops.io/v1alpha1/speculativeservices", "llama")
    assert service is not None
    status = service["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert set(conditions) == {
        "Ready",
        "Progressing",
        "Degraded",
        "MetricsAvailable",
        "SpeculationActive",
    }
    assert conditions["SpeculationActive"]["status"] == "True"
    assert conditions["MetricsAvailable"]["status"] == "Unknown"
    assert conditions["Ready"]["status"] == "False"  # no Deployment controller in kmock
    assert status["observedGeneration"] == 1
    assert status["selector"] == "app.kubernetes.io/name=vllm,app.kubernetes.io/instance=llama"
    assert status["speculativeConfig"]["json"] == config

    # Idempotence: an annotation on the parent reconciles again and writes no child.
    await _eventually(lambda: len(_writes(kmock)) == 3, "three creations")
    settled = len(_writes(kmock))
    reconciles_before = _reconciles(kmock)
    async with kmock.patch(
        f"{SVC_PATH}/llama",
        json={"metadata": {"annotations": {"example.com/note": "idle"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    ):
        pass
    await _eventually(lambda: _reconciles(kmock) > reconciles_before, "a second reconciliation")
    await asyncio.sleep(0.5)
    assert _writes(kmock)[settled:] == []

    # Drift: someone scales the Deployment by hand; the operator puts it back.
    async with kmock.patch(
        f"{DEPLOY_PATH}/llama",
        json={"spec": {"replicas": 7}},
        headers={"Content-Type": "application/merge-patch+json"},
    ):
        pass
    await _eventually(
        lambda: (_live(kmock, "apps/v1/deployments", "llama") or {})["spec"]["replicas"] == 2,
        "drift reverted",
    )

    # A spec change re-renders the Deployment (a rolling update with maxUnavailable 0).
    changed = copy.deepcopy(body["spec"]["speculation"])
    changed["mode"] = "Off"
    async with kmock.patch(
        f"{SVC_PATH}/llama",
        json={"metadata": {"generation": 2}, "spec": {"speculation": changed}},
        headers={"Content-Type": "application/merge-patch+json"},
    ):
        pass
    await _eventually(
        lambda: (
            "--speculative-config"
            not in (_live(kmock, "apps/v1/deployments", "llama") or {})["spec"]["template"]["spec"][
                "containers"
            ][0]["args"]
        ),
        "speculation turned off",
    )
    await _eventually(
        lambda: (
            (_live(kmock, "specops.io/v1alpha1/speculativeservices", "llama") or {})["status"][
                "observedGeneration"
            ]
            == 2
        ),
        "status of generation 2",
    )
    service = _live(kmock, "specops.io/v1alpha1/speculativeservices", "llama")
    assert service is not None
    conditions = {c["type"]: c for c in service["status"]["conditions"]}
    assert conditions["SpeculationActive"]["status"] == "False"
    assert service["status"]["speculativeConfig"] == {
        "enabled": False,
        "numSpeculativeTokens": 0,
        "source": "Spec",
        "specHash": service["status"]["speculativeConfig"]["specHash"],
    }
