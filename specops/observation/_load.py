"""Distributions of gauges sampled once per reading (running, waiting, KV-cache usage).

The controller needs the shape of the load, not only its mean: a crossover at B = 24
means something else for a pod that sits at 20 than for one that swings from 2 to 40.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "RUNNING_BOUNDS",
    "Distribution",
    "distribution",
    "quantile",
]

# Bucket upper bounds for running requests per engine: one a batch size up to 256, where
# crossovers sit, then every 8 up to 512. A bucket's samples are spread evenly over its
# batch sizes when the controller reads the load, so a coarse bucket moves them: a pod that
# runs 127 requests all the time, in a bucket of 97-128, was read as a mean batch of 112,
# and every step time and TPOT predicted for it 10 % short.
RUNNING_BOUNDS: tuple[float, ...] = (
    *range(257), *range(264, 513, 8), 1024, math.inf,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Distribution:
    """Sample statistics and a cumulative histogram (fraction of samples <= each bound)."""

    samples: int
    mean: float
    p50: float
    p90: float
    p99: float
    maximum: float
    bounds: tuple[float, ...]
    cumulative_fractions: tuple[float, ...]


def quantile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of ascending ``ordered`` values (a value that was observed)."""
    if not ordered:
        raise ValueError("quantile of no samples")
    rank = max(math.ceil(q * len(ordered)), 1)
    return ordered[rank - 1]


def distribution(values: Sequence[float], bounds: Sequence[float]) -> Distribution | None:
    """The distribution of ``values``; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    cumulative: list[float] = []
    index = 0
    for bound in bounds:
        while index < n and ordered[index] <= bound:
            index += 1
        cumulative.append(index / n)
    # Only the bounds where the share changes, and the one before each change, are kept:
    # the buckets left out hold no sample, so the histogram says the same in fewer numbers
    # (a steady load fills a handful of the many fine buckets).
    last = len(bounds) - 1
    kept = [
        i
        for i in range(len(bounds))
        if i in (0, last)
        or cumulative[i] != cumulative[i - 1]
        or cumulative[i + 1] != cumulative[i]
    ]
    return Distribution(
        samples=n,
        mean=sum(ordered) / n,
        p50=quantile(ordered, 0.5),
        p90=quantile(ordered, 0.9),
        p99=quantile(ordered, 0.99),
        maximum=ordered[-1],
        bounds=tuple(bounds[i] for i in kept),
        cumulative_fractions=tuple(cumulative[i] for i in kept),
    )
