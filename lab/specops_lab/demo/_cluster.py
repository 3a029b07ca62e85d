"""The demo's reads and writes on the cluster: apply the SpeculativeService, read it with its
Deployment and Events, what the engines have in flight, and the engines' figures from
Prometheus. Kubernetes and HTTP errors become :class:`DemoError` naming what was being
done."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from specops.api import GROUP, PLURAL, VERSION
from specops_lab.demo._errors import DemoError
from specops_lab.demo._fidelity import EngineInterval
from specops_lab.demo._report import EventView

__all__ = [
    "ClusterView",
    "engine_in_flight",
    "engine_intervals",
    "engine_request_time",
    "in_flight_series",
]

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


def engine_request_time(prometheus: str, namespace: str, start: float, end: float) -> float | None:
    """Requests the namespace's engines held between ``start`` and ``end`` (Unix seconds),
    by their requests' time in them (the e2e latency sum's growth) over the wall time."""
    span = max(1, round(end - start))
    selector = f'{{namespace="{namespace}",container="vllm"}}'
    seconds = _scalar(
        prometheus,
        f"sum(increase(vllm:e2e_request_latency_seconds_sum{selector}[{span}s]))",
        end,
    )
    return None if seconds is None else seconds / span


_IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def _gauge_sum(page: str, names: Sequence[str]) -> float:
    """The sum of the samples of ``names`` on a Prometheus text page."""
    total = 0.0
    for line in page.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            total += float(line.rsplit(" ", 1)[1])
    return total


def engine_in_flight(engine_urls: Sequence[str]) -> float | None:
    """Requests the engines hold now, by their own gauges (running + waiting), summed over
    ``engine_urls``; None when none answers."""
    found: float | None = None
    for url in engine_urls:
        try:
            answer = httpx.get(f"{url.rstrip('/')}/metrics", timeout=2.0)
            answer.raise_for_status()
        except httpx.HTTPError:
            continue  # a pod going or starting: the others still count
        found = (found or 0.0) + _gauge_sum(answer.text, _IN_FLIGHT)
    return found


def _range(
    prometheus: str, query: str, start: float, end: float, step: float
) -> dict[str, dict[float, float]]:
    """A range query's series by pod: {pod: {time: value}} (NaN samples left out)."""
    try:
        answer = httpx.get(
            f"{prometheus}/api/v1/query_range",
            params={"query": query, "start": start, "end": end, "step": step},
            timeout=30.0,
        )
        answer.raise_for_status()
        result = answer.json()["data"]["result"]
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        raise DemoError(f"Prometheus at {prometheus} could not answer {query}: {exc}") from exc
    series: dict[str, dict[float, float]] = {}
    for item in result:
        pod = str(item["metric"].get("pod", ""))
        values = series.setdefault(pod, {})
        for at, text in item["values"]:
            value = float(text)
            if value == value:
                values[float(at)] = value
    return series


def _at(series: dict[str, dict[float, float]], *, pod: str, at: float) -> float:
    return series.get(pod, {}).get(at, 0.0)


def engine_intervals(
    prometheus: str, namespace: str, start: float, end: float, step: float
) -> list[EngineInterval]:
    """Each engine's rates and mean gauges over each ``step`` seconds from ``start`` to
    ``end`` (Unix seconds), from its own counters as Prometheus scraped them; ``end`` of
    an interval is in seconds from ``start``."""
    selector = f'{{namespace="{namespace}",container="vllm"}}'
    window = f"[{max(1, round(step))}s]"

    def rate(name: str) -> dict[str, dict[float, float]]:
        return _range(
            prometheus, f"sum by (pod) (rate({name}{selector}{window}))", start, end, step
        )

    def gauge(function: str, name: str) -> dict[str, dict[float, float]]:
        query = f"sum by (pod) ({function}({name}{selector}{window}))"
        return _range(prometheus, query, start, end, step)

    steps = rate("vllm:iteration_tokens_total_count")
    generated = rate("vllm:generation_tokens_total")
    accepted = rate("vllm:spec_decode_num_accepted_tokens_total")
    drafts = rate("vllm:spec_decode_num_drafts_total")
    draft_tokens = rate("vllm:spec_decode_num_draft_tokens_total")
    prompts = rate("vllm:prompt_tokens_total")
    running = gauge("avg_over_time", "vllm:num_requests_running")
    fewest = gauge("min_over_time", "vllm:num_requests_running")
    kv = gauge("avg_over_time", "vllm:kv_cache_usage_perc")
    out: list[EngineInterval] = []
    for pod, by_time in sorted(steps.items()):
        for at, per_s in sorted(by_time.items()):

            def value(
                series: dict[str, dict[float, float]], pod: str = pod, at: float = at
            ) -> float:
                return series.get(pod, {}).get(at, 0.0)

            out.append(
                EngineInterval(
                    end=at - start,
                    steps_per_s=per_s,
                    generated_per_s=value(generated),
                    accepted_per_s=value(accepted),
                    drafts_per_s=value(drafts),
                    draft_tokens_per_s=value(draft_tokens),
                    prompt_tokens_per_s=value(prompts),
                    running=value(running),
                    kv_usage=value(kv),
                    busy=value(fewest) > 0,
                )
            )
    return out


def in_flight_series(
    prometheus: str, namespace: str, start: float, end: float, step: float
) -> list[tuple[float, float]]:
    """(seconds from ``start``, requests the namespace's engines held: mean running +
    waiting over the step) from the engines' gauges as Prometheus scraped them."""
    selector = f'{{namespace="{namespace}",container="vllm"}}'
    window = f"[{max(1, round(step))}s]"
    query = (
        f"sum(avg_over_time(vllm:num_requests_running{selector}{window}))"
        f" + sum(avg_over_time(vllm:num_requests_waiting{selector}{window}))"
    )
    series = _range(prometheus, query, start, end, step)
    points = next(iter(series.values()), {})
    return [(at - start, value) for at, value in sorted(points.items())]
