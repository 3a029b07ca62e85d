"""Closed-loop load whose concurrency follows the trace: worker i keeps one request in flight
while the trace asks for more than i, so the engines see the trace's running requests.

Requests are plain (not streamed) chat completions without ``max_tokens``, so the simulated
engine draws each output length from its workload, as in the virtual-time replay; latency
figures come from the engines' own metrics. The client is aiohttp's (the load generator's
own session), which holds hundreds of requests in flight on one core; the driver keeps
when each request was in flight, so the report can set what the client held beside what
the engines held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

from specops_lab.demo._snapshot import LoadCounts
from specops_lab.loadgen import open_session

__all__ = ["ConcurrencyDriver"]

# About 250 prompt tokens for the simulated engine's four-characters-a-token count.
_PROMPT = "Summarise the trade-offs of speculative decoding under load. " * 16


class ConcurrencyDriver:
    """Keeps ``target(elapsed)`` requests in flight against ``url`` until ``duration_s``."""

    def __init__(
        self, url: str, model: str, target: Callable[[float], int], *, connections: int = 1024
    ) -> None:
        self._url = url.rstrip("/") + "/v1/chat/completions"
        self._model = model
        self._target = target
        self._connections = connections
        self._origin = time.monotonic()
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._spans: list[tuple[float, float]] = []
        self._open: dict[int, float] = {}
        self._next_id = 0
        self.completed = 0
        self.failed = 0
        self.last_error = ""
        self._stopping = False

    @property
    def in_flight(self) -> int:
        return len(self._open)

    def stop(self) -> None:
        """End ``run`` early (from any thread): no new requests, running ones finish."""
        self._stopping = True

    def _going(self, duration_s: float) -> bool:
        return not self._stopping and self.elapsed() < duration_s

    def elapsed(self) -> float:
        return time.monotonic() - self._origin

    def counts(self) -> LoadCounts:
        return LoadCounts(self._target(self.elapsed()), self.in_flight, self.completed, self.failed)

    def held(self, start_s: float, end_s: float) -> float:
        """Mean requests in flight between ``start_s`` and ``end_s`` seconds into the run
        (the requests' time in flight over the wall time)."""
        if end_s <= start_s:
            return 0.0
        now = self.elapsed()
        spans = [*self._spans, *((began, now) for began in self._open.values())]
        inside = sum(max(0.0, min(end, end_s) - max(began, start_s)) for began, end in spans)
        return inside / (end_s - start_s)

    async def _request(self, session: aiohttp.ClientSession) -> None:
        body = {"model": self._model, "messages": [{"role": "user", "content": _PROMPT}]}
        key = self._next_id
        self._next_id += 1
        self._open[key] = self.elapsed()
        try:
            async with session.post(self._url, json=body) as response:
                text = await response.read()
                ok = response.status == 200
                if not ok:
                    self.last_error = (
                        f"HTTP {response.status}: {text[:200].decode(errors='replace')}"
                    )
        except (TimeoutError, aiohttp.ClientError) as exc:
            ok, self.last_error = False, f"{type(exc).__name__}: {exc}"
        finally:
            self._spans.append((self._open.pop(key), self.elapsed()))
        if ok:
            self.completed += 1
        else:
            self.failed += 1
            await asyncio.sleep(0.5)  # an engine restarting: do not spin

    async def _worker(self, index: int, session: aiohttp.ClientSession, duration_s: float) -> None:
        while self._going(duration_s) and index < self._target(self.elapsed()):
            await self._request(session)

    async def run(self, duration_s: float, tick_s: float = 0.25) -> None:
        """Drive the load for ``duration_s`` from now; requests running at the end are awaited."""
        self._origin = time.monotonic()
        async with open_session(self._connections) as session:
            try:
                while self._going(duration_s):
                    want = self._target(self.elapsed())
                    for index in range(want):
                        task = self._workers.get(index)
                        if task is None or task.done():
                            self._workers[index] = asyncio.create_task(
                                self._worker(index, session, duration_s)
                            )
                    await asyncio.sleep(tick_s)
                await asyncio.gather(*self._workers.values())
            finally:
                for task in self._workers.values():
                    task.cancel()
                await asyncio.gather(*self._workers.values(), return_exceptions=True)
