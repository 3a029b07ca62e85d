"""Both sources through both HTTP GETs (the sidecar's and the operator's): readings,
failures, and agreement."""

import json
from collections.abc import Mapping

import pytest

from specops.errors import MAX_METRICS_ERROR_CHARS, MetricsError
from specops.observation import (
    MAX_ANSWER_BYTES,
    EngineMetricsSource,
    ObserverConfig,
    PrometheusSource,
    SourceObservation,
    observe,
    prometheus_selector,
    snapshot_from_reading,
)
from specops.profiles import get_profile
from tests.observation.fake_vllm import FakeVllm, matrix_from_pages

from .conftest import Handler, Network, page_handler


def constant(status: int, body: str) -> Handler:
    return lambda _path, _query: (status, body)


async def test_direct_source_reads_the_engine_page(network: Network) -> None:
    engine = FakeVllm(k=2)
    engine.draft(10, [6, 3])
    served = await network.serve(page_handler(engine))
    source = EngineMetricsSource(served.url + "/", served.get, lambda: 42.0)
    [reading] = await source.read()
    assert reading.timestamp == 42.0
    assert source.target == f"{served.url}/metrics"
    assert any(s.name == "vllm:spec_decode_num_drafts_total" for s in reading.series)


async def test_prometheus_source_starts_with_the_history_then_reads_what_is_new(
    network: Network,
) -> None:
    """A reader started late gets every scrape of its history at once, oldest first."""
    engine = FakeVllm(k=2)
    scrapes: list[tuple[float, str]] = []
    for t in (100.0, 115.0, 130.0):
        engine.draft(10, [7, 4])
        scrapes.append((t, engine.page()))
    queries: list[str] = []

    def answer(path: str, query: Mapping[str, str]) -> tuple[int, str]:
        queries.append(query["query"])
        return 200, json.dumps(matrix_from_pages(*scrapes))

    served = await network.serve(answer)
    source = PrometheusSource(served.url, {"pod": "p-0"}, served.get, history_s=300)
    history = await source.read()
    assert [r.timestamp for r in history] == [100.0, 115.0, 130.0]
    drafts = [
        next(s.value for s in r.series if s.name == "vllm:spec_decode_num_drafts_total")
        for r in history
    ]
    assert drafts == [10.0, 20.0, 30.0]
    engine.draft(10, [7, 4])
    scrapes.append((145.0, engine.page()))
    assert [r.timestamp for r in await source.read()] == [145.0]
    assert [q[-6:] for q in queries] == ["[300s]", "}[60s]"]


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (503, "engine dead", "engine answered HTTP 503: 'engine dead'"),
        (307, "elsewhere", "engine answered HTTP 307"),
        (200, "<html>hello</html>", "none of vLLM's"),
        (200, 'vllm:num_requests_running{engine="0 3\n', "malformed"),
    ],
)
async def test_direct_source_failures_are_metrics_errors(
    network: Network, status: int, body: str, message: str
) -> None:
    served = await network.serve(constant(status, body))
    source = EngineMetricsSource(served.url, served.get)
    with pytest.raises(MetricsError, match=message):
        await source.read()


async def test_unreachable_engine_is_a_metrics_error(network: Network) -> None:
    served = await network.unreachable()
    source = EngineMetricsSource(served.url, served.get)
    with pytest.raises(MetricsError, match=rf"^cannot reach {served.url}/metrics: "):
        await source.read()


async def test_engine_that_does_not_answer_in_time_is_a_metrics_error(network: Network) -> None:
    served = await network.hanging()
    source = EngineMetricsSource(served.url, served.get)
    with pytest.raises(MetricsError, match=rf"^timed out reading {served.url}/metrics: "):
        await source.read()


