"""Where the control loop gets its measurements: the pods' sidecars, or Prometheus.

An :class:`ObservationSource` returns the wire observations of one SpeculativeService
plus, for every pod or source that gave none, a message saying why; it never raises for
a failing pod, so one broken sidecar only shrinks the sample. Tests replace the whole
source (the seam), the way httpx's MockTransport replaces the network.

- Direct: GET ``http://<podIP>:9090/v1/observation`` of every Ready pod, concurrently.
- Prometheus: the service's vLLM series (labels ``namespace`` and ``service``, which the
  PodMonitor sets) read by the Prometheus source and windowed observer a sidecar runs
  too (``specops.observation``), through :func:`httpx_get`, kept per service between
  ticks so the windows fill up. A window needs many samples of the running-request
  gauge, so the loop calls :meth:`ObservationSource.sample` at the scrape interval
  between decisions; a sidecar samples by itself, so the sidecar source does not.

While a canary runs, its pods are measured apart (``canary=True``): the sidecar source is
given them alone, and the Prometheus source reads their series by pod name while the
service's reader leaves every canary pod out.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx
import pydantic

from specops.api import SpeculativeServiceSpec
from specops.errors import MetricsError
from specops.observation import (
    HttpGet,
    ObserverConfig,
    PodObservation,
    PrometheusSource,
    WindowedObserver,
)
from specops.observation.httpx_get import httpx_get
from specops.render import SIDECAR_PORT, canary_name
from specops_operator._batch import BatchedSource, PrometheusBatch

__all__ = [
    "Fetched",
    "ObservationSource",
    "Observer",
    "PodTarget",
    "PrometheusServiceSource",
    "SidecarSource",
    "matching",
    "pod_view",
    "prometheus_allowed",
    "reading_client",
    "ready_pods",
    "refused_prometheus",
]


@dataclass(frozen=True)
class PodTarget:
    """A Ready pod of the service and its IP."""

    name: str
    ip: str


@dataclass(frozen=True)
class Fetched:
    """Observations that arrived, and one message per pod or source that gave none."""

    observations: tuple[PodObservation, ...]
    failures: tuple[str, ...] = ()


class ObservationSource(Protocol):
    async def fetch(
        self,
        namespace: str,
        name: str,
        spec: SpeculativeServiceSpec,
        pods: Sequence[PodTarget],
        *,
        canary: bool = False,
    ) -> Fetched:
        """The observations of ``pods``: the service's apart from its canary, or with
        ``canary`` the canary's."""
        ...

    def sampling_interval(self, spec: SpeculativeServiceSpec) -> float | None:
        """Seconds between readings the loop must take itself; None when it need take none."""
        ...

    async def sample(
        self, namespace: str, name: str, spec: SpeculativeServiceSpec, *, canary: bool = False
    ) -> None:
        """Take one reading between decisions (of the canary's pods too, while ``canary``
        says one runs)."""
        ...

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is kept for a service that is gone or no longer ours."""
        ...


def pod_view(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the control loop reads of a pod (:func:`ready_pods`, the canary's label): the
    watch cache of a fleet's pods holds this, not whole pods."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "labels": dict(meta.get("labels") or {}),
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "status": {
            "podIP": status.get("podIP"),
            "conditions": [
                {"type": c.get("type"), "status": c.get("status")}
                for c in status.get("conditions") or []
            ],
        },
    }


def matching(
    pods: Iterable[Mapping[str, Any]], selector: Mapping[str, str]
) -> list[Mapping[str, Any]]:
    """The pods carrying every label of ``selector`` (what a label selector would list), by
    name as the API server lists them: a watch cache's order changes as pods do, and the
    reasons a decision gives (which pods failed) must not change with it."""
    found = [
        pod
        for pod in pods
        if selector.items() <= ((pod.get("metadata") or {}).get("labels") or {}).items()
    ]
    return sorted(found, key=lambda pod: str((pod.get("metadata") or {}).get("name")))


def ready_pods(pods: Sequence[Mapping[str, Any]]) -> list[PodTarget]:
    """The pods that are Ready, have an IP and are not being deleted."""
    found = []
    for pod in pods:
        meta, status = pod.get("metadata", {}), pod.get("status", {})
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions", [])
        )
        if ready and status.get("podIP") and not meta.get("deletionTimestamp"):
            found.append(PodTarget(meta["name"], status["podIP"]))
    return found


class SidecarSource:
    """Reads each Ready pod's sidecar."""

    def __init__(self, client: httpx.AsyncClient, port: int = SIDECAR_PORT) -> None:
        self._client = client
        self._port = port

    async def _one(self, pod: PodTarget) -> PodObservation:
        url = f"http://{pod.ip}:{self._port}/v1/observation"
        try:
            response = await self._client.get(url)
        except httpx.HTTPError as exc:
            raise MetricsError(f"{pod.name}: cannot reach {url}: {exc!r}") from exc
        if response.status_code != 200:
            raise MetricsError(f"{pod.name}: sidecar answered HTTP {response.status_code}")
        try:
            return PodObservation.model_validate_json(response.content)
        except pydantic.ValidationError as exc:
            raise MetricsError(f"{pod.name}: malformed observation: {exc}") from exc

    async def fetch(
        self,
        namespace: str,
        name: str,
        spec: SpeculativeServiceSpec,
        pods: Sequence[PodTarget],
        *,
        canary: bool = False,
    ) -> Fetched:
        results = await asyncio.gather(*(self._one(pod) for pod in pods), return_exceptions=True)
        observations = tuple(r for r in results if isinstance(r, PodObservation))
        failures = tuple(str(r) for r in results if isinstance(r, MetricsError))
        unexpected = [
            r for r in results if isinstance(r, BaseException) and not isinstance(r, MetricsError)
        ]
        if unexpected:
            raise unexpected[0]
        return Fetched(observations, failures)

    def sampling_interval(self, spec: SpeculativeServiceSpec) -> float | None:
        return None

    async def sample(
        self, namespace: str, name: str, spec: SpeculativeServiceSpec, *, canary: bool = False
    ) -> None:
        return None

    def forget(self, namespace: str, name: str) -> None:
        return None


