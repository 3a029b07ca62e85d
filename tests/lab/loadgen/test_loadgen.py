import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from specops_lab.loadgen import (
    LoadTarget,
    RequestRecord,
    open_session,
    poisson_arrivals,
    run_closed_loop,
    run_open_loop,
    summarize,
    trace_arrivals,
    watch_engine,
)
from specops_lab.sim import EngineConfig, SimulatedEngine, Workload, load_workload
from specops_lab.sim._server import ServerOptions, build_app


def test_poisson_arrivals_have_the_rate_and_are_seeded() -> None:
    arrivals = poisson_arrivals(50.0, 200.0, seed=1)
    assert len(arrivals) == pytest.approx(10_000, rel=0.05)
    assert arrivals == sorted(arrivals) and arrivals[0] >= 0 and arrivals[-1] < 200
    assert arrivals == poisson_arrivals(50.0, 200.0, seed=1)
    gaps = np.diff(arrivals)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential gaps


def test_a_rate_trace_changes_the_rate_over_time() -> None:
    arrivals = np.asarray(trace_arrivals([(0.0, 10.0), (100.0, 0.0), (150.0, 40.0)], 200.0))
    assert np.sum(arrivals < 100) == pytest.approx(1000, rel=0.1)
    assert np.sum((arrivals >= 100) & (arrivals < 150)) == 0
    assert np.sum(arrivals >= 150) == pytest.approx(2000, rel=0.1)
    with pytest.raises(ValueError, match="starts at 0"):
        trace_arrivals([(5.0, 1.0)], 10.0)


def test_summary_percentiles_and_throughput() -> None:
    records = [
        RequestRecord(True, 0.0, 0.1 * i, 1.0 + 0.1 * i, 10, 11, (0.09,) * 10) for i in range(1, 11)
    ]
    records.append(RequestRecord(False, 0.0, 0.0, 0.0, 0, 0, (), "HTTP 500: boom"))
    summary = summarize(records, duration_s=10.0)
    assert (summary["completed"], summary["failed"], summary["output_tokens"]) == (10, 1, 110)
    assert summary["output_throughput"] == pytest.approx(11.0)
    ttft = summary["ttft"]
    assert isinstance(ttft, dict) and ttft["median_ms"] == pytest.approx(550.0)
    tpot = summary["tpot"]
    assert isinstance(tpot, dict) and tpot["mean_ms"] == pytest.approx(100.0)
    assert summary["errors"] == ["HTTP 500: boom"]
    # The requests' time over the wall time: 10 requests of 1.1..2.0 s over 10 s.
    assert summary["client_in_flight"] == pytest.approx(
        sum(1.0 + 0.1 * i for i in range(1, 11)) / 10
    )


@pytest.fixture
async def server_url() -> AsyncIterator[str]:
    engine = SimulatedEngine(
        Workload(load_workload("gsm8k")),
        EngineConfig(served_model_name="llama"),
        track_tokens=True,
    )
    server = TestServer(build_app(engine, ServerOptions("llama", "llama")))
    await server.start_server()
    try:
        yield str(server.make_url("/"))
    finally:
        await server.close()


async def test_closed_and_open_loop_against_the_simulated_engine(server_url: str) -> None:
    target = LoadTarget(url=server_url, model="llama", max_tokens=12)
    closed = await run_closed_loop(target, 4, num_requests=8)
    assert len(closed) == 8 and all(r.ok and r.output_tokens == 12 for r in closed)
    assert all(len(r.itl) == 11 and r.ttft > 0 for r in closed)  # one token per step, k=0
    opened = await run_open_loop(
        LoadTarget(url=server_url, model="llama", chat=True, max_tokens=5), [0.0, 0.05, 0.1]
    )
    assert [r.output_tokens for r in opened] == [5, 5, 5]
    failed = await run_closed_loop(LoadTarget(url=server_url, model="other"), 1, num_requests=1)
    assert not failed[0].ok and failed[0].error.startswith("HTTP 404")


async def test_the_engine_is_watched_while_the_client_holds_its_concurrency(
    server_url: str,
) -> None:
    target = LoadTarget(url=server_url, model="llama", max_tokens=200)
    stop = asyncio.Event()
    async with open_session(2) as session:
        watcher = asyncio.create_task(watch_engine(session, server_url, stop, every_s=0.05))
        records = await run_closed_loop(target, 8, duration_s=0.6)
        stop.set()
        engine = await watcher
    assert all(r.ok for r in records)
    assert engine is not None and engine.in_flight
    # The engine held what the client sent: all 8 in flight but for the gaps between requests.
    mean = engine.mean_in_flight
    assert mean is not None and 6.0 <= mean <= 8.0
    by_time = engine.request_time_concurrency
    assert by_time is not None and 0 < by_time <= 8.5


async def test_a_server_without_metrics_is_not_watched() -> None:
    stop = asyncio.Event()
    stop.set()
    async with open_session(1) as session:
        assert await watch_engine(session, "http://127.0.0.1:9", stop) is None
