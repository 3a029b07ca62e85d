"""The real kopf operator against kmock's in-memory Kubernetes API.

kmock stores objects and merges patches; it does not default fields, run controllers or
garbage-collect, so cascade deletion is checked through the owner references it would use.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.operator.kmock_env import (
    APPLY_PATCH,
    DEPLOY_PATH,
    NS,
    SVC_PATH,
    ApplyingEmulator,
    eventually,
    live,
    run_operator,
    service_body,
)

pytestmark = [pytest.mark.integration, pytest.mark.kmock(cls=ApplyingEmulator)]
CHILD_WRITES = "specops_operator_child_writes_total"


def _write_requests(kmock: Any) -> list[Any]:
    """Create, patch and replace requests to owned kinds (not to the service or Events)."""
    return [
        r
        for r in list(kmock)
        if r.method.value in ("POST", "PATCH", "PUT")
        and r.resource is not None
        and r.resource.plural in ("deployments", "services", "poddisruptionbudgets")
    ]


def _writes(kmock: Any) -> list[str]:
    return [f"{r.method.value} {r.url.path}" for r in _write_requests(kmock)]


def _reconciles(kmock: Any) -> float:
    """The reconciliations that ended, from the operator's own counter (it runs in this
    process); with the watch cache a reconciliation of an unchanged service sends nothing."""
    ended = (
        REGISTRY.get_sample_value("specops_operator_reconciles_total", {"result": r})
        for r in ("ok", "error")
    )
    return sum(value or 0.0 for value in ended)


@pytest.fixture
async def operator(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    async with run_operator(kmock, tmp_path, monkeypatch) as running:
        yield running


async def test_operator_creates_children_reports_status_and_reverts_drift(operator: Any) -> None:
    kmock = operator
    body = service_body()
    async with kmock.post(SVC_PATH, json=body) as response:
        assert response.status in (200, 201)

    config = await _children_created(kmock)
    _status_reported(kmock, config)
    await _children_applied(kmock)
    settled = await _idempotent(kmock)
    await _drift_reverted(kmock, settled)
    await _spec_change_rendered(kmock, body)


async def _children_created(kmock: Any) -> str:
    """The children exist, owned by the service; returns the Deployment's speculative config."""
    await eventually(lambda: live(kmock, "apps/v1/deployments", "llama") is not None, "Deployment")
    await eventually(
        lambda: (
            (live(kmock, "specops.io/v1alpha1/speculativeservices", "llama") or {})
            .get("status", {})
            .get("speculativeConfig")
            is not None
        ),
        "status written",
    )
    deployment = live(kmock, "apps/v1/deployments", "llama")
    assert deployment is not None
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    config: str = args[args.index("--speculative-config") + 1]
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
        child = live(kmock, resource, name)
        assert child is not None, name
        (owner,) = child["metadata"]["ownerReferences"]
        assert (
            owner["uid"] == "uid-llama-1"
            and owner["controller"]
            and owner["kind"] == ("SpeculativeService")
        )
    assert live(kmock, "monitoring.coreos.com/v1/podmonitors", "llama") is None
    events = [obj.raw for (res, _, _), obj in kmock.objects.items() if res.plural == "events"]
    assert any(e.get("reason") == "Created" for e in events), events  # kmock keeps only the first
    return config


def _status_reported(kmock: Any, config: str) -> None:
    service = live(kmock, "specops.io/v1alpha1/speculativeservices", "llama")
    assert service is not None
    status = service["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert set(conditions) == {
        "Ready",
        "Progressing",
        "Degraded",
        "SpeculationActive",
    }  # MetricsAvailable is the control loop's, which has not measured yet
    assert conditions["SpeculationActive"]["status"] == "True"
    assert conditions["Ready"]["status"] == "False"  # no Deployment controller in kmock
    assert status["observedGeneration"] == 1
    # The pods are selected by the owner's uid too, which only the operator sets.
    assert status["selector"] == (
        "app.kubernetes.io/name=vllm,app.kubernetes.io/instance=llama,"
        "specops.io/owner-uid=uid-llama-1"
    )
    assert status["speculativeConfig"]["json"] == config


async def _children_applied(kmock: Any) -> None:
    # Each child is created by one server-side apply as the specops field manager, forcing
    # conflicts, with a body that names it fully.
    await eventually(lambda: len(_writes(kmock)) == 3, "three creations")
    for request in _write_requests(kmock):
        assert request.method.value == "PATCH", request.url
        assert request.headers["Content-Type"] == APPLY_PATCH
        assert request.params == {"fieldManager": "specops", "force": "true"}
        applied = json.loads(request.body)  # as sent (the emulator stamps its own copy)
        assert (applied["apiVersion"], applied["metadata"]["namespace"]) == (
            f"{request.resource.group}/{request.resource.version}".lstrip("/"),
            "ml",
        )
        assert request.url.path.endswith(f"/{applied['metadata']['name']}")
        assert applied["kind"] in ("Deployment", "Service", "PodDisruptionBudget")
        assert "status" not in applied and "resourceVersion" not in applied["metadata"]