def prometheus_allowed(url: str, allowed: Sequence[str]) -> bool:
    """Whether the operator may read ``url``: an entry of ``allowed`` is a base URL
    (``http://prometheus.monitoring:9090``: the same scheme, host and port, and a path under
    its own) or a bare host (``prometheus.monitoring``: any port, http or https)."""
    target = urlsplit(url)
    if target.scheme not in ("http", "https") or target.hostname is None:
        return False
    for entry in allowed:
        base = urlsplit(entry if "://" in entry else f"//{entry}")
        if base.hostname is None or base.hostname != target.hostname:
            continue
        if not base.scheme:
            return True
        path, within = base.path.rstrip("/"), target.path.rstrip("/")
        if (base.scheme, base.port) == (target.scheme, target.port) and (
            within == path or within.startswith(path + "/")
        ):
            return True
    return False


def refused_prometheus(url: str, allowed: Sequence[str]) -> str:
    """The message for a spec's Prometheus URL the operator may not read."""
    listed = ", ".join(allowed) if allowed else "none"
    return (
        f"spec.metrics.prometheusUrl {url} is not among the Prometheus servers this operator "
        f"may read (allowed: {listed}); ask the cluster admin to add it to the chart's "
        "operator.allowedPrometheus, or use metrics.source: Direct"
    )


class PrometheusServiceSource:
    """Polls Prometheus once per tick for each service and keeps its readings in between.

    One reader per service: a change of its URL, window or scrape interval replaces it (its
    readings were taken for the old settings), and :meth:`forget` drops it. A new reader
    starts with the scrapes of the last window that Prometheus kept, so an operator that
    restarted or took over decides on a full window at its first tick. Later, the services
    of one Prometheus are read together, one query an interval for each batch of them
    (:class:`~specops_operator._batch.PrometheusBatch`). A canary gets a reader of its own,
    for its pods by name, replaced when they change; the service's reader never counts a
    canary's pods."""

    def __init__(
        self, get: HttpGet, allowed: Sequence[str], clock: Callable[[], float] = time.time
    ) -> None:
        self._get = get
        self._allowed = tuple(allowed)
        self._clock = clock
        self._services: dict[
            tuple[str, str, bool], tuple[tuple[object, ...], WindowedObserver]
        ] = {}
        self._readers: dict[tuple[str, str], BatchedSource] = {}
        self._batches: dict[tuple[str, int, float], PrometheusBatch] = {}

    def _observer(
        self,
        namespace: str,
        name: str,
        spec: SpeculativeServiceSpec,
        canary_pods: tuple[str, ...] | None = None,
    ) -> WindowedObserver:
        url = spec.metrics.prometheus_url or ""
        window = spec.policy.evaluation_window_seconds
        scrape = spec.metrics.scrape_interval_seconds
        settings = (url, window, scrape, canary_pods)
        key = (namespace, name, canary_pods is not None)
        kept = self._services.get(key)
        if kept is not None and kept[0] == settings:
            return kept[1]
        pods = (
            ("pod", "=~", "|".join(re.escape(p) for p in canary_pods))
            if canary_pods is not None
            else ("pod", "!~", f"{re.escape(canary_name(name))}-.+")
        )
        lookback_s = max(4 * scrape, 60)
        own = PrometheusSource(
            url,
            [("namespace", "=", namespace), ("service", "=", name), pods],
            self._get,
            lookback_s=lookback_s,
            history_s=window,
        )
        source: PrometheusSource | BatchedSource = own
        if canary_pods is None:
            self._close_reader(namespace, name)
            source = self._readers[(namespace, name)] = BatchedSource(
                own, self._batch(url, lookback_s, float(scrape)), (namespace, name), lookback_s
            )
        config = ObserverConfig(
            namespace=namespace,
            pod=None,  # the series of all the service's pods at once
            service=name,
            windows_s=(float(window),),
            prediction_window_s=float(window),
            stale_after_s=float(max(3 * scrape, 45)),
        )
        observer = WindowedObserver(source, config, clock=self._clock)
        self._services[key] = (settings, observer)
        return observer

    def _batch(self, url: str, lookback_s: int, interval_s: float) -> PrometheusBatch:
        key = (url, lookback_s, interval_s)
        if key not in self._batches:
            self._batches[key] = PrometheusBatch(
                url, lookback_s, interval_s, self._get, self._clock
            )
        return self._batches[key]

    def _close_reader(self, namespace: str, name: str) -> None:
        reader = self._readers.pop((namespace, name), None)
        if reader is not None:
            reader.close()
        self._batches = {k: b for k, b in self._batches.items() if not b.empty}

    def sampling_interval(self, spec: SpeculativeServiceSpec) -> float | None:
        return float(spec.metrics.scrape_interval_seconds)

    def _refused(self, spec: SpeculativeServiceSpec) -> str | None:
        url = spec.metrics.prometheus_url or ""
        return (
            None
            if prometheus_allowed(url, self._allowed)
            else refused_prometheus(url, self._allowed)
        )

    async def sample(
        self, namespace: str, name: str, spec: SpeculativeServiceSpec, *, canary: bool = False
    ) -> None:
        """One reading of the service's reader, and of its canary's while one runs; once
        none runs, the canary's reader is dropped, so no ended canary is queried."""
        if self._refused(spec) is None:
            await self._observer(namespace, name, spec).poll()
        kept = self._services.get((namespace, name, True)) if canary else None
        if kept is not None:
            await kept[1].poll()
        elif not canary:
            self._services.pop((namespace, name, True), None)

    def forget(self, namespace: str, name: str) -> None:
        for canary in (False, True):
            self._services.pop((namespace, name, canary), None)
        self._close_reader(namespace, name)

    async def fetch(
        self,
        namespace: str,
        name: str,
        spec: SpeculativeServiceSpec,
        pods: Sequence[PodTarget],
        *,
        canary: bool = False,
    ) -> Fetched:
        if (refused := self._refused(spec)) is not None:
            return Fetched((), (refused,))  # never asked: the URL is the tenant's to choose
        if canary and not pods:
            return Fetched((), ("no Ready canary pod",))
        names = tuple(sorted(p.name for p in pods)) if canary else None
        observer = self._observer(namespace, name, spec, names)
        await observer.poll()
        observation = observer.observation
        failures = (observation.source.error,) if observation.source.error else ()
        return Fetched((observation,), failures)


