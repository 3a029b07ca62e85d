"""How far one request's TPOT strays from the mean a config predicts.

Goodput counts the tokens of requests whose own TPOT meets the target. A prediction at
the mean alone makes that all or nothing per batch size: a config just under the target
looks as good as one far under it, though many of its requests miss. Requests differ in
how often their drafts are accepted, so the spread grows with k: a request's TPOT is the
step time over the tokens its own drafts gain a step. On a log scale its standard
deviation is modelled as

    sigma(k)**2 = base**2 + (heterogeneity * g(k))**2
    g(k) = sum_{i<k} (i + 1) a_i / E(k)

``g(k)`` is d ln E(k) / d eps when each per-token acceptance of a request is scaled by
(1 + eps): the acceptance curve says how much k's tokens a step move when a request is
easier or harder than the average. ``base`` spreads requests without speculation (the
batch and the prefills sharing steps over a request's life). A request's TPOT is taken
as log-normal around the predicted mean.

Both terms start at a prior and are measured from vLLM's request TPOT histogram over a
window, at the config then in force (a posterior on a grid: a histogram whose requests
all fall in one bucket moves it little, one that straddles bucket bounds pins it down).

The log-normal's mean is the window's, or below it: requests it does not describe (those
that straddled a restart, a burst, a load that moved within the window) are slower, and
pull the window's mean up without widening the others' spread. Held at the window's mean,
a log-normal cannot fit such a histogram with any spread, and the fit ran to the widest
(in one run on the benchmark's H100 ramp, 506 requests under 25 ms and 221 between 25
and 50 ms, mean 25.5 ms, read as a heterogeneity of 0.58, against 0.05-0.17 in the
windows around it). So the posterior weighs two models by their evidence: the mean held,
and the mean free to lie up to ``_SHIFT_TOP`` (on a log scale) below the window's. A
histogram the held mean fits keeps it (the free one pays for its extra freedom); one it
cannot fit gives way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from specops.policy._acceptance import AcceptanceCurve

__all__ = ["TpotHistogram", "TpotSpread", "acceptance_sensitivity", "share_within"]

_GRID = 61
_GRID_TOP = 0.6
_STRAY = 0.02
_SHIFTS = 21
_SHIFT_TOP = 0.3


def acceptance_sensitivity(curve: AcceptanceCurve, k: int) -> float:
    """g(k): the relative change of E(k) per relative change of a request's acceptance."""
    if k <= 0:
        return 0.0
    weighted = sum((i + 1) * curve.rate(i) for i in range(k))
    return weighted / curve.expected_tokens(k)


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def share_within(mean_s: float, target_s: float, sigma: float) -> float:
    """Share of requests with TPOT <= ``target_s`` when TPOT is log-normal with mean
    ``mean_s`` and log standard deviation ``sigma`` (0: all or none)."""
    if mean_s <= 0:
        return 1.0
    if sigma <= 0:
        return 1.0 if mean_s <= target_s else 0.0
    return _normal_cdf((math.log(target_s / mean_s) + sigma * sigma / 2.0) / sigma)


@dataclass(frozen=True)
class TpotHistogram:
    """A window's request TPOT histogram: finite bucket bounds, the requests at or below
    each (cumulative), all requests, and their mean TPOT."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float
    mean_s: float

    def __post_init__(self) -> None:
        if len(self.bounds) != len(self.cumulative):
            raise ValueError("a TPOT histogram needs one cumulative count per bound")

    @classmethod
    def from_fractions(
        cls, bounds: Sequence[float], fractions: Sequence[float], count: float, mean_s: float
    ) -> TpotHistogram:
        """From a histogram's cumulative fractions of its ``count`` requests."""
        return cls(tuple(bounds), tuple(f * count for f in fractions), count, mean_s)

    def plus(self, other: TpotHistogram) -> TpotHistogram:
        """Two pods' histograms of the same buckets as one."""
        if self.bounds != other.bounds:
            raise ValueError("TPOT histograms with different buckets cannot be added")
        count = self.count + other.count
        mean = (self.mean_s * self.count + other.mean_s * other.count) / count if count else 0.0
        return TpotHistogram(
            self.bounds,
            tuple(a + b for a, b in zip(self.cumulative, other.cumulative, strict=True)),
            count,
            mean,
        )

    def log_likelihood(self, sigma: float, shift: float = 0.0) -> float:
        """Of the bucket counts, for a log-normal TPOT whose mean is this histogram's over
        ``exp(shift)``.

        Requests slower than twice the mean are counted together, and a share ``_STRAY``
        of all requests may be among them whatever the spread: a few requests straddle a
        restart or a burst and take many times the others' TPOT, and they must not
        stretch the spread of all the others.
        """
        cut = next((i for i, b in enumerate(self.bounds) if b >= 2.0 * self.mean_s), None)
        kept = self.bounds if cut is None else self.bounds[:cut]
        mean = self.mean_s * math.exp(-shift)
        total = 0.0
        below_count, below_share = 0.0, 0.0
        for bound, cumulative in zip(kept, self.cumulative, strict=False):
            share = share_within(mean, bound, sigma)
            chance = (1.0 - _STRAY) * (share - below_share)
            total += (cumulative - below_count) * math.log(max(chance, 1e-300))
            below_count, below_share = cumulative, share
        chance = (1.0 - _STRAY) * (1.0 - below_share) + _STRAY
        return total + (self.count - below_count) * math.log(chance)


