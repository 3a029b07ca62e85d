"""Run the real kopf operator against kmock's in-memory Kubernetes API, and read what it wrote.

kmock stores objects and merges patches; it does not default fields, run controllers,
filter by label or garbage-collect. :class:`ApplyingEmulator` adds the parts of server-side
apply the operator needs: an apply creates a missing object, and an apply of a
SpeculativeService's status keeps a field manager per writer in ``metadata.managedFields``
(a ``fieldsV1`` tree each) as the API server does: conditions merge by ``type``, a field its
manager stops sending is removed unless another manager owns it, and ``force`` takes a
changed field from its other owners. An apply of a child keeps no managers (it merges like a
merge patch), so what such an apply removes is checked on the real API server by the e2e
suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator, Callable, Mapping
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
    "server_side_apply",
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


Path_ = tuple[str, ...]
# The lists of status that merge by a key, as the CRD declares them.
_LIST_MAPS = {"conditions": "type"}


def _tree(value: Any, key: str | None = None) -> dict[str, Any]:
    """The ``fieldsV1`` tree of an applied value: maps by field, list-maps by key, the rest
    (scalars, atomic lists) as leaves."""
    if isinstance(value, Mapping):  # an empty list-map sets nothing
        return {f"f:{k}": _tree(v, k) for k, v in value.items() if v or k not in _LIST_MAPS}
    if isinstance(value, list) and key in _LIST_MAPS:
        by = _LIST_MAPS[key]
        return {
            "k:" + json.dumps({by: item[by]}, separators=(",", ":")): {".": {}, **_tree(item)}
            for item in value
        }
    return {}


def _leaves(tree: Mapping[str, Any], prefix: Path_ = ()) -> set[Path_]:
    found: set[Path_] = set()
    for key, sub in tree.items():
        found |= _leaves(sub, (*prefix, key)) if sub else {(*prefix, key)}
    return found


def _from_leaves(paths: set[Path_]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        for key in path:
            node = node.setdefault(key, {})
    return tree


def _step(value: Any, key: str) -> Any:
    """The child of ``value`` at one ``fieldsV1`` key (None when absent)."""
    if key.startswith("f:") and isinstance(value, Mapping):
        return value.get(key[2:])
    if key.startswith("k:") and isinstance(value, list):
        ((by, want),) = json.loads(key[2:]).items()
        return next((i for i in value if isinstance(i, Mapping) and i.get(by) == want), None)
    return None


def _at(value: Any, path: Path_) -> Any:
    for key in path:
        value = value if key == "." else _step(value, key)
    return value


def _remove(value: Any, path: Path_) -> None:
    """Remove the field at ``path`` (a path ending in "." removes the map or item itself),
    and a map that it leaves empty."""
    *head, last = path if path[-1] != "." else path[:-1]
    parent = _at(value, tuple(head))
    if isinstance(parent, dict):
        parent.pop(last[2:], None)
    elif isinstance(parent, list):
        item = _step(parent, last)
        if item is not None:
            parent.remove(item)
    if head and parent == {}:
        _remove(value, tuple(head))


def _merged(live: Any, applied: Any, key: str | None = None) -> Any:
    """``applied`` set over ``live``: maps merge by field, list-maps by key, the rest is
    replaced."""
    if isinstance(live, Mapping) and isinstance(applied, Mapping):
        return {
            **live,
            **{k: _merged(live.get(k), v, k) for k, v in applied.items()},
        }
    if isinstance(live, list) and isinstance(applied, list) and key in _LIST_MAPS:
        by = _LIST_MAPS[key]
        sent = {item[by]: item for item in applied}
        kept = [_merged(i, sent.pop(i[by]), None) if i[by] in sent else i for i in live]
        return kept + [i for i in applied if i[by] in sent]
    return copy.deepcopy(applied)


def server_side_apply(
    obj: Mapping[str, Any], applied: Mapping[str, Any], manager: str, version: str
) -> dict[str, Any]:
    """``obj`` once ``manager`` applied ``applied`` (a status) to its status subresource with
    force: its ``status`` and ``metadata.managedFields`` changed, the rest as it was."""
    live = obj.get("status") or {}
    managed = [dict(m) for m in obj.get("metadata", {}).get("managedFields") or []]
    status_of = [m for m in managed if m.get("subresource") == "status"]
    mine = next((m for m in status_of if m["manager"] == manager), None)
    before = _leaves((mine or {}).get("fieldsV1", {}).get("f:status", {}))
    sent = _leaves(_tree(applied))
    status = _merged(live, applied)
    for other in (m for m in status_of if m is not mine):  # force: a changed field moves
        held = _leaves(other.get("fieldsV1", {}).get("f:status", {}))
        kept = {p for p in held if p not in sent or p[-1] == "." or _at(live, p) == _at(applied, p)}
        other["fieldsV1"] = {"f:status": _from_leaves(kept)} if kept else {}
    others = set().union(
        *(_leaves(m.get("fieldsV1", {}).get("f:status", {})) for m in status_of if m is not mine)
    )
    # A map or item before what is in it: once it is gone, there is nothing left to remove.
    for path in sorted(before - sent - others, key=lambda p: (len(p), p[-1] != ".")):
        base = path[:-1] if path[-1] == "." else path
        if not any(p[: len(base)] == base for p in others | sent):  # nothing still held inside
            _remove(status, path)
    entry = {
        "manager": manager,
        "operation": "Apply",
        "apiVersion": version,
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": _tree(applied)},
        "subresource": "status",
    }
    managed = [m for m in managed if m is not mine and m.get("fieldsV1")] + [entry]
    meta = {**obj.get("metadata", {}), "managedFields": managed}
    return {**obj, "metadata": meta, "status": status}


def _merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch from ``old`` to ``new`` (a removed key becomes null)."""
    if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
        return new
    gone = {key: None for key in old if key not in new}
    return {**gone, **{k: _merge_patch(old.get(k), v) for k, v in new.items()}}


