"""Load regimes: when the load has really changed, and since when.

A restart pays off only over the time the load stays as it is, so the controller needs
to know when the current regime began, and must not mistake noise for a new one. Each
window is compared with a running average of the regime's windows: the batch-size
distribution by a KS distance that ignores moves within a slack factor, the acceptance
by its relative change. Only ``confirmations`` disagreeing windows in a row start a new
regime, dated from the first of them, except a window whose acceptance moved by more than
``decisive_acceptance_shift``: a move that large is the workload's, not noise (a load's
distribution, by contrast, moves that much in a burst that does not last).

A window's acceptance is not as sure as its thousands of drafts make it look: requests
differ (one request's E(3) strays from the mean by 16 % on ShareGPT, 8 % on GSM8K, weighed
by their drafts, in the calibration traces), and a window at low concurrency holds only a
few of them. On the benchmark's 70B truth at one request in flight, windows of about ten
requests moved 10 to 20 % from the regime's average with nothing changed, and each started
or threatened a new regime, whose young age then withheld a change that paid. So both
thresholds stand at least ``2`` and ``3`` times the move such request-to-request spread
(``acceptance_request_spread``) gives between the window's finished requests and the
regime's average.

A load that ramps never disagrees that much with the running average, which follows it
``memory`` windows late: on a ramp the regime's load lagged the engine's by several
minutes, and the decisions for it came too late (on the benchmark's ramp and day traces, 0.72
to 0.86 of the oracle). So when ``confirmations`` windows in a row put the mean batch more
than ``drift`` above the average, or all more than it below, the load is drifting: the
load's average restarts from the latest window, and the windows after it are weighed as a
fresh regime's (the acceptance's too). The regime goes on, as a ramp is one load that moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from specops.policy import AcceptanceCurve, BatchDistribution

__all__ = ["PastRegime", "Regime", "RegimeSettings", "track_regime"]


@dataclass(frozen=True)
class RegimeSettings:
    """How different a window must be, and how many in a row, to start a new regime."""

    distance: float = 0.4
    slack: float = 0.25
    acceptance_shift: float = 0.08
    decisive_acceptance_shift: float = 0.25
    confirmations: int = 2
    memory: int = 10
    drift: float = 0.2
    acceptance_request_spread: float = 0.2

    def __post_init__(self) -> None:
        if not 0 < self.distance <= 1:
            raise ValueError(f"regime distance must be in (0, 1], got {self.distance}")
        if self.drift <= 0:
            raise ValueError(f"regime drift must be > 0, got {self.drift}")
        if self.decisive_acceptance_shift < self.acceptance_shift:
            raise ValueError("decisive_acceptance_shift must be >= acceptance_shift")
        if self.confirmations < 1 or self.memory < 1:
            raise ValueError("regime confirmations and memory must be >= 1")
        if self.acceptance_request_spread < 0:
            raise ValueError("acceptance_request_spread must be >= 0")


@dataclass(frozen=True)
class Regime:
    """The current regime: its averaged load and acceptance, when it began, doubts so far.

    ``drafts`` counts the drafts behind the averaged acceptance, its statistical weight;
    ``drift`` the windows in a row whose mean batch lay above the average (negative: below);
    ``context_tokens`` the mean context per running request, averaged as the load is (0:
    not measured): it moves with the load, and a past load is priced again at its own.
    """

    load: BatchDistribution
    acceptance: AcceptanceCurve | None
    started_at: float
    drafts: float = 0.0
    windows: int = 1
    doubted_since: float | None = None
    doubts: int = 0
    drift: int = 0
    context_tokens: float = 0.0

    def age(self, now: float) -> float:
        return max(now - self.started_at, 0.0)

    def past(self) -> PastRegime:
        """What the regime leaves to the mixture of loads once it has ended."""
        return PastRegime(self.load, self.context_tokens)


@dataclass(frozen=True)
class PastRegime:
    """A past regime as the mixture of loads prices it again: its load and the context
    its requests held (0: not measured), since a step's attention reads that context."""

    load: BatchDistribution
    context_tokens: float = 0.0


