"""The operator's only door to the Kubernetes API: get, server-side apply (children, status).

Every API write of the operator goes through :class:`Kube`, so the rest of the package is
plain data in, data out. Library errors become :class:`KubeApiError` here.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, cast

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from specops.api import GROUP, PLURAL, VERSION
from specops.errors import SpecopsError
from specops_operator._cache import WatchCache

__all__ = [
    "CONFLICT",
    "DISCOVERY_REFRESH_S",
    "FIELD_MANAGER",
    "KUBE_BURST",
    "KUBE_QPS",
    "Kube",
    "KubeApiError",
    "TokenBucket",
    "deployment_ref",
    "fenced",
    "service_ref",
]

Obj = dict[str, Any]

# Plural resource names of the kinds the operator reads and writes.
_PLURALS = {
    "Deployment": "deployments",
    "Service": "services",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "PodMonitor": "podmonitors",
    "Lease": "leases",
    "Pod": "pods",
    "SpeculativeService": PLURAL,
}
_MERGE_PATCH = "application/merge-patch+json"
_APPLY_PATCH = "application/apply-patch+yaml"  # a JSON body is valid YAML
# The status of a write whose resourceVersion precondition no longer holds.
CONFLICT = 409
# The field manager that owns what the operator applies to its children (and that held status
# while an older operator merge-patched it; status has a manager per writer now).
FIELD_MANAGER = "specops"
# Seconds to connect and to read one answer: a hung connection fails the reconciliation (kopf
# retries it) instead of holding the service's turn and an executor thread for ever.
REQUEST_TIMEOUT = (5.0, 30.0)
# Seconds an answer of API discovery is trusted: which API groups a cluster serves changes
# when someone installs or removes an operator, not at every reconciliation.
DISCOVERY_REFRESH_S = 600.0
# Requests a second the operator's client sends at most, on average, and how many it may
# send at once after a quiet spell: a fleet resyncing together queues here instead of
# flooding the API server (kopf's own watches and Events go through its own client).
KUBE_QPS = 50.0
KUBE_BURST = 100
# Methods that write: a fenced block's writes are sent only while its fence holds.
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# What the writes of the block being run must still be allowed by (see :func:`fenced`).
_FENCE: contextvars.ContextVar[tuple[Callable[[], bool], str] | None] = contextvars.ContextVar(
    "specops_fence", default=None
)


@contextlib.contextmanager
def fenced(allowed: Callable[[], bool], why: str) -> Iterator[None]:
    """Writes sent in this block (on this thread, or on what it hands its context to: a
    coroutine's ``asyncio.to_thread``) go out only while ``allowed()``; otherwise the write
    fails with a :class:`KubeApiError` that says ``why``. A sharded replica fences each
    reconciliation with its hold on the service's shard: one that outlasts the hold (a
    saturated API server answering in seconds) stops before another replica's writes, not
    after."""
    token = _FENCE.set((allowed, why))
    try:
        yield
    finally:
        _FENCE.reset(token)


class KubeApiError(SpecopsError):
    """The Kubernetes API refused or failed a request."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _refusal(data: bytes) -> str:
    """The API server's own words from a failure: a Status's message, else the raw body."""
    try:
        status = json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")[:1024]
    if isinstance(status, dict) and isinstance(status.get("message"), str):
        return f"{status.get('code', '')} {status.get('reason', '')}: {status['message']}"
    return data.decode("utf-8", "replace")[:1024]


def _collection_path(api_version: str, kind: str, namespace: str) -> str:
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{_PLURALS[kind]}"


def _object_path(obj: Obj) -> str:
    meta = obj["metadata"]
    collection = _collection_path(obj["apiVersion"], obj["kind"], meta["namespace"])
    return f"{collection}/{meta['name']}"


class TokenBucket:
    """A limit of ``qps`` requests a second on average, ``burst`` at once; qps 0: no limit.

    A caller takes its slot under the lock and waits for it outside, so threads queue in
    the order they came and none holds the others up while it sleeps."""

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._qps, self._burst = qps, max(burst, 1)
        self._clock, self._sleep = clock, sleep
        self._tokens, self._at = float(self._burst), clock()
        self._lock = threading.Lock()

    def take(self, *, urgent: bool = False) -> None:
        """Wait until one more request is within the limit. An ``urgent`` one (a user's
        edit being rendered) takes its token without waiting behind the slots promised to
        others: they wait the longer for it, and edits come at a person's pace."""
        if self._qps <= 0:
            return
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._qps)
            self._at = now
            self._tokens -= 1.0  # below zero: slots already promised to earlier callers
            wait = 0.0 if urgent else -self._tokens / self._qps
        if wait > 0:
            self._sleep(wait)


