"""The load a policy optimises for: how the number of running requests is distributed.

The mean batch size hides what matters: a speculative config that wins at the median
can lose badly in the busy tail, so the policy takes an expected value over the whole
distribution. Weights are fractions of time spent at each batch size (idle time, batch
0, is left out: there is nothing to decode then).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["BatchDistribution"]


@dataclass(frozen=True)
class BatchDistribution:
    """Sorted ``(batch, weight)`` pairs with positive batches and weights summing to 1."""

    weights: tuple[tuple[int, float], ...]
    samples: int = 0

    def __post_init__(self) -> None:
        if not self.weights:
            raise ValueError("a batch-size distribution needs at least one batch size > 0")
        previous = 0
        for batch, weight in self.weights:
            if batch <= previous:
                raise ValueError("batch sizes must be positive, sorted and distinct")
            if weight <= 0:
                raise ValueError(f"weight of batch {batch} must be > 0, got {weight}")
            previous = batch
        total = sum(w for _, w in self.weights)
        if not math.isclose(total, 1.0, rel_tol=1e-6):
            raise ValueError(f"weights must sum to 1, got {total}")

    @classmethod
    def from_samples(cls, batches: Iterable[int]) -> BatchDistribution:
        """From equally spaced samples of the running-request count; zeros (idle) are dropped."""
        counts = Counter(b for b in batches if b > 0)
        if not counts:
            raise ValueError("no sample had a running request: the load is unknown")
        return cls.from_weights(counts, samples=sum(counts.values()))

    @classmethod
    def from_weights(cls, weights: Mapping[int, float], samples: int = 0) -> BatchDistribution:
        positive = {b: float(w) for b, w in weights.items() if b > 0 and w > 0}
        total = sum(positive.values())
        if total <= 0:
            raise ValueError("no batch size > 0 has a positive weight: the load is unknown")
        return cls(tuple((b, positive[b] / total) for b in sorted(positive)), samples)

    @classmethod
    def constant(cls, batch: int) -> BatchDistribution:
        return cls(((batch, 1.0),))

    def mix(self, other: BatchDistribution, weight: float) -> BatchDistribution:
        """``(1 - weight) * self + weight * other``: a running average over windows."""
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"mix weight must be in [0, 1], got {weight}")
        merged: dict[int, float] = {}
        for batch, w in self.weights:
            merged[batch] = merged.get(batch, 0.0) + (1.0 - weight) * w
        for batch, w in other.weights:
            merged[batch] = merged.get(batch, 0.0) + weight * w
        return BatchDistribution.from_weights(merged, samples=self.samples + other.samples)

    @property
    def mean(self) -> float:
        return sum(b * w for b, w in self.weights)

    @property
    def max_batch(self) -> int:
        return self.weights[-1][0]

    @property
    def busiest(self) -> int:
        """The batch size the engine spent the most time at."""
        return max(self.weights, key=lambda w: w[1])[0]

    def quantile(self, q: float) -> int:
        """The smallest batch size with at least ``q`` of the weight at or below it."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], got {q}")
        cumulative = 0.0
        for batch, weight in self.weights:
            cumulative += weight
            if cumulative >= q - 1e-12:
                return batch
        return self.max_batch

    def cdf(self, batch: float) -> float:
        """Share of the weight at batch sizes <= ``batch``."""
        return sum(w for b, w in self.weights if b <= batch)

    def shift_distance(self, other: BatchDistribution, slack: float = 0.0) -> float:
        """Kolmogorov-Smirnov distance that ignores moves within a factor ``1 + slack``.

        The largest share of weight that sits more than the slack away from where the
        other distribution has it, in [0, 1]; with no slack it is the plain KS distance.
        A steady load wobbling between batch 31 and 33 is no new regime, a move from 32 to
        64 is, which the plain KS distance (1.0 for both) cannot tell apart.
        """
        if slack < 0:
            raise ValueError(f"slack must be >= 0, got {slack}")
        stretch = 1.0 + slack
        ahead = max(other.cdf(b) - self.cdf(b * stretch) for b, _ in other.weights)
        behind = max(self.cdf(b) - other.cdf(b * stretch) for b, _ in self.weights)
        return max(ahead, behind, 0.0)

    def describe(self) -> str:
        return f"median batch {self.quantile(0.5)}, p90 {self.quantile(0.9)}, mean {self.mean:.1f}"
