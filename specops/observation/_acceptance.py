"""Acceptance over a window: E(k) from the per-position counters, with its uncertainty.

The per-position counters are nested (a draft's token i can only be accepted if token
i-1 was), so they are a chain of conditional proportions c_j = a_j / a_{j-1}, each a
binomial over the drafts that reached position j, and asymptotically independent. The
standard error of E(k) = 1 + sum_{i<k} a_i, a_i = c_0 ... c_i, follows by the delta
method. Past the measured positions the chain continues with the last conditional rate
(the curve's geometric tail), whose error therefore grows with k. The proportions used
for the errors are smoothed by half a draft each way, so a handful of all-accepted
drafts does not claim zero error; every error shrinks as 1 / sqrt(drafts).

Under a per-batch-size table some drafts stop short of the cap, yet every draft counts in
``num_drafts``. With ``reach`` (the share of drafts that proposed position i, from the
table and the load: :func:`specops.policy.draft_reach`) each position is divided by the
drafts that reached it, the one correction the controller makes too; a position no draft
reached is not measured, and E(k) past the reached ones is extrapolated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specops.policy import AcceptanceCurve, acceptance_from_counters

__all__ = [
    "AcceptanceEstimate",
    "ExpectedTokens",
    "estimate_acceptance",
]


@dataclass(frozen=True, slots=True)
class ExpectedTokens:
    """E(k) with its standard error; ``measured`` is False where it is extrapolated."""

    k: int
    value: float
    stderr: float
    measured: bool


@dataclass(frozen=True, slots=True)
class AcceptanceEstimate:
    drafts: float
    curve: AcceptanceCurve
    expected: tuple[ExpectedTokens, ...]


def _conditional_rates(curve: AcceptanceCurve) -> list[float]:
    rates = curve.rates
    return [rates[0]] + [
        rates[j] / rates[j - 1] if rates[j - 1] > 0 else 0.0 for j in range(1, len(rates))
    ]


def _exponents(position: int, measured: int) -> list[int]:
    """How often each conditional rate c_j is a factor of a_position."""
    last = measured - 1
    return [
        (position - last + 1 if position >= last else 0)
        if j == last
        else (1 if position >= j else 0)
        for j in range(measured)
    ]


def _gradient(conditional: Sequence[float], k: int) -> list[float]:
    """d E(k) / d c_j for every measured conditional rate."""
    m = len(conditional)
    gradient = [0.0] * m
    for position in range(k):
        exponents = _exponents(position, m)
        for j, e in enumerate(exponents):
            if e == 0:
                continue
            rest = math.prod(
                c**x for i, (c, x) in enumerate(zip(conditional, exponents, strict=True)) if i != j
            )
            gradient[j] += e * conditional[j] ** (e - 1) * rest
    return gradient


def estimate_acceptance(
    drafts: float,
    accepted_per_position: Sequence[float],
    max_k: int,
    reach: Sequence[float] | None = None,
) -> AcceptanceEstimate:
    """E(0..max_k) from ``drafts`` and the accepted count at each draft position;
    ``reach`` corrects for drafts a per-batch-size table cut short (None: every draft
    proposed every position).

    Raises ValueError when there were no drafts or no positions: acceptance is unknown.
    """
    if not accepted_per_position:
        raise ValueError("no per-position acceptance counters")
    if reach is None:
        reach = [1.0] * len(accepted_per_position)
    curve = acceptance_from_counters(drafts, accepted_per_position, reach)
    m = curve.measured_positions
    conditional = _conditional_rates(curve)
    # The drafts that reached position j with token j-1 accepted: the trials of c_j.
    reached = [drafts * reach[0]] + [
        rate * drafts * share for rate, share in zip(curve.rates[:-1], reach[1:m], strict=True)
    ]
    variances = []
    for c, trials in zip(conditional, reached, strict=True):
        smoothed = (c * trials + 0.5) / (trials + 1.0)
        variances.append(smoothed * (1.0 - smoothed) / (trials + 1.0))
    expected = []
    for k in range(max_k + 1):
        gradient = _gradient(conditional, k)
        stderr = math.sqrt(sum(g * g * v for g, v in zip(gradient, variances, strict=True)))
        expected.append(ExpectedTokens(k, curve.expected_tokens(k), stderr, measured=k <= m))
    return AcceptanceEstimate(drafts=drafts, curve=curve, expected=tuple(expected))
