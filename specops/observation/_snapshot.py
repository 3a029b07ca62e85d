"""vLLM's counters at one instant, and their increase between two instants.

A :class:`Snapshot` sums vLLM's series over engines (and over pods, for a whole
service); an :class:`Interval` is the increase between two snapshots. A counter that went
down means the engine restarted: like Prometheus's ``increase()``, the interval then
counts the new value from zero, and it is marked ``reset`` so that wall-time based
estimates skip it. NaN and infinite values are dropped, so a broken series reads as
missing instead of poisoning a sum, and every impossible value is kept as a problem.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from specops.observation._names import (
    ACCEPTED_PER_POSITION,
    CACHE_CONFIG_INFO,
    SUMMED_GAUGES,
    Counter,
    Gauge,
    Hist,
)
from specops.observation._series import Reading
from specops.observation._validity import reading_problems

__all__ = [
    "Histogram",
    "Interval",
    "Snapshot",
    "interval_between",
    "intervals_of",
    "snapshot_from_reading",
]


_COUNTERS = {c.value: c for c in Counter}
_GAUGES = {g.value: g for g in Gauge}
_HIST_PARTS = {
    f"{h.value}{suffix}": (h, suffix) for h in Hist for suffix in ("_bucket", "_count", "_sum")
}


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative histogram: ascending upper bounds (the last is +Inf) and counts."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float
    total: float

    def went_down_from(self, earlier: Histogram) -> bool:
        return self.count < earlier.count or any(
            now < before for now, before in zip(self.cumulative, earlier.cumulative, strict=False)
        )

    def minus(self, earlier: Histogram) -> Histogram | None:
        """The observations made since ``earlier``; None when the buckets changed."""
        if self.bounds != earlier.bounds:
            return None
        return Histogram(
            self.bounds,
            tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
            self.count - earlier.count,
            self.total - earlier.total,
        )

    def plus(self, other: Histogram) -> Histogram | None:
        if self.bounds != other.bounds:
            return None
        return Histogram(
            self.bounds,
            tuple(a + b for a, b in zip(self.cumulative, other.cumulative, strict=True)),
            self.count + other.count,
            self.total + other.total,
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """vLLM's values at ``timestamp``, summed over engines; absent keys were missing or NaN."""

    timestamp: float
    engines: int
    counters: Mapping[Counter, float] = field(default_factory=dict)
    accepted_per_position: tuple[float, ...] = ()
    histograms: Mapping[Hist, Histogram] = field(default_factory=dict)
    gauges: Mapping[Gauge, float] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    """Values no engine reports (negative, NaN, a usage above 1), as messages."""
    kv_capacity_tokens: float | None = None
    """KV-cache tokens per engine, the pool its usage is a share of, as the engines report
    it (cache_config_info: num_gpu_blocks x block_size, their mean); None where none does."""


@dataclass(frozen=True, slots=True)
class Interval:
    """What happened between two snapshots; keys absent from either side are left out."""

    start: float
    end: float
    reset: bool
    engines: int
    counters: Mapping[Counter, float]
    accepted_per_position: tuple[float, ...]
    histograms: Mapping[Hist, Histogram]
    gauges_at_start: Mapping[Gauge, float]
    gauges_at_end: Mapping[Gauge, float]

    @property
    def seconds(self) -> float:
        return self.end - self.start


def _histogram(
    buckets: Mapping[float, float], count: float | None, total: float | None
) -> Histogram | None:
    if not buckets or count is None or total is None:
        return None
    bounds = tuple(sorted(buckets))
    if bounds[-1] != math.inf:
        return None
    return Histogram(bounds, tuple(buckets[b] for b in bounds), count, total)


def _engine_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _kv_pool_tokens(labels: Mapping[str, str]) -> int | None:
    """An engine's KV pool in tokens from its cache_config_info labels; None before the
    engine has sized it (num_gpu_blocks "None") or where a label is missing."""
    blocks, size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
    if not (blocks.isdigit() and size.isdigit()):
        return None
    return int(blocks) * int(size) or None


def _kv_pool(reading: Reading) -> float | None:
    """The engines' mean KV pool in tokens; None where none reports it."""
    pools = [
        pool
        for s in reading.series
        if s.name == CACHE_CONFIG_INFO and (pool := _kv_pool_tokens(s.labels)) is not None
    ]
    return sum(pools) / len(pools) if pools else None