async def test_prometheus_source_queries_the_pods_series_and_skips_repeats(
    network: Network,
) -> None:
    engine = FakeVllm(k=2)
    queries: list[str] = []
    stamp = {"t": 100.0}

    def answer(path: str, query: Mapping[str, str]) -> tuple[int, str]:
        assert path == "/api/v1/query"
        queries.append(query["query"])
        return 200, json.dumps(matrix_from_pages((stamp["t"], engine.page())))

    served = await network.serve(answer)
    source = PrometheusSource(served.url, {"namespace": "ns", "pod": "p-0"}, served.get)
    assert [r.timestamp for r in await source.read()] == [100.0]
    assert await source.read() == []  # Prometheus has not scraped again
    stamp["t"] = 115.0
    assert [r.timestamp for r in await source.read()] == [115.0]
    # the query arrives intact through the client's URL encoding
    assert queries[0] == prometheus_selector({"namespace": "ns", "pod": "p-0"}) + "[60s]"
    assert queries[0].endswith('namespace="ns",pod="p-0"}[60s]')


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (
            400,
            json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}),
            r"PromQL error \(bad_data\)",
        ),
        (502, "bad gateway", "HTTP 502 without JSON"),
        (
            200,
            json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}),
            "no series in Prometheus",
        ),
    ],
)
async def test_prometheus_failures_are_metrics_errors(
    network: Network, status: int, body: str, message: str
) -> None:
    served = await network.serve(constant(status, body))
    source = PrometheusSource(served.url, {"pod": "p"}, served.get)
    with pytest.raises(MetricsError, match=message):
        await source.read()


async def test_both_sources_give_the_same_observation_on_the_same_data(network: Network) -> None:
    """Prometheus scraped the very pages the direct source read, at the same times."""
    engine = FakeVllm(k=3)
    engine.load(running=8)
    pages: list[tuple[float, str, dict[str, object]]] = []
    for i in range(12):
        t = 1000.0 + 15 * i
        pages.append((t, engine.page(), matrix_from_pages((t, engine.page()))))
        engine.draft(800, [640, 480, 300])
        engine.steps([8 * 3.8] * 100)
        engine.load(running=8 + i % 3, waiting=i % 2, kv=0.1 * (i % 5))
        engine.latencies([0.012 + 0.001 * i], [0.02] * 50)

    index = {"i": 0}

    def answer(path: str, _: Mapping[str, str]) -> tuple[int, str]:
        page, matrix = pages[index["i"]][1:]
        return 200, page if path == "/metrics" else json.dumps(matrix)

    served = await network.serve(answer)
    direct_source = EngineMetricsSource(served.url, served.get, lambda: pages[index["i"]][0])
    prom_source = PrometheusSource(served.url, {"pod": "p-0"}, served.get)
    from_direct, from_prom = [], []
    for i in range(len(pages)):
        index["i"] = i
        [direct_reading] = await direct_source.read()
        [prom_reading] = await prom_source.read()
        from_direct.append(snapshot_from_reading(direct_reading))
        from_prom.append(snapshot_from_reading(prom_reading))
    assert from_direct == from_prom
    config = ObserverConfig(
        namespace="ns", pod="p-0", service="s", cost_model=get_profile("llama3.1-8b-h100").network
    )
    up = SourceObservation(kind="direct", target="x", up=True)
    now = pages[-1][0]
    assert observe(from_direct, now, config, up) == observe(from_prom, now, config, up)


async def test_an_answer_past_the_cap_is_refused_unread(network: Network) -> None:
    """A 20 MB /metrics page (or Prometheus answer) took the sidecar from 54 to 319 MB and the
    operator past its memory limit; both GETs stop reading at the cap."""
    huge = "# " + "x" * (MAX_ANSWER_BYTES + 1024) + "\n"
    served = await network.serve(constant(200, huge))
    with pytest.raises(MetricsError, match=f"answered more than {MAX_ANSWER_BYTES} bytes"):
        await served.get(served.url + "/metrics")
    ok = await network.serve(constant(200, "x" * 1000))
    assert await ok.get(ok.url + "/metrics") == (200, "x" * 1000)


async def test_what_a_source_answers_reaches_status_cut_short(network: Network) -> None:
    error = {"status": "error", "errorType": "bad_data", "error": "y" * 50_000}
    served = await network.serve(constant(400, json.dumps(error)))
    source = PrometheusSource(served.url, {"pod": "p"}, served.get)
    with pytest.raises(MetricsError) as caught:
        await source.read()
    assert len(str(caught.value)) < MAX_METRICS_ERROR_CHARS + 64
    assert str(caught.value).endswith("more characters)")
