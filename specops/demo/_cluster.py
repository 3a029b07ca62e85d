"""The demo's reads and writes on the cluster: apply the SpeculativeService, read it with its
Deployment and Events, and the engines' figures from Prometheus. Kubernetes and HTTP
errors become :class:`DemoError` naming what was being done."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from specops.api import GROUP, PLURAL, VERSION
from specops.demo._errors import DemoError
from specops.demo._report import EventView, Measured

__all__ = ["ClusterView", "engine_figures"]

Obj = dict[str, Any]


class ClusterView:
    """One SpeculativeService and what belongs to it, through the admin kubeconfig."""

    def __init__(self, kubeconfig: Path, namespace: str, name: str) -> None:
        self.api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self.namespace = namespace
        self.name = name
        self._core = client.CoreV1Api(self.api)
        self._apps = client.AppsV1Api(self.api)
        self._custom = client.CustomObjectsApi(self.api)

    def close(self) -> None:
        self.api.close()

    @contextmanager
    def applied(self, service: Mapping[str, Any], *, clean_up: bool) -> Iterator[None]:
        """Create the namespace (if missing) and the SpeculativeService; with ``clean_up``,
        delete both on the way out (on a throw-away cluster there is no need)."""
        try:
            self._core.create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace))
            )
        except ApiException as exc:
            if exc.status != 409:
                raise DemoError(f"cannot create namespace {self.namespace}: {exc.reason}") from exc
        try:
            self._custom.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, dict(service)
            )
        except ApiException as exc:
            raise DemoError(
                f"the API server refused SpeculativeService {self.namespace}/{self.name}:"
                f" {exc.status} {exc.body}"
            ) from exc
        try:
            yield
        finally:
            if clean_up:
                self._custom.delete_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, self.name
                )
                self._core.delete_namespace(self.namespace)

    def service(self) -> Obj | None:
        try:
            found = self._custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, self.name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise DemoError(f"cannot read SpeculativeService {self.name}: {exc.reason}") from exc
        if not isinstance(found, dict):
            raise DemoError(f"SpeculativeService {self.name}: the API server sent {found!r}")
        return found

    def deployment(self) -> Obj | None:
        try:
            found = self._apps.read_namespaced_deployment(self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise DemoError(f"cannot read Deployment {self.name}: {exc.reason}") from exc
        plain: Obj = self.api.sanitize_for_serialization(found)
        return plain

    def events(self) -> tuple[EventView, ...]:
        """Events about the SpeculativeService, oldest first."""
        selector = f"involvedObject.name={self.name},involvedObject.kind=SpeculativeService"
        try:
            listed = self._core.list_namespaced_event(self.namespace, field_selector=selector)
        except ApiException as exc:
            raise DemoError(f"cannot list Events in {self.namespace}: {exc.reason}") from exc

        def when(event: client.CoreV1Event) -> str:
            stamp = event.last_timestamp or event.event_time or event.metadata.creation_timestamp
            return "" if stamp is None else stamp.strftime("%H:%M:%S")

        ordered = sorted(listed.items, key=when)
        return tuple(EventView(when(e), e.reason or "", e.message or "") for e in ordered)


def _scalar(prometheus: str, query: str, at: float) -> float | None:
    try:
        answer = httpx.get(
            f"{prometheus}/api/v1/query", params={"query": query, "time": at}, timeout=10.0
        )
        answer.raise_for_status()
        result = answer.json()["data"]["result"]
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        raise DemoError(f"Prometheus at {prometheus} could not answer {query}: {exc}") from exc
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if value != value else value  # NaN: no samples


def engine_figures(
    prometheus: str, namespace: str, start: float, end: float, completed: int, failed: int
) -> Measured:
    """Mean TPOT and output throughput of the namespace's engines between ``start`` and
    ``end`` (Unix seconds), from their own counters and histograms."""
    span = max(1, round(end - start))
    selector = f'{{namespace="{namespace}"}}'
    tpot = "vllm:request_time_per_output_token_seconds"
    mean_tpot = _scalar(
        prometheus,
        f"sum(increase({tpot}_sum{selector}[{span}s]))"
        f" / sum(increase({tpot}_count{selector}[{span}s]))",
        end,
    )
    tokens = _scalar(
        prometheus, f"sum(increase(vllm:generation_tokens_total{selector}[{span}s]))", end
    )
    return Measured(
        mean_tpot_s=mean_tpot,
        throughput=None if tokens is None else tokens / span,
        completed=completed,
        failed=failed,
    )
