"""Where readings come from: the engine's own ``/metrics``, or Prometheus's HTTP API.

A source is anything with ``kind``, ``target`` and an async ``read()`` returning the
:class:`~specops.observation.Reading` objects taken since the last call, oldest first (none
when there is nothing new; many when Prometheus kept scrapes this source has not seen). Both
read through an injected :class:`HttpGet`, so this package holds no HTTP client: the sidecar
passes one over an ``aiohttp.ClientSession``, since its server already loads aiohttp and
httpx would add its own import tree (and an SSL context) to every pod; the operator, which
uses httpx anyway, passes one over an ``httpx.AsyncClient``; tests pass a plain function.
Every failure is a :class:`MetricsError` whose message starts with a stable cause, then
``": "`` and the detail, so the shell can log once per cause.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Literal, Protocol

from specops.errors import MetricsError
from specops.observation._series import (
    Reading,
    parse_exposition,
    parse_prometheus_matrix,
    prometheus_selector,
)

__all__ = [
    "MAX_ANSWER_BYTES",
    "EngineMetricsSource",
    "HttpGet",
    "MetricsSource",
    "PrometheusSource",
    "too_large",
]


# The most a metrics answer may hold: a vLLM page of many engines is a few MB, a service's
# first Prometheus range read a few more. A larger one is refused unread, not parsed.
MAX_ANSWER_BYTES = 16 * 1024 * 1024


def too_large(url: str) -> MetricsError:
    """The error for an answer past :data:`MAX_ANSWER_BYTES`."""
    return MetricsError(f"{url} answered more than {MAX_ANSWER_BYTES} bytes; refused unread")


class HttpGet(Protocol):
    """GET ``url`` with the query ``params``: the answer's status and text.

    A server that cannot be read is a :class:`MetricsError`, ``"cannot reach <url>: ..."``
    or ``"timed out reading <url>: ..."``, and so is an answer past
    :data:`MAX_ANSWER_BYTES` (:func:`too_large`); a redirect is an answer like any other.
    """

    def __call__(
        self, url: str, params: Mapping[str, str] | None = None
    ) -> Awaitable[tuple[int, str]]: ...


class MetricsSource(Protocol):
    @property
    def kind(self) -> Literal["direct", "prometheus"]: ...

    @property
    def target(self) -> str: ...

    async def read(self) -> Sequence[Reading]: ...


class EngineMetricsSource:
    """Scrapes the engine's ``/metrics``; a reading is stamped with the local clock."""

    kind: Literal["direct"] = "direct"

    def __init__(
        self,
        engine_url: str,
        get: HttpGet,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._url = engine_url.rstrip("/") + "/metrics"
        self._get = get
        self._clock = clock

    @property
    def target(self) -> str:
        return self._url

    async def read(self) -> Sequence[Reading]:
        status, text = await self._get(self._url)
        if status != 200:
            raise MetricsError(f"engine answered HTTP {status}: {text[:200]!r}")
        return [parse_exposition(text, self._clock())]


class PrometheusSource:
    """Asks Prometheus for the scrapes of the matched vLLM series that are new since last time.

    The query is a range selector (``<selector>[lookback]``) so that each sample keeps
    its scrape timestamp: consecutive readings then measure exactly the time between
    Prometheus's scrapes, and a scrape already read is no new data. The first query looks
    back ``history_s`` instead, so a reader started late (an operator that restarted or
    took over) gets the scrapes of a whole window at once rather than waiting one out.
    """

    kind: Literal["prometheus"] = "prometheus"

    def __init__(
        self,
        prometheus_url: str,
        matchers: Mapping[str, str] | Sequence[tuple[str, str, str]],
        get: HttpGet,
        lookback_s: float = 60.0,
        history_s: float = 0.0,
    ) -> None:
        self._url = prometheus_url.rstrip("/") + "/api/v1/query"
        self._selector = prometheus_selector(matchers)
        self._lookback_s = int(lookback_s)
        self._history_s = max(int(history_s), self._lookback_s)
        self._get = get
        self._last: float | None = None

    def _query(self, lookback_s: int) -> str:
        return f"{self._selector}[{lookback_s}s]"

    @property
    def target(self) -> str:
        return f"{self._url}?query={self._query(self._lookback_s)}"

    @property
    def last(self) -> float | None:
        """The scrape time of the newest reading returned, None before the first."""
        return self._last

    def advance(self, to: float) -> None:
        """The scrapes up to ``to`` were read elsewhere (one query for many services):
        the next read returns only newer ones."""
        self._last = to if self._last is None else max(self._last, to)

    async def read(self) -> Sequence[Reading]:
        query = self._query(self._history_s if self._last is None else self._lookback_s)
        status, text = await self._get(self._url, {"query": query})
        try:
            payload = json.loads(text)
        except ValueError as exc:
            raise MetricsError(f"Prometheus answered HTTP {status} without JSON: {exc}") from exc
        readings = parse_prometheus_matrix(payload, after=self._last, stale_s=self._lookback_s)
        if readings is None:
            raise MetricsError(
                f"no series in Prometheus: nothing matches {query} (pod not scraped?)"
            )
        if readings:
            self._last = readings[-1].timestamp
        return readings
