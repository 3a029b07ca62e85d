"""Both sources through httpx.MockTransport: readings, failures, and agreement."""

import json

import httpx
import pytest
from specops_sidecar import DirectSource, PrometheusSource

from specops.errors import MetricsError
from specops.observation import (
    ObserverConfig,
    SourceObservation,
    observe,
    snapshot_from_reading,
)
from specops.profiles import get_profile
from tests.observation.fake_vllm import FakeVllm

from .conftest import matrix_from_page, page_handler


def client(handler: httpx.MockTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=handler)


async def test_direct_source_reads_the_engine_page() -> None:
    engine = FakeVllm(k=2)
    engine.draft(10, [6, 3])
    source = DirectSource(
        "http://engine:8000/", client(httpx.MockTransport(page_handler(engine))), lambda: 42.0
    )
    reading = await source.read()
    assert reading.timestamp == 42.0
    assert source.target == "http://engine:8000/metrics"
    assert any(s.name == "vllm:spec_decode_num_drafts_total" for s in reading.series)


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (httpx.Response(503, text="engine dead"), "engine answered HTTP 503"),
        (httpx.Response(200, text="<html>hello</html>"), "none of vLLM's"),
        (httpx.Response(200, text='vllm:num_requests_running{engine="0 3\n'), "malformed"),
    ],
)
async def test_direct_source_failures_are_metrics_errors(
    response: httpx.Response, message: str
) -> None:
    source = DirectSource("http://engine:8000", client(httpx.MockTransport(lambda _: response)))
    with pytest.raises(MetricsError, match=message):
        await source.read()


async def test_unreachable_engine_is_a_metrics_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    source = DirectSource("http://engine:8000", client(httpx.MockTransport(refuse)))
    with pytest.raises(MetricsError, match=r"^cannot reach http://engine:8000/metrics: "):
        await source.read()


async def test_prometheus_source_queries_the_pods_series_and_skips_repeats() -> None:
    engine = FakeVllm(k=2)
    queries: list[str] = []
    stamp = {"t": 100.0}

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/query"
        queries.append(request.url.params["query"])
        return httpx.Response(200, json=matrix_from_page(engine, stamp["t"]))

    source = PrometheusSource(
        "http://prom:9090", {"namespace": "ns", "pod": "p-0"}, client(httpx.MockTransport(answer))
    )
    first = await source.read()
    assert first is not None and first.timestamp == 100.0
    assert await source.read() is None  # Prometheus has not scraped again
    stamp["t"] = 115.0
    assert (await source.read()) is not None
    assert queries[0].endswith('namespace="ns",pod="p-0"}[60s]')


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (
            httpx.Response(
                400, json={"status": "error", "errorType": "bad_data", "error": "parse error"}
            ),
            r"PromQL error \(bad_data\)",
        ),
        (httpx.Response(502, text="bad gateway"), "HTTP 502 without JSON"),
        (
            httpx.Response(
                200, json={"status": "success", "data": {"resultType": "matrix", "result": []}}
            ),
            "no series in Prometheus",
        ),
    ],
)
async def test_prometheus_failures_are_metrics_errors(
    response: httpx.Response, message: str
) -> None:
    source = PrometheusSource(
        "http://prom:9090", {"pod": "p"}, client(httpx.MockTransport(lambda _: response))
    )
    with pytest.raises(MetricsError, match=message):
        await source.read()


async def test_both_sources_give_the_same_observation_on_the_same_data() -> None:
    """Prometheus scraped the very pages the direct source read, at the same times."""
    engine = FakeVllm(k=3)
    engine.load(running=8)
    pages: list[tuple[float, str, dict[str, object]]] = []
    for i in range(12):
        t = 1000.0 + 15 * i
        pages.append((t, engine.page(), matrix_from_page(engine, t)))
        engine.draft(800, [640, 480, 300])
        engine.steps([8 * 3.8] * 100)
        engine.load(running=8 + i % 3, waiting=i % 2, kv=0.1 * (i % 5))
        engine.latencies([0.012 + 0.001 * i], [0.02] * 50)

    index = {"i": 0}

    def direct(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=pages[index["i"]][1])

    def prometheus(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=json.dumps(pages[index["i"]][2]))

    direct_source = DirectSource(
        "http://e:8000", client(httpx.MockTransport(direct)), lambda: pages[index["i"]][0]
    )
    prom_source = PrometheusSource(
        "http://prom:9090", {"pod": "p-0"}, client(httpx.MockTransport(prometheus))
    )
    from_direct, from_prom = [], []
    for i in range(len(pages)):
        index["i"] = i
        direct_reading = await direct_source.read()
        prom_reading = await prom_source.read()
        assert prom_reading is not None
        from_direct.append(snapshot_from_reading(direct_reading))
        from_prom.append(snapshot_from_reading(prom_reading))
    assert from_direct == from_prom
    config = ObserverConfig(
        namespace="ns", pod="p-0", service="s", cost_model=get_profile("llama3.1-8b-h100").network
    )
    up = SourceObservation(kind="direct", target="x", up=True)
    now = pages[-1][0]
    assert observe(from_direct, now, config, up) == observe(from_prom, now, config, up)
