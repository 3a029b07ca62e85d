"""The operator's observation fetchers against httpx's MockTransport: sidecars and Prometheus."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from specops_operator._fetch import (
    Fetched,
    Observer,
    PodTarget,
    PrometheusServiceSource,
    SidecarSource,
    prometheus_allowed,
    reading_client,
    ready_pods,
)

from specops.api import SpeculativeServiceSpec, parse_service
from specops.observation.httpx_get import httpx_get
from specops.render import apply_defaults
from tests.control.observations import pod_observation

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama.yaml"

ALLOWED = ("http://prom:9090", "prom-2")


def _spec(**metrics: object) -> SpeculativeServiceSpec:
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    body["spec"]["metrics"] = metrics or {"source": "Direct"}
    return apply_defaults(parse_service(body).spec)


def _pod(name: str, ip: str | None, ready: bool, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]
    }
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


def test_only_ready_pods_with_an_ip_are_asked() -> None:
    pods = [
        _pod("a", "10.0.0.1", True),
        _pod("b", "10.0.0.2", False),
        _pod("c", None, True),
        _pod("d", "10.0.0.4", True, deleting=True),
    ]
    assert ready_pods(pods) == [PodTarget("a", "10.0.0.1")]


async def test_direct_reads_every_sidecar_and_names_the_ones_that_failed() -> None:
    good = pod_observation("a", at=1000.0, running=[4] * 10)

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.port == 9090 and request.url.path == "/v1/observation"
        host = request.url.host
        if host == "10.0.0.1":
            return httpx.Response(200, content=good.model_dump_json())
        if host == "10.0.0.2":
            return httpx.Response(503, text="starting")
        if host == "10.0.0.3":
            return httpx.Response(200, json={"pod": "c"})
        raise httpx.ConnectError("connection refused", request=request)

    pods = [PodTarget(n, f"10.0.0.{i}") for i, n in enumerate("abcd", start=1)]
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        fetched = await SidecarSource(client).fetch("ml", "llama", _spec(), pods)
    assert fetched.observations == (good,)
    assert len(fetched.failures) == 3
    assert fetched.failures[0].startswith("b: sidecar answered HTTP 503")
    assert fetched.failures[1].startswith("c: malformed observation")
    assert fetched.failures[2].startswith("d: cannot reach http://10.0.0.4:9090/v1/observation")


def _matrix(at: float, running: float, drafts: float) -> dict[str, Any]:
    labels = {"namespace": "ml", "service": "llama", "pod": "llama-0", "job": "j", "instance": "i"}
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {"__name__": "vllm:num_requests_running", **labels},
                    "values": [[at, str(running)]],
                },
                {
                    "metric": {"__name__": "vllm:spec_decode_num_drafts_total", **labels},
                    "values": [[at, str(drafts)]],
                },
            ],
        },
    }


async def test_prometheus_is_asked_for_the_services_series_and_readings_accumulate() -> None:
    now = 1_000_000.0
    queries: list[str] = []
    answers = iter([_matrix(now - 30, 4, 100), _matrix(now - 15, 4, 300)])

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/query"
        queries.append(request.url.params["query"])
        return httpx.Response(200, text=json.dumps(next(answers)))

    spec = _spec(source="Prometheus", prometheusUrl="http://prom:9090")
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        source = PrometheusServiceSource(httpx_get(client), ["prom"], clock=lambda: now)
        await source.fetch("ml", "llama", spec, [])
        fetched = await source.fetch("ml", "llama", spec, [])
    assert 'namespace="ml"' in queries[0] and 'service="llama"' in queries[0]
    # The first query reads back a whole evaluation window; later ones only the recent scrapes.
    window_s = spec.policy.evaluation_window_seconds
    lookback_s = max(4 * spec.metrics.scrape_interval_seconds, 60)
    assert window_s > lookback_s
    assert [q.rpartition("[")[2] for q in queries] == [f"{window_s}s]", f"{lookback_s}s]"]
    assert fetched.failures == ()
    (observation,) = fetched.observations
    assert observation.service == "llama"
    assert observation.latest_reading_at == now - 15
    (window,) = observation.windows
    assert window.window_seconds == spec.policy.evaluation_window_seconds
    assert window.readings == 2


async def test_a_failing_prometheus_is_a_failure_not_an_exception() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            400, json={"status": "error", "errorType": "bad_data", "error": "parse error"}
        )

    spec = _spec(source="Prometheus", prometheusUrl="http://prom:9090")
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        fetched = await Observer(client, allowed_prometheus=ALLOWED).fetch("ml", "llama", spec, [])
    assert "PromQL error (bad_data): parse error" in fetched.failures[0]
    assert fetched.observations[0].status.value == "unknown"


async def test_samples_between_decisions_fill_the_prometheus_window() -> None:
    now = 1_000_000.0
    answers = iter(
        [_matrix(now - 30, 4, 100), _matrix(now - 20, 6, 200), _matrix(now - 10, 8, 300)]
    )

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=json.dumps(next(answers)))

    spec = _spec(source="Prometheus", prometheusUrl="http://prom:9090", scrapeIntervalSeconds=10)
    clock = [now]
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        observer = Observer(client, allowed_prometheus=ALLOWED, clock=lambda: clock[0])
        assert observer.sampling_interval(spec) == 10.0
        await observer.sample("ml", "llama", spec)
        clock[0] += 10  # a scrape interval later
        await observer.sample("ml", "llama", spec)
        clock[0] += 10
        fetched = await observer.fetch("ml", "llama", spec, [])
    (window,) = fetched.observations[0].windows
    assert window.readings == 3


async def test_sidecars_sample_themselves() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"no request expected, got {request.url}")

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        observer = Observer(client, allowed_prometheus=ALLOWED)
        assert observer.sampling_interval(_spec()) is None
        await observer.sample("ml", "llama", _spec())


async def test_new_settings_or_a_forgotten_service_start_the_readings_afresh() -> None:
    now = 1_000_000.0
    answers = iter([_matrix(now - 30 + 10 * i, 4, 100 * (i + 1)) for i in range(5)])

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=json.dumps(next(answers)))

    spec = _spec(source="Prometheus", prometheusUrl="http://prom:9090", scrapeIntervalSeconds=10)
    moved = _spec(source="Prometheus", prometheusUrl="http://prom-2:9090", scrapeIntervalSeconds=10)

    def readings(fetched: Fetched) -> int:
        (window,) = fetched.observations[0].windows
        return window.readings

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        observer = Observer(client, allowed_prometheus=ALLOWED, clock=lambda: now)
        await observer.sample("ml", "llama", spec)
        assert readings(await observer.fetch("ml", "llama", spec, [])) == 2
        assert readings(await observer.fetch("ml", "llama", moved, [])) == 1
        observer.forget("ml", "llama")
        assert readings(await observer.fetch("ml", "llama", moved, [])) == 1


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://prom:9090", True),
        ("http://prom:9090/", True),
        ("http://prom:9090/prometheus", True),  # under the base URL's path
        ("http://prom-2:443", True),  # a bare host: any port
        ("https://prom-2", True),
        ("http://prom:9091", False),  # another port
        ("https://prom:9090", False),  # another scheme
        ("http://attacker:9090/internal/admin/delete-everything", False),
        ("http://prom.evil:9090", False),
        ("http://prom:9090@attacker:80", False),  # userinfo: the host is the attacker
    ],
)
def test_only_allowed_prometheus_servers_are_read(url: str, allowed: bool) -> None:
    assert prometheus_allowed(url, ALLOWED) is allowed
    assert prometheus_allowed(url, ()) is False


async def test_a_prometheus_not_allowed_is_never_asked_and_says_why() -> None:
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return httpx.Response(200, json={"status": "success", "data": {"result": []}})

    spec = _spec(source="Prometheus", prometheusUrl="http://attacker:9090/internal/admin")
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        observer = Observer(client, allowed_prometheus=ALLOWED)
        await observer.sample("ml", "llama", spec)
        fetched = await observer.fetch("ml", "llama", spec, [])
    assert asked == [] and fetched.observations == ()
    (failure,) = fetched.failures
    assert "http://attacker:9090/internal/admin is not among the Prometheus servers" in failure
    assert "allowed: http://prom:9090, prom-2" in failure


async def test_a_canarys_pods_are_read_apart_from_the_rest_of_the_service() -> None:
    now = 1_000_000.0
    queries: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        queries.append(request.url.params["query"])
        return httpx.Response(200, text=json.dumps(_matrix(now - 15, 4, 100)))

    spec = _spec(source="Prometheus", prometheusUrl="http://prom:9090")
    canary = [PodTarget("llama-canary-5d8f-x2k", "10.0.0.9")]
    clock, scrape = [now], spec.metrics.scrape_interval_seconds
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        source = PrometheusServiceSource(httpx_get(client), ["prom"], clock=lambda: clock[0])
        await source.fetch("ml", "llama", spec, [])
        fetched = await source.fetch("ml", "llama", spec, canary, canary=True)
        assert fetched.observations and not fetched.failures
        nothing = await source.fetch("ml", "llama", spec, [], canary=True)
        await source.sample("ml", "llama", spec, canary=True)  # the service's and the canary's
        # Once no canary runs its reader is dropped: only the service's is asked.
        clock[0] += scrape
        await source.sample("ml", "llama", spec)
        clock[0] += scrape
        await source.sample("ml", "llama", spec, canary=True)
    service, canary_query, sampled, sampled_canary, *after = queries
    assert len(after) == 2 and all("pod!~" in q for q in after), after
    # The names as regular expressions (re.escape), in a PromQL string.
    assert r'pod!~"llama\\-canary-.+"' in service, service
    assert r'pod=~"llama\\-canary\\-5d8f\\-x2k"' in canary_query, canary_query
    assert nothing.failures == ("no Ready canary pod",)
    assert "pod!~" in sampled and "pod=~" in sampled_canary


def _series_of(names: list[str], at: float) -> dict[str, Any]:
    """A matrix with each named service's running gauge at its own value (its index)."""
    result: list[dict[str, Any]] = []
    for name in names:
        labels = {"namespace": "ml", "service": name, "pod": f"{name}-0", "job": "j"}
        index = float(name.split("-")[1])
        for metric, value in (
            ("vllm:num_requests_running", index),
            ("vllm:spec_decode_num_drafts_total", at),
        ):
            result.append(
                {
                    "metric": {"__name__": metric, **labels, "instance": name},
                    "values": [[t, str(value)] for t in (at - 30, at - 15, at)],
                }
            )
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


