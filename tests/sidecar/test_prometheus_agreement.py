"""Both sources on the same data: a real ``specops sim serve`` scraped by a real Prometheus.

Both read through the sidecar's own GET (aiohttp). Both histories start at the idle
engine and end after the load stops and Prometheus has scraped the final state. Windowed
counter sums telescope to (last - first), so every counter-based estimate (acceptance,
E(k), latency quantiles) must be identical whatever the readings in between; rates and
step times differ only by where the readings fell.
"""

import asyncio
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import aiohttp
import httpx
import pytest
from specops_sidecar import aiohttp_get

from specops.errors import MetricsError
from specops.observation import (
    EngineMetricsSource,
    EstimateStatus,
    ObserverConfig,
    PodObservation,
    PrometheusSource,
    Reading,
    Snapshot,
    SourceObservation,
    observe,
    snapshot_from_reading,
)
from specops.observation import Gauge as G
from specops.profiles import get_profile
from tests.processes import running_prometheus, running_sim_engine

pytestmark = pytest.mark.integration

LABELS = {"namespace": "ns", "pod": "llama-0"}
EAGLE = '{"method": "eagle", "model": "d", "num_speculative_tokens": 3}'


@pytest.fixture
def engine_url(tmp_path: Path) -> Iterator[str]:
    args = ["llama", "--workload", "gsm8k", "--speculative-config", EAGLE]
    with running_sim_engine(args, tmp_path / "engine.log") as url:
        yield url


@pytest.fixture
def prometheus_url(engine_url: str, tmp_path: Path) -> Iterator[str]:
    target = engine_url.removeprefix("http://")
    job = {"job_name": "vllm", "static_configs": [{"targets": [target], "labels": LABELS}]}
    with running_prometheus([job], tmp_path) as url:
        yield url


async def _load(engine_url: str, concurrency: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=60.0) as client:

        async def user() -> None:
            while time.monotonic() < deadline:
                response = await client.post(
                    f"{engine_url}/v1/completions",
                    json={"model": "llama", "prompt": "hello " * 50, "max_tokens": 128},
                )
                assert response.status_code == 200

        await asyncio.gather(*(user() for _ in range(concurrency)))


async def _poll(
    source: EngineMetricsSource | PrometheusSource, into: list[Snapshot], stop: asyncio.Event
) -> None:
    while not stop.is_set():
        into.extend(snapshot_from_reading(reading) for reading in await source.read())
        await asyncio.sleep(0.5)


def _observe(
    snapshots: list[Snapshot], kind: Literal["direct", "prometheus"], now: float
) -> PodObservation:
    config = ObserverConfig(
        namespace="ns",
        pod="llama-0",
        service="llama",
        windows_s=(600.0,),
        prediction_window_s=600.0,
        cost_model=get_profile("llama3.1-8b-h100").network,
        method="eagle",
        stale_after_s=600.0,
    )
    source = SourceObservation(kind=kind, target="", up=True)
    return observe(snapshots, now, config, source)


async def test_direct_and_prometheus_sources_agree(engine_url: str, prometheus_url: str) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(5.0)) as client:
        get = aiohttp_get(client)
        direct = EngineMetricsSource(engine_url, get)
        prometheus = PrometheusSource(prometheus_url, LABELS, get, lookback_s=30)
        # Both must first see the idle engine.
        deadline = time.monotonic() + 30
        first: Sequence[Reading] = ()
        while not first and time.monotonic() < deadline:
            try:
                first = await prometheus.read()
            except MetricsError:  # Prometheus has not scraped the engine yet
                await asyncio.sleep(0.5)
        assert first, "Prometheus never scraped the engine"
        from_direct: list[Snapshot] = [snapshot_from_reading(r) for r in await direct.read()]
        from_prom: list[Snapshot] = [snapshot_from_reading(r) for r in first]

        stop = asyncio.Event()
        pollers = [
            asyncio.create_task(_poll(direct, from_direct, stop)),
            asyncio.create_task(_poll(prometheus, from_prom, stop)),
        ]
        await _load(engine_url, concurrency=8, seconds=15.0)
        await asyncio.sleep(3.0)  # idle engine, scraped at least twice more
        stop.set()
        await asyncio.gather(*pollers)
        # A reader started now (an operator after a restart) gets the same scrapes at once.
        late = PrometheusSource(prometheus_url, LABELS, get, lookback_s=30, history_s=600)
        backfilled = [snapshot_from_reading(r) for r in await late.read()]

    assert from_direct[-1].gauges[G.RUNNING] == 0
    assert from_direct[0].counters == from_prom[0].counters
    seen = [b for b in backfilled if b.timestamp <= from_prom[-1].timestamp]  # not later scrapes
    assert seen[-len(from_prom) :] == from_prom
    assert from_direct[-1].counters == from_prom[-1].counters
    assert from_direct[-1].histograms == from_prom[-1].histograms
    now = max(from_direct[-1].timestamp, from_prom[-1].timestamp)
    d = _observe(from_direct, "direct", now).windows[0]
    p = _observe(from_prom, "prometheus", now).windows[0]
    assert d.acceptance.status is p.acceptance.status is EstimateStatus.OK
    assert d.acceptance.drafts == p.acceptance.drafts > 0
    assert d.acceptance.per_position == pytest.approx(p.acceptance.per_position, rel=1e-12)
    assert d.acceptance.expected_tokens == p.acceptance.expected_tokens
    assert d.outcome.tpot == p.outcome.tpot
    assert d.outcome.itl == p.outcome.itl
    assert d.cost.step_seconds is not None and p.cost.step_seconds is not None
    assert d.cost.step_seconds == pytest.approx(p.cost.step_seconds, rel=0.15)
