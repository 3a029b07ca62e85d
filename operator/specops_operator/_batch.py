"""One Prometheus query a scrape interval for the services of a Prometheus, not one each.

Every service with ``metrics.source: Prometheus`` reads its vLLM series once a scrape
interval. Asked one by one, a fleet of N services sends N queries an interval; here the
services that share a Prometheus (and a lookback) are asked for together, at most once an
interval, in batches of :data:`BATCH_SERVICES` (so that one answer stays far below the
size the operator accepts), and each service takes its own series out of the answer.

A service's first read is its own (it looks back a whole evaluation window); a batch that
failed, or that did not hold the service yet, leaves the service to ask on its own, so the
error it reports is its own query's.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from specops.errors import MetricsError
from specops.observation import (
    HttpGet,
    PrometheusSource,
    Reading,
    parse_prometheus_matrix,
    prometheus_selector,
)
from specops.render import canary_name

__all__ = ["BATCH_SERVICES", "BatchedSource", "PrometheusBatch"]

# Services per query: a service's few pods expose a few dozen series, so an answer for a
# batch over a lookback of a few scrapes is about a megabyte.
BATCH_SERVICES = 50

Key = tuple[str, str]  # (namespace, service)
_Entry = dict[str, Any]  # one series of a matrix answer


def _alternatives(values: Sequence[str]) -> str:
    return "|".join(re.escape(v) for v in sorted(set(values)))


def _canary_pods(names: Sequence[str]) -> str:
    """A regex of the pods of every canary of ``names``: a service's reader never counts
    its canary's pods (they are read apart)."""
    return f"({_alternatives([canary_name(n) for n in names])})-.+"


@dataclass(frozen=True)
class _Answer:
    at: float
    series: dict[Key, list[_Entry]]
    covered: frozenset[Key]


class PrometheusBatch:
    """The services of one Prometheus and lookback, and the last answer for all of them."""

    def __init__(
        self,
        prometheus_url: str,
        lookback_s: int,
        interval_s: float,
        get: HttpGet,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._url = prometheus_url.rstrip("/") + "/api/v1/query"
        self._lookback_s, self._interval_s = lookback_s, interval_s
        self._get, self._clock = get, clock
        self._members: set[Key] = set()
        self._answer: _Answer | None = None
        self._lock = asyncio.Lock()

    def join(self, key: Key) -> None:
        self._members.add(key)

    def leave(self, key: Key) -> None:
        self._members.discard(key)

    @property
    def empty(self) -> bool:
        return not self._members

    async def series(self, key: Key) -> list[_Entry] | None:
        """``key``'s series from an answer at most an interval old (asked now if none is),
        None when that answer does not cover the service."""
        async with self._lock:
            answer = self._answer
            if answer is None or self._clock() - answer.at >= self._interval_s:
                answer = self._answer = await self._ask()
        if key not in answer.covered:
            return None
        return answer.series.get(key, [])

    async def _ask(self) -> _Answer:
        at = self._clock()
        members = sorted(self._members)
        batches = [members[i : i + BATCH_SERVICES] for i in range(0, len(members), BATCH_SERVICES)]
        answers = await asyncio.gather(*(self._query(b) for b in batches), return_exceptions=True)
        series: dict[Key, list[_Entry]] = {}
        covered: set[Key] = set()
        for batch, answered in zip(batches, answers, strict=True):
            if isinstance(answered, MetricsError):
                continue  # its services ask on their own, and report their own error
            if isinstance(answered, BaseException):
                raise answered
            covered.update(batch)
            for entry in answered:
                labels = entry.get("metric") or {}
                key = (str(labels.get("namespace", "")), str(labels.get("service", "")))
                series.setdefault(key, []).append(entry)
        return _Answer(at, series, frozenset(covered))

    async def _query(self, batch: Sequence[Key]) -> list[_Entry]:
        names = [name for _, name in batch]
        selector = prometheus_selector(
            [
                ("namespace", "=~", _alternatives([namespace for namespace, _ in batch])),
                ("service", "=~", _alternatives(names)),
                ("pod", "!~", _canary_pods(names)),
            ]
        )
        status, text = await self._get(self._url, {"query": f"{selector}[{self._lookback_s}s]"})
        try:
            payload = json.loads(text)
        except ValueError as exc:
            raise MetricsError(f"Prometheus answered HTTP {status} without JSON: {exc}") from exc
        data = payload.get("data") if isinstance(payload, dict) else None
        if payload.get("status") != "success" or not isinstance(data, dict):
            raise MetricsError(f"Prometheus answered HTTP {status}: {text[:200]!r}")
        result = data.get("result")
        if data.get("resultType") != "matrix" or not isinstance(result, list):
            raise MetricsError("Prometheus answer has no matrix under data.result")
        return result


class BatchedSource:
    """A service's reader of Prometheus: its first read its own, the later ones out of its
    batch's answer (or its own again when the batch does not cover it)."""

    kind: Literal["prometheus"] = "prometheus"

    def __init__(
        self, own: PrometheusSource, batch: PrometheusBatch, key: Key, lookback_s: int
    ) -> None:
        self._own, self._batch, self._key, self._lookback_s = own, batch, key, lookback_s
        batch.join(key)

    @property
    def target(self) -> str:
        return self._own.target

    async def read(self) -> Sequence[Reading]:
        last = self._own.last
        entries = await self._batch.series(self._key) if last is not None else None
        if entries is None:
            return await self._own.read()
        payload = {"status": "success", "data": {"resultType": "matrix", "result": entries}}
        readings = parse_prometheus_matrix(payload, after=last, stale_s=self._lookback_s)
        if readings is None:
            raise MetricsError(
                f"no series in Prometheus: nothing matches {self._own.target} (pod not scraped?)"
            )
        if readings:
            self._own.advance(readings[-1].timestamp)
        return readings

    def close(self) -> None:
        self._batch.leave(self._key)
