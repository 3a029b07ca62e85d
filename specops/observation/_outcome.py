"""Latency quantiles from the increase of a cumulative histogram, as PromQL computes them.

:func:`histogram_quantile` is Prometheus's algorithm: find the bucket holding rank
q * count and interpolate linearly inside it, assuming the lowest bucket starts at 0;
a rank in the +Inf bucket answers the highest finite bound. The error against the true
quantile is therefore at most the width of the bucket it falls in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specops.observation._snapshot import Histogram

__all__ = [
    "LatencyQuantiles",
    "histogram_quantile",
    "latency_quantiles",
]


@dataclass(frozen=True, slots=True)
class LatencyQuantiles:
    observations: float
    mean: float
    p50: float
    p90: float
    p99: float


def _quantile(q: float, histogram: Histogram, total: float) -> float:
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in zip(histogram.bounds, histogram.cumulative, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound


def histogram_quantile(q: float, histogram: Histogram) -> float | None:
    """The q-quantile of the observations in ``histogram``; None when it has none."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    total = histogram.cumulative[-1]
    return _quantile(q, histogram, total) if total > 0 else None


def latency_quantiles(histogram: Histogram) -> LatencyQuantiles | None:
    """p50/p90/p99 and the mean of a histogram's observations; None when it has none."""
    total = histogram.cumulative[-1]
    if histogram.count <= 0 or total <= 0:
        return None
    return LatencyQuantiles(
        observations=histogram.count,
        mean=histogram.total / histogram.count,
        p50=_quantile(0.5, histogram, total),
        p90=_quantile(0.9, histogram, total),
        p99=_quantile(0.99, histogram, total),
    )