async def test_the_services_of_one_prometheus_are_read_together_once_an_interval() -> None:
    clock = [1_000_000.0]
    queries: list[str] = []
    failing = [False]

    def answer(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        queries.append(query)
        found = re.search(r'service(=~|=)"([^"]*)"', query)
        assert found, query
        names = found.group(2).replace("\\\\", "\\").replace("\\-", "-").split("|")
        if failing[0] and found.group(1) == "=~":
            return httpx.Response(503, text="overloaded")
        return httpx.Response(200, text=json.dumps(_series_of(names, clock[0])))

    spec = _spec(source="Prometheus", prometheusUrl="http://prom:9090", scrapeIntervalSeconds=15)
    names = [f"svc-{i}" for i in range(120)]
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        source = PrometheusServiceSource(httpx_get(client), ["prom"], clock=lambda: clock[0])
        for name in names:  # each service's first read is its own: a whole window back
            await source.fetch("ml", name, spec, [])
        assert len(queries) == 120 and all('service="' in q for q in queries)
        for _ in range(2):
            del queries[:]
            clock[0] += 15
            fetched = [await source.fetch("ml", name, spec, []) for name in names]
            # 120 services, one query for each batch of 50, all in one scrape interval
            assert len(queries) == 3, queries
            assert all("service=~" in q and "pod!~" in q for q in queries)
        for name, got in zip(names, fetched, strict=True):
            (observation,) = got.observations
            (window,) = observation.windows
            assert window.load.running is not None
            assert window.load.running.max == float(name.split("-")[1])  # its own series
        del queries[:]
        await source.sample("ml", "svc-7", spec)  # the same interval: the answer is reused
        assert queries == []
        # A failing batch: each of its services asks on its own, as before.
        failing[0] = True
        clock[0] += 15
        got = await source.fetch("ml", "svc-3", spec, [])
        assert got.observations and not got.failures
        assert len(queries) == 4 and 'service="svc-3"' in queries[-1]
        source.forget("ml", "svc-3")
        failing[0] = False
        clock[0] += 15
        del queries[:]
        await source.sample("ml", "svc-4", spec)
        assert all("svc\\\\-3|" not in q for q in queries)  # a forgotten service is not asked


async def test_reads_beyond_the_clients_turns_wait_in_the_operator_and_all_succeed() -> None:
    """More reads than turns: at most that many reach the servers at once, the rest wait
    without their wait counting against a timeout, and every one gets its answer."""
    in_flight, most = 0, 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(0.05)
        body = b'{"ok": true}'
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        in_flight -= 1
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = reading_client(slots=4)
    try:
        # 100 reads of 50 ms, 4 at a time: over a second of waiting for turns in all.
        answers = await asyncio.gather(
            *(client.get(f"http://127.0.0.1:{port}/v1/observation") for _ in range(100))
        )
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()
    assert [r.json() for r in answers] == [{"ok": True}] * 100
    assert most <= 4