def _acceptance_move(before: AcceptanceCurve | None, now: AcceptanceCurve | None) -> float:
    """The relative change of E(k) over the positions both measured; 0 if one is unknown."""
    if before is None or now is None:
        return 0.0
    positions = min(before.measured_positions, now.measured_positions)
    old, new = before.expected_tokens(positions), now.expected_tokens(positions)
    return abs(new / old - 1.0)


def _acceptance_noise(regime: Regime, requests: float | None, settings: RegimeSettings) -> float:
    """The relative move of E(k) that requests differing among themselves make between a
    window of ``requests`` and the regime's average (of as many, times the windows it
    averages); 0 when the window's requests are unknown."""
    if requests is None or requests <= 0:
        return 0.0
    averaged = min(regime.windows, settings.memory)
    return settings.acceptance_request_spread * math.sqrt((1.0 + 1.0 / averaged) / requests)


def _blend(
    before: AcceptanceCurve | None, now: AcceptanceCurve | None, weight: float
) -> AcceptanceCurve | None:
    if before is None or now is None:
        return now if now is not None else before
    positions = min(before.measured_positions, now.measured_positions)
    rates = [(1 - weight) * before.rates[i] + weight * now.rates[i] for i in range(positions)]
    return AcceptanceCurve(tuple(rates))


def _blend_context(before: float, now: float, weight: float) -> float:
    """The averaged context with a window's (0: not measured, which leaves it as it was)."""
    if now <= 0 or before <= 0:
        return now if now > 0 else before
    return (1 - weight) * before + weight * now


def track_regime(
    regime: Regime | None,
    load: BatchDistribution,
    acceptance: AcceptanceCurve | None,
    drafts: float,
    at: float,
    settings: RegimeSettings,
    requests: float | None = None,
    context_tokens: float = 0.0,
) -> tuple[Regime, bool]:
    """Fold one window into the regime; the flag says a new regime began with it.

    ``acceptance`` is None when the window had too few drafts to measure it; ``requests``
    the requests the window finished (None: unknown); ``context_tokens`` the window's mean
    context per running request (0: unknown).
    """
    if regime is None:
        drafted = drafts if acceptance is not None else 0.0
        return Regime(load, acceptance, at, drafted, context_tokens=context_tokens), True
    acceptance_move = _acceptance_move(regime.acceptance, acceptance)
    noise = _acceptance_noise(regime, requests, settings)
    load_moved = regime.load.shift_distance(load, settings.slack) > settings.distance
    acceptance_moved = acceptance_move > max(settings.acceptance_shift, 2.0 * noise)
    if load_moved or acceptance_moved:
        since = regime.doubted_since if regime.doubted_since is not None else at
        decisive = acceptance_move > max(settings.decisive_acceptance_shift, 3.0 * noise)
        if decisive or regime.doubts + 1 >= settings.confirmations:
            drafted = drafts if acceptance is not None else 0.0
            return Regime(load, acceptance, since, drafted, context_tokens=context_tokens), True
        return replace(regime, doubted_since=since, doubts=regime.doubts + 1), False
    weight = 1.0 / min(regime.windows + 1, settings.memory)
    drift = _drift(regime, load, settings.drift)
    drifting = abs(drift) >= settings.confirmations
    return (
        Regime(
            load=load if drifting else regime.load.mix(load, weight),
            acceptance=_blend(regime.acceptance, acceptance, weight),
            started_at=regime.started_at,
            drafts=regime.drafts + (drafts if acceptance is not None else 0.0),
            windows=1 if drifting else regime.windows + 1,
            drift=0 if drifting else drift,
            context_tokens=_blend_context(
                regime.context_tokens, context_tokens, 1.0 if drifting else weight
            ),
        ),
        False,
    )


def _drift(regime: Regime, load: BatchDistribution, threshold: float) -> int:
    """The regime's count of windows in a row on one side of its load, with ``load``."""
    move = load.mean / regime.load.mean - 1.0 if regime.load.mean > 0 else 0.0
    if move > threshold:
        return max(regime.drift, 0) + 1
    if move < -threshold:
        return min(regime.drift, 0) - 1
    return 0