def object_ref(api_version: str, kind: str, namespace: str, name: str) -> Obj:
    """The reference :meth:`Kube.get`, :meth:`Kube.held` and :meth:`Kube.delete` take."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"namespace": namespace, "name": name},
    }


def service_ref(namespace: str, name: str) -> Obj:
    """The reference of a SpeculativeService."""
    return object_ref(f"{GROUP}/{VERSION}", "SpeculativeService", namespace, name)


def deployment_ref(namespace: str, name: str) -> Obj:
    """The reference of a Deployment."""
    return object_ref("apps/v1", "Deployment", namespace, name)


class Kube:
    """A thin synchronous client over ``kubernetes.client.ApiClient`` for arbitrary kinds."""

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        *,
        discovery_refresh_s: float = DISCOVERY_REFRESH_S,
        limit: TokenBucket | None = None,
        clock: Callable[[], float] = time.monotonic,
        cache: WatchCache | None = None,
    ) -> None:
        self._api = api
        self.cache = cache
        # Set on a thread while it renders a user's edit (see :meth:`urgent`).
        self._urgent = threading.local()
        self._limit = limit or TokenBucket(KUBE_QPS, KUBE_BURST)
        self._discovery_refresh_s = discovery_refresh_s
        self._clock = clock
        # API group -> (served, when it was asked); shared by the executor's threads.
        self._groups: dict[str, tuple[bool, float]] = {}
        self._groups_lock = threading.Lock()

    @classmethod
    def from_environment(
        cls,
        *,
        connections: int,
        qps: float = KUBE_QPS,
        burst: int = KUBE_BURST,
        discovery_refresh_s: float = DISCOVERY_REFRESH_S,
        cache: WatchCache | None = None,
        user_agent: str | None = None,
    ) -> Kube:
        """In-cluster service account if present, else the kubeconfig (KUBECONFIG or ~/.kube).

        ``connections``: as many as threads call at once, so none opens and drops a
        connection of its own when the pool is full (the client's default is 5 per CPU)."""
        try:
            kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
        except kubernetes.config.ConfigException:
            # Read KUBECONFIG now: the client captured it when it was imported.
            kubernetes.config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
        configuration = kubernetes.client.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = connections
        api = kubernetes.client.ApiClient(configuration)
        if user_agent is not None:  # which replica sent a request, in the API server's audit log
            api.user_agent = user_agent
        return cls(
            api,
            discovery_refresh_s=discovery_refresh_s,
            limit=TokenBucket(qps, burst),
            cache=cache,
        )

    def _call(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        *,
        content_type: str = _MERGE_PATCH,
        query: list[tuple[str, str]] | None = None,
    ) -> Obj:
        self._limit.take(urgent=getattr(self._urgent, "on", False))
        # After the rate limit's wait, which can outlast the fence too.
        fence = _FENCE.get()
        if fence is not None and method in _WRITES and not fence[0]():
            raise KubeApiError(f"{method} {path}: not sent: {fence[1]}")
        headers = {"Accept": "application/json"}
        if method == "PATCH":
            headers["Content-Type"] = content_type
        elif body is not None:
            headers["Content-Type"] = "application/json"
        try:
            method, url, headers, payload, _ = self._api.param_serialize(
                method=method,
                resource_path=path,
                query_params=query,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._api.call_api(
                method, url, header_params=headers, body=payload, _request_timeout=REQUEST_TIMEOUT
            )
            data = response.read()  # type: ignore[no-untyped-call]
        except ApiException as exc:
            raise KubeApiError(f"{method} {path}: {exc}", exc.status) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise KubeApiError(f"{method} {path}: {exc}") from exc
        if not 200 <= response.status <= 299:
            raise KubeApiError(f"{method} {path}: {_refusal(data)}", response.status)
        return cast(Obj, json.loads(data))

    def get(self, obj: Obj, *, fresh: bool = False) -> Obj | None:
        """The live version of ``obj`` (matched by kind, namespace, name), or None.

        From the watch cache when it holds the object, unless ``fresh`` (the API server
        refused a write against the version held); what is read is kept there."""
        if self.cache is not None and not fresh and (held := self.cache.get(obj)) is not None:
            return held
        try:
            found = self._call("GET", _object_path(obj))
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise
        return self._kept(found)

    @contextlib.contextmanager
    def urgent(self) -> Iterator[None]:
        """The calling thread's requests skip the rate limit's queue until the block ends
        (blocks nest: the outer one's stays)."""
        before = getattr(self._urgent, "on", False)
        self._urgent.on = True
        try:
            yield
        finally:
            self._urgent.on = before

    def held(self, obj: Obj) -> Obj | None:
        """``obj`` as the watch cache holds it, None when it holds none; without a cache, as
        :meth:`get` reads it. For a child whose absence is the usual case and may be acted
        on a resync late (a canary's Deployment to retire): a miss then costs no request."""
        if self.cache is None:
            return self.get(obj)
        return self.cache.get(obj)

    def _kept(self, obj: Obj) -> Obj:
        """``obj``, an answer of the API server, kept in the watch cache (if there is one)."""
        if self.cache is not None:
            self.cache.keep(obj)
        return obj

    def delete(self, obj: Obj, *, version: str | None = None) -> bool:
        """Delete ``obj`` (matched by kind, namespace, name), its dependents in the
        background; False when it was already gone. ``version``: only if the object is still
        at that resourceVersion (else 409, :data:`CONFLICT`)."""
        body: Obj = {"propagationPolicy": "Background"}
        if version is not None:
            body["preconditions"] = {"resourceVersion": version}
        try:
            self._call("DELETE", _object_path(obj), body)
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise
        finally:
            if self.cache is not None:
                self.cache.drop(obj)
        return True

    def apply(self, obj: Obj) -> Obj:
        """Server-side apply ``obj`` as :data:`FIELD_MANAGER`: create it, or update it.

        The fields this manager owns become exactly those of ``obj``: a field it applied
        before and leaves out now is removed (unless another manager also owns it), and a
        field another manager changed is taken back (``force``). Fields only others own stay.
        A ``metadata.resourceVersion`` in ``obj`` is a precondition: the API server refuses
        the apply (409, :data:`CONFLICT`) when the object has changed since that version.
        """
        applied = self._call(
            "PATCH",
            _object_path(obj),
            obj,
            content_type=_APPLY_PATCH,
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
        )
        return self._kept(applied)

    def apply_crd(self, crd: Obj) -> Obj:
        """Server-side apply a (cluster-scoped) CustomResourceDefinition as the operator."""
        return self._call(
            "PATCH",
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}",
            crd,
            content_type=_APPLY_PATCH,
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
        )

    def get_service(self, namespace: str, name: str) -> Obj | None:
        """A SpeculativeService, or None when it is gone."""
        return self.get(service_ref(namespace, name))

    def list_objects(
        self, api_version: str, kind: str, namespace: str, selector: dict[str, str]
    ) -> list[Obj]:
        """Objects of ``kind`` in ``namespace`` carrying every label of ``selector``."""
        query = urllib.parse.urlencode(
            {"labelSelector": ",".join(f"{k}={v}" for k, v in sorted(selector.items()))}
        )
        found = self._call("GET", f"{_collection_path(api_version, kind, namespace)}?{query}")
        return list(found.get("items") or [])

    def list_pods(self, namespace: str, selector: dict[str, str]) -> list[Obj]:
        """Pods of ``namespace`` carrying every label of ``selector``."""
        return self.list_objects("v1", "Pod", namespace, selector)

    def create(self, obj: Obj) -> Obj:
        """Create ``obj``; 409 (:data:`CONFLICT`) when one of its name exists already."""
        meta = obj["metadata"]
        return self._call(
            "POST", _collection_path(obj["apiVersion"], obj["kind"], meta["namespace"]), obj
        )

    def replace(self, obj: Obj) -> Obj:
        """Replace ``obj`` whole; 409 (:data:`CONFLICT`) when its
        ``metadata.resourceVersion`` is no longer the object's."""
        return self._call("PUT", _object_path(obj), obj)

    def apply_status(self, service: Obj, status: Obj, manager: str) -> Obj:
        """Server-side apply the status subresource of a SpeculativeService as ``manager``.

        The status fields ``manager`` owns become exactly those of ``status``: one it sent
        before and leaves out now is removed, unless another manager owns it too. Conditions
        merge by ``type``, so another manager's conditions stay as they are. A field someone
        else changed (a hand edit of status) is taken back (``force``), not refused.
        """
        meta = service["metadata"]
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SpeculativeService",
            "metadata": {"namespace": meta["namespace"], "name": meta["name"]},
            "status": status,
        }
        applied = self._call(
            "PATCH",
            _object_path(body) + "/status",
            body,
            content_type=_APPLY_PATCH,
            query=[("fieldManager", manager), ("force", "true")],
        )
        return self._kept(applied)

    def replace_managed_fields(self, obj: Obj, managed: list[Obj]) -> Obj:
        """Set ``metadata.managedFields`` of ``obj``, unless it changed since it was read: the
        API server refuses (409, :data:`CONFLICT`) when ``obj``'s resourceVersion is stale."""
        meta = obj["metadata"]
        patch = {"metadata": {"managedFields": managed, "resourceVersion": meta["resourceVersion"]}}
        replaced = self._call(
            "PATCH", _object_path(obj), patch, query=[("fieldManager", FIELD_MANAGER)]
        )
        return self._kept(replaced)

    def has_api_group(self, group: str) -> bool:
        """Whether the API server serves ``group`` (e.g. monitoring.coreos.com).

        The answer is kept for ``discovery_refresh_s``: every reconciliation asks, and on a
        cluster without the group each asking would be a 404 round trip. A failed asking is
        not kept, so the next reconciliation asks again."""
        with self._groups_lock:
            known = self._groups.get(group)
        now = self._clock()
        if known is not None and now - known[1] < self._discovery_refresh_s:
            return known[0]
        served = self._discover(group)
        with self._groups_lock:
            self._groups[group] = (served, now)
        return served

    def _discover(self, group: str) -> bool:
        try:
            self._call("GET", f"/apis/{group}")
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True