async def _idempotent(kmock: Any) -> int:
    """Returns how many child writes there were once the operator had settled."""
    # Idempotence: an annotation on the parent reconciles again and writes no child.
    settled = len(_writes(kmock))
    reconciles_before = _reconciles(kmock)
    async with kmock.patch(
        f"{SVC_PATH}/llama",
        json={"metadata": {"annotations": {"example.com/note": "idle"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    ):
        pass
    await eventually(lambda: _reconciles(kmock) > reconciles_before, "a second reconciliation")
    await asyncio.sleep(0.5)
    assert _writes(kmock)[settled:] == []
    # Whether PodMonitors are served was asked once, not at every reconciliation.
    discovery = [r for r in list(kmock) if r.url.path == "/apis/monitoring.coreos.com"]
    assert len(discovery) == 1, discovery
    return settled


async def _drift_reverted(kmock: Any, settled: int) -> None:
    # Drift: someone scales the Deployment by hand; the operator applies it back.
    reverted = {"kind": "Deployment", "action": "reverted"}
    reverts_before = REGISTRY.get_sample_value(CHILD_WRITES, reverted) or 0.0
    async with kmock.patch(
        f"{DEPLOY_PATH}/llama",
        json={"spec": {"replicas": 7}},
        headers={"Content-Type": "application/merge-patch+json"},
    ):
        pass
    await eventually(
        lambda: (live(kmock, "apps/v1/deployments", "llama") or {})["spec"]["replicas"] == 2,
        "drift reverted",
    )
    # The counter moves once the apply has returned, a moment after the object changed.
    await eventually(
        lambda: REGISTRY.get_sample_value(CHILD_WRITES, reverted) == reverts_before + 1,
        "the revert counted",
    )
    after = [(r.url.path, r.headers["Content-Type"]) for r in _write_requests(kmock)[settled:]]
    assert after == [
        (f"{DEPLOY_PATH}/llama", "application/merge-patch+json"),  # the edit by hand
        (f"{DEPLOY_PATH}/llama", APPLY_PATCH),
    ]


async def _turn_speculation_off(kmock: Any, body: dict[str, Any]) -> None:
    """A user's edit of the spec: speculation off, generation 2."""
    changed = copy.deepcopy(body["spec"]["speculation"])
    changed["mode"] = "Off"
    async with kmock.patch(
        f"{SVC_PATH}/llama",
        json={"metadata": {"generation": 2}, "spec": {"speculation": changed}},
        headers={"Content-Type": "application/merge-patch+json"},
    ):
        pass


def _rendered_off(kmock: Any) -> bool:
    """Whether the Deployment runs the engine without speculation."""
    deployment = live(kmock, "apps/v1/deployments", "llama") or {}
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return "--speculative-config" not in containers[0]["args"]


async def _spec_change_rendered(kmock: Any, body: dict[str, Any]) -> None:
    # A spec change re-renders the Deployment (a rolling update with maxUnavailable 0).
    await _turn_speculation_off(kmock, body)
    await eventually(lambda: _rendered_off(kmock), "speculation turned off")
    await eventually(
        lambda: (
            (live(kmock, "specops.io/v1alpha1/speculativeservices", "llama") or {})["status"][
                "observedGeneration"
            ]
            == 2
        ),
        "status of generation 2",
    )
    service = live(kmock, "specops.io/v1alpha1/speculativeservices", "llama")
    assert service is not None
    conditions = {c["type"]: c for c in service["status"]["conditions"]}
    assert conditions["SpeculationActive"]["status"] == "False"
    assert service["status"]["speculativeConfig"] == {
        "enabled": False,
        "numSpeculativeTokens": 0,
        "source": "Spec",
        "specHash": service["status"]["speculativeConfig"]["specHash"],
    }


async def test_a_spec_only_the_operator_finds_wrong_is_degraded_with_one_warning(
    operator: Any,
) -> None:
    """--data-parallel-size abc (two arguments: no CEL rule sees it) cannot be rendered: the
    object says so in a Degraded condition and a Warning Event, not in a silent retry."""
    kmock = operator
    body = service_body()
    body["spec"]["engine"]["extraArgs"] = ["--data-parallel-size", "abc"]
    async with kmock.post(SVC_PATH, json=body) as response:
        assert response.status in (200, 201)

    def degraded() -> dict[str, Any] | None:
        service = live(kmock, "specops.io/v1alpha1/speculativeservices", "llama") or {}
        found = [
            c for c in (service.get("status") or {}).get("conditions") or []
            if c["type"] == "Degraded"
        ]  # fmt: skip
        return found[0] if found else None

    await eventually(lambda: degraded() is not None, "a Degraded condition")
    condition = degraded()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "InvalidSpec")
    assert "'abc' is not a data-parallel size" in condition["message"]

    def warnings() -> list[str]:
        # kopf posts Events from a queue of its own: the Warning may trail the condition
        return [
            r.data["type"]
            for r in list(kmock)
            if r.method.value == "POST"
            and r.resource is not None
            and r.resource.plural == "events"
            and r.data.get("reason") == "InvalidSpec"
        ]

    await eventually(lambda: bool(warnings()), "a Warning Event")
    await asyncio.sleep(2)  # and only one, however often kopf retries
    assert warnings() == ["Warning"]
    assert live(kmock, "apps/v1/deployments", "llama") is None


async def test_a_status_apply_of_a_missing_service_is_not_found_and_makes_nothing(
    operator: Any,
) -> None:
    """As the API server answers it (a subresource never creates): a deleted service's status
    written late must not bring the service back, with no uid and no spec."""
    kmock = operator
    applied = {
        "apiVersion": "specops.io/v1alpha1",
        "kind": "SpeculativeService",
        "metadata": {"namespace": NS, "name": "gone"},
        "status": {"observedGeneration": 1},
    }
    async with kmock.patch(
        f"{SVC_PATH}/gone/status",
        json=applied,
        params={"fieldManager": "specops-controller", "force": "true"},
        headers={"Content-Type": APPLY_PATCH},
    ) as response:
        assert response.status == 404
    assert live(kmock, "specops.io/v1alpha1/speculativeservices", "gone") is None


async def test_deployments_are_listed_and_watched_only_with_the_owned_labels(
    operator: Any,
) -> None:
    """The API server filters the Deployments the operator lists and watches by the labels of
    its children, so another Deployment's change never reaches the operator."""
    kmock = operator

    def reads() -> list[Any]:
        return [
            r
            for r in list(kmock)
            if r.method.value == "GET"
            and r.resource is not None
            and r.resource.plural == "deployments"
            and r.name is None
        ]

    await eventually(lambda: any(r.params.get("watch") == "true" for r in reads()), "a watch")
    assert {r.params.get("labelSelector") for r in reads()} == {
        "app.kubernetes.io/managed-by=specops,specops.io/service"
    }


async def test_an_edit_is_rendered_while_every_worker_thread_is_busy(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kopf's worker threads all held by reconciliations (a burst of creations), a user's edit
    still reaches its Deployment: nothing on the edit's path waits for one of them."""
    import specops_operator._handlers as handlers
    from specops_operator._reconcile import reconcile as real

    monkeypatch.setattr(handlers, "_DEFAULT_THREADS", 2)  # kopf's executor: two threads
    release, held = threading.Event(), threading.Semaphore(0)

    def reconcile(kube: Any, body: Any, *args: Any, **kwargs: Any) -> None:
        if body["metadata"]["name"].startswith("busy-"):
            held.release()
            release.wait(timeout=60)  # a slow creation: held until the edit is checked
        real(kube, body, *args, **kwargs)

    monkeypatch.setattr(handlers, "reconcile", reconcile)
    async with run_operator(kmock, tmp_path, monkeypatch):
        try:
            await _edited_behind_a_busy_executor(kmock, held)
        finally:
            release.set()


async def _edited_behind_a_busy_executor(kmock: Any, held: threading.Semaphore) -> None:
    body = service_body()
    async with kmock.post(SVC_PATH, json=body) as response:
        assert response.status in (200, 201)
    await eventually(lambda: live(kmock, "apps/v1/deployments", "llama") is not None, "Deployment")
    for i in range(4):  # more creations than threads: two run, two queue
        busy = service_body()
        busy["metadata"].update(name=f"busy-{i}", uid=f"uid-busy-{i}")
        async with kmock.post(SVC_PATH, json=busy) as response:
            assert response.status in (200, 201)
    for _ in range(2):  # both threads are held
        assert await asyncio.to_thread(held.acquire, timeout=30), "the creations never started"
    await _turn_speculation_off(kmock, body)
    await eventually(
        lambda: _rendered_off(kmock), "the edit rendered while the creations hold every thread"
    )
    assert live(kmock, "apps/v1/deployments", "busy-3") is None  # they were still held
