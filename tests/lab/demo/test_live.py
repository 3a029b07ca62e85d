"""The load held by phase: what the day wanted, what the client had in flight, and what the
engines held by their own gauges."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from specops_lab.bench import LoadTrace, Segment
from specops_lab.demo import held_by_phase, phase_of, phase_spans
from specops_lab.demo._load import ConcurrencyDriver

TRACE = LoadTrace(
    name="t",
    workload="sharegpt",
    segments=(
        Segment(duration_s=10, concurrency=4, label="night"),
        Segment(duration_s=10, concurrency=4, to=24),
        Segment(duration_s=10, concurrency=24, label="midday"),
    ),
)


def test_phases_are_the_segments_in_order() -> None:
    assert phase_spans(TRACE) == [("night", 0, 10), ("1:c4->24", 10, 20), ("midday", 20, 30)]
    name = phase_of(TRACE)
    assert [name(t) for t in (0.0, 9.9, 10.0, 25.0, 99.0)] == [
        "night",
        "night",
        "1:c4->24",
        "midday",
        "midday",
    ]


def test_held_by_phase_sets_the_engines_beside_the_client_and_the_day() -> None:
    engine = [(t, 3.0 if t <= 10 else 20.0) for t in (5.0, 10.0, 15.0, 20.0, 25.0, 30.0)]
    phases, day = held_by_phase(TRACE, lambda a, b: 0.9 * (b - a), engine)
    night, ramp, midday = phases
    assert (night.wanted, night.client, night.engine) == pytest.approx((4.0, 9.0, 3.0))
    assert ramp.wanted == pytest.approx(14.0, abs=0.2)
    assert midday.engine == pytest.approx(20.0) and midday.engine_share == pytest.approx(20 / 24)
    assert day.phase == "whole day" and day.wanted == pytest.approx((40 + 140 + 240) / 30, abs=0.1)
    empty, _ = held_by_phase(TRACE, lambda a, b: 0.0, [])
    assert empty[0].engine is None and empty[0].engine_share is None


async def test_the_driver_keeps_the_requests_time_in_flight() -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.2)
        return web.json_response({"choices": []})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", slow)
    server = TestServer(app)
    await server.start_server()
    try:
        driver = ConcurrencyDriver(str(server.make_url("/")), "m", lambda t: 3)
        await driver.run(1.0, tick_s=0.05)
    finally:
        await server.close()
    assert driver.failed == 0 and driver.completed >= 9
    # Three workers, each with a request in flight all along but for the gaps between.
    assert driver.held(0.2, 1.0) == pytest.approx(3.0, rel=0.1)
    assert driver.held(1.0, 1.0) == 0.0
