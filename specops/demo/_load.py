"""Closed-loop load whose concurrency follows the trace: worker i keeps one request in flight
while the trace asks for more than i, so the engines see the trace's running requests.

Requests are plain (not streamed) chat completions without ``max_tokens``, so the simulated
engine draws each output length from its workload, as in the virtual-time replay; latency
figures come from the engines' own metrics, which keeps this client cheap on a small machine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

from specops.demo._snapshot import LoadCounts

__all__ = ["ConcurrencyDriver"]

# About 250 prompt tokens for the simulated engine's four-characters-a-token count.
_PROMPT = "Summarise the trade-offs of speculative decoding under load. " * 16


class ConcurrencyDriver:
    """Keeps ``target(elapsed)`` requests in flight against ``url`` until ``duration_s``."""

    def __init__(self, url: str, model: str, target: Callable[[float], int]) -> None:
        self._url = url.rstrip("/") + "/v1/chat/completions"
        self._model = model
        self._target = target
        self._origin = time.monotonic()
        self._workers: dict[int, asyncio.Task[None]] = {}
        self.in_flight = 0
        self.completed = 0
        self.failed = 0
        self.last_error = ""
        self._stopping = False

    def stop(self) -> None:
        """End ``run`` early (from any thread): no new requests, running ones finish."""
        self._stopping = True

    def _going(self, duration_s: float) -> bool:
        return not self._stopping and self.elapsed() < duration_s

    def elapsed(self) -> float:
        return time.monotonic() - self._origin

    def counts(self) -> LoadCounts:
        return LoadCounts(self._target(self.elapsed()), self.in_flight, self.completed, self.failed)

    async def _request(self, client: httpx.AsyncClient) -> None:
        body = {"model": self._model, "messages": [{"role": "user", "content": _PROMPT}]}
        self.in_flight += 1
        try:
            response = await client.post(self._url, json=body)
            ok = response.status_code == 200
            if not ok:
                self.last_error = f"HTTP {response.status_code}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            ok, self.last_error = False, f"{type(exc).__name__}: {exc}"
        finally:
            self.in_flight -= 1
        if ok:
            self.completed += 1
        else:
            self.failed += 1
            await asyncio.sleep(0.5)  # an engine restarting: do not spin

    async def _worker(self, index: int, client: httpx.AsyncClient, duration_s: float) -> None:
        while self._going(duration_s) and index < self._target(self.elapsed()):
            await self._request(client)

    async def run(self, duration_s: float, tick_s: float = 0.25) -> None:
        """Drive the load for ``duration_s`` from now; requests running at the end are awaited."""
        self._origin = time.monotonic()
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=512)
        async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:
            try:
                while self._going(duration_s):
                    want = self._target(self.elapsed())
                    for index in range(want):
                        task = self._workers.get(index)
                        if task is None or task.done():
                            self._workers[index] = asyncio.create_task(
                                self._worker(index, client, duration_s)
                            )
                    await asyncio.sleep(tick_s)
                await asyncio.gather(*self._workers.values())
            finally:
                for task in self._workers.values():
                    task.cancel()
                await asyncio.gather(*self._workers.values(), return_exceptions=True)
