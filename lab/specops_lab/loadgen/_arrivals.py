"""Open-loop arrival times: Poisson at a fixed rate, or following a trace of rate over time."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

__all__ = ["RatePoint", "poisson_arrivals", "trace_arrivals"]

RatePoint = tuple[float, float]
"""(start second, requests per second from then on)."""


def poisson_arrivals(rate: float, duration_s: float, *, seed: int = 0) -> list[float]:
    """Arrival times in [0, duration_s) of a Poisson process with ``rate`` per second."""
    return trace_arrivals([(0.0, rate)], duration_s, seed=seed)


def trace_arrivals(trace: Sequence[RatePoint], duration_s: float, *, seed: int = 0) -> list[float]:
    """A Poisson process whose rate is piecewise constant: ``trace`` sorted by start, from 0."""
    if not trace or trace[0][0] != 0.0 or any(a[0] >= b[0] for a, b in pairwise(trace)):
        raise ValueError("a rate trace starts at 0 s and its start times increase")
    if any(rate < 0 for _, rate in trace):
        raise ValueError("rates must be >= 0")
    rng = np.random.default_rng(seed)
    arrivals: list[float] = []
    ends = [start for start, _ in trace[1:]] + [duration_s]
    for (start, rate), end in zip(trace, ends, strict=True):
        end = min(end, duration_s)
        if rate == 0 or end <= start:
            continue
        count = int(rng.poisson((end - start) * rate))
        arrivals += sorted(float(t) for t in rng.uniform(start, end, count))
    return arrivals
