"""The sidecar's HTTP face (aiohttp): ``/metrics``, ``/v1/observation``, ``/healthz``.

A background task polls the source every interval. ``/healthz`` answers 200 while that
loop runs, whatever the engine's state: a dead engine is reported in the estimates and
``specops_source_up``, and restarting the sidecar would not revive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from specops.observation import OncePerCause, WindowedObserver
from specops_sidecar._exposition import metric_families

__all__ = [
    "build_app",
    "poll_forever",
]

log = logging.getLogger("specops.sidecar")
_LOOP_KEY = web.AppKey("poll_loop", asyncio.Task[None])


class _ObservationCollector(Collector):
    def __init__(self, observer: WindowedObserver, clock: Callable[[], float]) -> None:
        self._observer = observer
        self._clock = clock

    def collect(self) -> Iterable[Metric]:
        now = self._clock()
        return metric_families(self._observer.observation_at(now), now, self._observer.counts)


async def poll_forever(observer: WindowedObserver, interval_s: float) -> None:
    """Poll every ``interval_s`` seconds; a bug in one poll is logged, not fatal."""
    bugs = OncePerCause(log, what="poll", traceback=True)
    while True:
        started = time.monotonic()
        try:
            await observer.poll()
        except Exception as exc:  # the loop must outlive any one poll, even a buggy one
            bugs.failed(exc)
        else:
            bugs.succeeded()
        await asyncio.sleep(max(interval_s - (time.monotonic() - started), 0.0))


def build_app(
    observer: WindowedObserver, interval_s: float, clock: Callable[[], float] = time.time
) -> web.Application:
    """The app; its startup starts the poll loop and its cleanup stops it."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ObservationCollector(observer, clock))

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def observation(_: web.Request) -> web.Response:
        return web.Response(
            text=observer.observation_at(clock()).model_dump_json(), content_type="application/json"
        )

    async def healthz(request: web.Request) -> web.Response:
        alive = not request.app[_LOOP_KEY].done()
        return web.json_response(
            {
                "status": "ok" if alive else "poll loop stopped",
                "source_up": observer.observation.source.up,
            },
            status=200 if alive else 503,
        )

    async def polling(app: web.Application) -> AsyncIterator[None]:
        app[_LOOP_KEY] = asyncio.create_task(poll_forever(observer, interval_s))
        yield
        app[_LOOP_KEY].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await app[_LOOP_KEY]

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/observation", observation)
    app.router.add_get("/healthz", healthz)
    app.cleanup_ctx.append(polling)
    return app
