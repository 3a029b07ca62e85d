"""How many tokens one verification step emits, from acceptance measurements.

A step with k draft tokens emits the accepted prefix plus one bonus token, so the
expected count is E(k) = 1 + sum_{i<k} a_i, where a_i is the fraction of drafts whose
i-th token was accepted (vLLM's per-position counter divided by the number of drafts).
With a constant per-token acceptance alpha this is the geometric sum
(1 - alpha**(k+1)) / (1 - alpha). Never 1 / (1 - alpha * k).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "AcceptanceCurve",
    "expected_tokens_geometric",
]


def expected_tokens_geometric(alpha: float, k: int) -> float:
    """E(k) for a constant per-token acceptance ``alpha`` in [0, 1]: between 1 and k + 1."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass(frozen=True)
class AcceptanceCurve:
    """Unconditional per-position acceptance a_0 >= a_1 >= ... measured up to some k.

    Positions beyond the measured ones are extrapolated with the last conditional rate
    a_{i}/a_{i-1}: drafts past the configured k were never verified, so the tail is a
    model, and ``measured_positions`` says where the data ends.
    """

    rates: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.rates:
            raise ValueError("an acceptance curve needs at least one position")
        previous = 1.0
        for i, rate in enumerate(self.rates):
            if not 0.0 <= rate <= previous + 1e-9:
                raise ValueError(
                    f"acceptance at position {i} must be in [0, {previous:.4f}] "
                    f"(non-increasing), got {rate}"
                )
            previous = rate

    @classmethod
    def geometric(cls, alpha: float, positions: int) -> AcceptanceCurve:
        """The curve of a constant per-token acceptance ``alpha``."""
        return cls(tuple(alpha ** (i + 1) for i in range(positions)))

    @classmethod
    def from_counters(
        cls, num_drafts: float, accepted_per_position: Sequence[float]
    ) -> AcceptanceCurve:
        """From vLLM's counters: ``..._per_pos{position=i}`` divided by ``num_drafts``."""
        if num_drafts <= 0:
            raise ValueError("no drafts were observed, acceptance is unknown")
        clipped: list[float] = []
        previous = 1.0
        for accepted in accepted_per_position:
            rate = min(max(accepted / num_drafts, 0.0), previous)
            clipped.append(rate)
            previous = rate
        return cls(tuple(clipped))

    @property
    def measured_positions(self) -> int:
        return len(self.rates)

    def extended(self, longer: AcceptanceCurve) -> AcceptanceCurve:
        """This curve, then past its positions the conditional rates a_i / a_{i-1} that
        ``longer`` measured there: a window at a short k reaches only its first positions,
        and the chance of accepting one more token past them is the workload's, so what a
        longer k measured before is kept rather than extrapolated from the last position."""
        rates = list(self.rates)
        for i in range(len(rates), longer.measured_positions):
            before = longer.rates[i - 1]
            rates.append(rates[-1] * (longer.rates[i] / before if before > 0 else 0.0))
        return AcceptanceCurve(tuple(rates))

    def conditional_tail(self) -> float:
        """P(token i accepted | token i-1 accepted) at the last measured position."""
        if len(self.rates) == 1:
            return self.rates[0]
        before = self.rates[-2]
        return self.rates[-1] / before if before > 0 else 0.0

    def rate(self, position: int) -> float:
        """a_position, extrapolated geometrically past the measured positions."""
        if position < 0:
            raise ValueError(f"position must be >= 0, got {position}")
        if position < len(self.rates):
            return self.rates[position]
        extra = position - len(self.rates) + 1
        return self.rates[-1] * self.conditional_tail() ** extra

    def expected_tokens(self, k: int) -> float:
        """E(k) = 1 + sum_{i<k} a_i, bonus token included; E(0) = 1."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        return 1.0 + sum(self.rate(i) for i in range(k))

    def lower_bound(self, drafts: int, z: float) -> AcceptanceCurve:
        """Each rate lowered by ``z`` binomial standard errors over ``drafts`` observations.

        A policy that trusts a few hundred drafts as much as a million drafts retunes on
        noise; shading the curve by its uncertainty keeps a thin measurement from
        justifying a longer k.
        """
        if drafts <= 0:
            raise ValueError("no drafts were observed, acceptance is unknown")
        if z < 0:
            raise ValueError(f"z must be >= 0, got {z}")
        lowered: list[float] = []
        previous = 1.0
        for rate in self.rates:
            shaded = max(rate - z * math.sqrt(rate * (1.0 - rate) / drafts), 0.0)
            lowered.append(min(shaded, previous))
            previous = lowered[-1]
        return AcceptanceCurve(tuple(lowered))

    def mean_acceptance_length(self) -> float:
        """vLLM's "mean acceptance length" at the measured k: 1 + accepted / drafts."""
        return self.expected_tokens(len(self.rates))