class ApplyingEmulator(kmock.KubernetesEmulator):
    """kmock's Kubernetes emulator, where a server-side apply of a missing object creates it,
    and an apply of a status keeps field managers (:func:`server_side_apply`).

    An apply of the status of a missing object is answered 404, as the API server answers it
    (a subresource never creates): made here, a late write of a deleted service's status
    would bring the service back with no uid and no spec.

    The object is stored before kmock handles the request as a patch of it, so the apply
    answers 200 with the object and watchers see it as modified. A status apply is answered
    here: kmock would merge the applied conditions over the stored ones as one value.
    """

    _version = 1

    def _stamp(self, request: kmock.Request) -> None:
        """Every write stores a new resourceVersion, as the API server's does (etcd's
        revision): readers that keep the newest version they saw (the watch cache) rely on
        it. kmock leaves it as the writer sent it."""
        if request.method in (kmock.method.POST, kmock.method.PATCH, kmock.method.PUT) and (
            isinstance(request.data, dict) and request.resource is not None
        ):
            ApplyingEmulator._version += 1
            metadata = request.data.setdefault("metadata", {})
            if isinstance(metadata, dict):
                metadata["resourceVersion"] = str(ApplyingEmulator._version)

    def _stale(self, request: kmock.Request) -> str | None:
        """Why a write's resourceVersion precondition fails, as the API server refuses it
        (409): the write names a version and the stored object is at another. kmock would
        apply it over whatever changed since, and a write meant to be refused (a handover of
        managedFields read before a status apply) would undo the newer write."""
        if request.method not in (kmock.method.PATCH, kmock.method.PUT) or not isinstance(
            request.data, dict
        ):
            return None
        wanted = (request.data.get("metadata") or {}).get("resourceVersion")
        if wanted is None or request.resource is None or request.name is None:
            return None
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        stored = self.objects[key]
        held = (stored.raw.get("metadata") or {}).get("resourceVersion")
        return None if held == wanted else f"the object is at {held}, not {wanted}"

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if (stale := self._stale(request)) is not None:
            message = (
                f"Operation cannot be fulfilled: {stale}; apply your changes to the latest version"
            )
            return aiohttp.web.json_response(
                {
                    "kind": "Status",
                    "status": "Failure",
                    "reason": "Conflict",
                    "code": 409,
                    "message": message,
                },
                status=409,
            )
        self._stamp(request)
        if (
            request.method == kmock.method.PATCH
            and request.headers.get("Content-Type") == APPLY_PATCH
            and request.resource is not None
            and request.name is not None
        ):
            key = (request.resource, request.namespace, request.name)
            missing = key not in self.objects or self.objects[key].deleted
            if request.subresource == "status":
                if not missing:  # missing: kmock answers 404, as the API server does
                    return await self._apply_status(request, key)
            elif missing:
                self.objects[key] = request.data
        return await super()._handle(request)

    async def _apply_status(
        self, request: kmock.Request, key: tuple[Any, str | None, str]
    ) -> aiohttp.web.Response:
        async with self._lock:
            stored = self.objects[key]
            applied = server_side_apply(
                stored.raw,
                request.data.get("status") or {},
                request.params["fieldManager"],
                request.data["apiVersion"],
            )
            version = request.data["metadata"]["resourceVersion"]
            applied = {
                **applied,
                "metadata": {**applied.get("metadata", {}), "resourceVersion": version},
            }
            stored.patch(_merge_patch(stored.raw, applied))
            raw = stored.raw
            await self._buses[key[0]].put({"type": "MODIFIED", "object": raw})
        return aiohttp.web.json_response(raw)


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
        try:
            await asyncio.wait_for(task, timeout=30)
        except asyncio.CancelledError:
            pass
        except TimeoutError:
            # Not stopped within 30 s: wait_for cancelled it. Otherwise the operator did stop
            # and kopf re-raised, at its exit, the TimeoutError of a daemon's time-limited
            # stopped.wait() that outlived its cancelled daemon: kopf's, not the operator's.
            if task.cancelled():
                raise