# Reads of the control loop in flight at once; the others wait their turn in the operator.
READS_AT_ONCE = 64


class _Turns(httpx.AsyncBaseTransport):
    """A transport that sends at most ``slots`` requests at once and lets the rest wait for
    a turn, each answer read whole before its turn is given back. The wait is the
    operator's own queue: it counts against no request's timeout, and it is an asyncio
    semaphore's, not httpcore's pool queue, which scans every waiting request against every
    connection at each answer (quadratic, a saturated event loop with thousands waiting)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, slots: int) -> None:
        self._inner, self._slots = inner, asyncio.Semaphore(slots)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        async with self._slots:
            response = await self._inner.handle_async_request(request)
            try:
                await response.aread()
            finally:
                await response.aclose()
            return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def reading_client(slots: int = READS_AT_ONCE) -> httpx.AsyncClient:
    """The client the control loop reads sidecars and Prometheus with: 5 s to connect and
    to answer once a read has its turn, ``slots`` reads at once. A fleet's windows come due
    together (5000 pods at 1000 services): when the reads queued in the connection pool
    instead, those that waited 5 s there failed as pods that could not be reached, and the
    hold's wording, flipping between that and the pods' own errors, rewrote status at
    every window."""
    inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=slots))
    return httpx.AsyncClient(timeout=5.0, transport=_Turns(inner, slots))


class Observer:
    """The real source: direct or Prometheus, as each spec's metrics section says."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        allowed_prometheus: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self._direct = SidecarSource(client)
        self._prometheus = PrometheusServiceSource(httpx_get(client), allowed_prometheus, clock)

    async def fetch(
        self,
        namespace: str,
        name: str,
        spec: SpeculativeServiceSpec,
        pods: Sequence[PodTarget],
        *,
        canary: bool = False,
    ) -> Fetched:
        return await self._for(spec).fetch(namespace, name, spec, pods, canary=canary)

    def sampling_interval(self, spec: SpeculativeServiceSpec) -> float | None:
        return self._for(spec).sampling_interval(spec)

    async def sample(
        self, namespace: str, name: str, spec: SpeculativeServiceSpec, *, canary: bool = False
    ) -> None:
        await self._for(spec).sample(namespace, name, spec, canary=canary)

    def forget(self, namespace: str, name: str) -> None:
        self._direct.forget(namespace, name)
        self._prometheus.forget(namespace, name)

    def _for(self, spec: SpeculativeServiceSpec) -> ObservationSource:
        if spec.metrics.source == "Prometheus":
            return self._prometheus
        return self._direct