@dataclass(frozen=True)
class TpotSpread:
    """The two terms of a request's log TPOT spread; ``measured_from`` counts the requests
    behind them (0: both are the prior)."""

    base: float = 0.05
    heterogeneity: float = 0.15
    measured_from: float = 0.0

    def __post_init__(self) -> None:
        if self.base < 0 or self.heterogeneity < 0:
            raise ValueError("TPOT spread terms must be >= 0")

    def sigma(self, curve: AcceptanceCurve, k: int) -> float:
        g = acceptance_sensitivity(curve, k)
        return math.hypot(self.base, self.heterogeneity * g)

    def measured(
        self, histogram: TpotHistogram | None, curve: AcceptanceCurve | None, k: int
    ) -> TpotSpread:
        """The term the window's config shows, moved by its histogram; the other kept.

        Speculation off (or no acceptance to weigh k by) shows ``base``; any k shows the
        heterogeneity beside the base. Each grid point is weighed by a prior as wide as
        the current value, so a histogram that cannot tell the terms apart leaves them.
        """
        if histogram is None or histogram.count <= 0 or histogram.mean_s <= 0:
            return self
        g = acceptance_sensitivity(curve, k) if curve is not None else 0.0
        if g <= 0:
            base = _posterior_mean(self.base, histogram.log_likelihood)
            return replace(self, base=base, measured_from=histogram.count)
        heterogeneity = _posterior_mean(
            self.heterogeneity,
            lambda v, shift: histogram.log_likelihood(math.hypot(self.base, v * g), shift),
        )
        return replace(self, heterogeneity=heterogeneity, measured_from=histogram.count)

    def describe(self) -> str:
        source = (
            f"measured from {self.measured_from:.0f} requests"
            if self.measured_from > 0
            else "the prior"
        )
        return (
            f"per-request TPOT log spread, base {self.base:.2f} and acceptance "
            f"heterogeneity {self.heterogeneity:.2f} ({source})"
        )


def _posterior_mean(prior: float, log_likelihood: Callable[[float, float], float]) -> float:
    """The mean on a grid over [0, 0.6] under a half-normal prior of scale ``prior``, over
    the two models of the log-normal's mean (held at the window's, or free below it), each
    weighed by its evidence; ``log_likelihood`` takes a grid value and the mean's shift."""
    scale = max(prior, 0.02)
    grid = [_GRID_TOP * i / (_GRID - 1) for i in range(_GRID)]
    shifts = [_SHIFT_TOP * i / (_SHIFTS - 1) for i in range(_SHIFTS)]
    held: list[float] = []
    free: list[float] = []
    for v in grid:
        prior_log = -0.5 * (v / scale) ** 2
        at_shifts = [log_likelihood(v, shift) for shift in shifts]
        held.append(at_shifts[0] + prior_log)  # the first shift is 0: the mean held
        free.append(_log_mean_exp(at_shifts) + prior_log)
    top = max(*held, *free)
    weights = [math.exp(h - top) + math.exp(f - top) for h, f in zip(held, free, strict=True)]
    return sum(v * w for v, w in zip(grid, weights, strict=True)) / sum(weights)


def _log_mean_exp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(x - top) for x in values) / len(values))