def snapshot_from_reading(reading: Reading) -> Snapshot:
    """Sum a reading's vLLM series into a snapshot (pure; unknown series are ignored)."""
    counters: dict[Counter, float] = defaultdict(float)
    per_position: dict[int, float] = defaultdict(float)
    gauge_sums: dict[Gauge, float] = defaultdict(float)
    gauge_counts: dict[Gauge, int] = defaultdict(int)
    buckets: dict[Hist, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[Hist, float] = defaultdict(float)
    sums: dict[Hist, float] = defaultdict(float)
    engines: set[tuple[tuple[str, str], ...]] = set()
    for s in reading.series:
        if not math.isfinite(s.value):
            continue
        if (counter := _COUNTERS.get(s.name)) is not None:
            counters[counter] += s.value
        elif (gauge := _GAUGES.get(s.name)) is not None:
            gauge_sums[gauge] += s.value
            gauge_counts[gauge] += 1
            if gauge is Gauge.RUNNING:
                engines.add(_engine_key(s.labels))
        elif (part := _HIST_PARTS.get(s.name)) is not None:
            hist, suffix = part
            if suffix == "_bucket":
                buckets[hist][float(s.labels.get("le", "nan"))] += s.value
            elif suffix == "_count":
                counts[hist] += s.value
            else:
                sums[hist] += s.value
        elif s.name == ACCEPTED_PER_POSITION and s.labels.get("position", "").isdigit():
            per_position[int(s.labels["position"])] += s.value
    gauges = {
        g: (total if g in SUMMED_GAUGES else total / gauge_counts[g])
        for g, total in gauge_sums.items()
    }
    positions = sorted(per_position)
    contiguous = positions == list(range(len(positions)))
    histograms = {
        h: found
        for h in Hist
        if (found := _histogram(buckets.get(h, {}), counts.get(h), sums.get(h))) is not None
    }
    return Snapshot(
        timestamp=reading.timestamp,
        engines=max(len(engines), 1),
        counters=dict(counters),
        accepted_per_position=tuple(per_position[p] for p in positions) if contiguous else (),
        histograms=histograms,
        gauges=gauges,
        problems=reading_problems(reading),
        kv_capacity_tokens=_kv_pool(reading),
    )


def _went_down(before: Snapshot, after: Snapshot) -> bool:
    if any(after.counters[c] < v for c, v in before.counters.items() if c in after.counters):
        return True
    if len(before.accepted_per_position) == len(after.accepted_per_position) and any(
        a < b
        for a, b in zip(after.accepted_per_position, before.accepted_per_position, strict=True)
    ):
        return True
    return any(
        after.histograms[h].went_down_from(hist)
        for h, hist in before.histograms.items()
        if h in after.histograms
    )


def _deltas(
    before: Snapshot, after: Snapshot
) -> tuple[dict[Counter, float], tuple[float, ...], dict[Hist, Histogram]]:
    counters = {
        c: v - before.counters[c] for c, v in after.counters.items() if c in before.counters
    }
    same_positions = len(after.accepted_per_position) == len(before.accepted_per_position)
    per_position = (
        tuple(
            a - b
            for a, b in zip(after.accepted_per_position, before.accepted_per_position, strict=True)
        )
        if same_positions
        else ()
    )
    histograms = {
        h: delta
        for h, hist in after.histograms.items()
        if h in before.histograms and (delta := hist.minus(before.histograms[h])) is not None
    }
    return counters, per_position, histograms


def interval_between(before: Snapshot, after: Snapshot) -> Interval:
    """The increase from ``before`` to ``after``, counting from zero across a restart."""
    reset = _went_down(before, after)
    if reset:
        counters, per_position, histograms = (
            dict(after.counters),
            after.accepted_per_position,
            dict(after.histograms),
        )
    else:
        counters, per_position, histograms = _deltas(before, after)
    return Interval(
        start=before.timestamp,
        end=after.timestamp,
        reset=reset,
        engines=after.engines,
        counters=counters,
        accepted_per_position=per_position,
        histograms=histograms,
        gauges_at_start=before.gauges,
        gauges_at_end=after.gauges,
    )


def intervals_of(snapshots: Iterable[Snapshot]) -> list[Interval]:
    """Consecutive intervals of time-ordered snapshots (same-time duplicates skipped)."""
    result: list[Interval] = []
    previous: Snapshot | None = None
    for snapshot in snapshots:
        if previous is not None and snapshot.timestamp > previous.timestamp:
            result.append(interval_between(previous, snapshot))
        if previous is None or snapshot.timestamp > previous.timestamp:
            previous = snapshot
    return result
