"""Wire observations of one pod, built from a few numbers, for adapter and operator tests."""

from __future__ import annotations

from collections.abc import Sequence

from specops.observation import (
    RUNNING_BOUNDS,
    AcceptanceObservation,
    CostObservation,
    CostPointObservation,
    DistributionObservation,
    EstimateStatus,
    LatencyObservation,
    LoadObservation,
    OutcomeObservation,
    PodObservation,
    PredictionObservation,
    SourceObservation,
    WindowObservation,
    distribution_observation,
)

__all__ = ["TPOT_BOUNDS", "pod_observation"]

TPOT_BOUNDS = (0.01, 0.025, 0.05)


def _distribution(values: Sequence[float], bounds: Sequence[float]) -> DistributionObservation:
    found = distribution_observation(values, bounds)
    assert found is not None
    return found


def pod_observation(
    pod: str | None,
    *,
    at: float,
    running: Sequence[float],
    k: int = 3,
    alpha: float = 0.7,
    drafts: float = 50_000.0,
    kv_usage: float | None = None,
    kv_pool: float | None = None,
    status: EstimateStatus = EstimateStatus.OK,
    window_s: float = 300.0,
    tokens_per_second: float = 1000.0,
    cost_points: Sequence[CostPointObservation] = (),
    tpot_s: float | None = None,
    tpot_below: Sequence[float] = (),
) -> PodObservation:
    """A pod that sampled ``running`` over the window with per-token acceptance ``alpha``
    (and, with ``tpot_s``, that mean time per output token over 1000 requests, with
    ``tpot_below`` the share of them at or below 10, 25 and 50 ms)."""
    ok = EstimateStatus.OK
    per_position = [alpha ** (i + 1) for i in range(k)]
    acceptance = (
        AcceptanceObservation(
            status=status,
            drafts=drafts,
            mean_acceptance_length=1 + sum(per_position),
            per_position=per_position,
        )
        if k
        else AcceptanceObservation(status=EstimateStatus.UNKNOWN, reason="speculation off")
    )
    load = LoadObservation(
        status=status,
        running=_distribution(running, RUNNING_BOUNDS),
        kv_cache_usage=_distribution([kv_usage] * len(running), (0.5, 1.0))
        if kv_usage is not None
        else None,
        kv_capacity_tokens=kv_pool,
    )
    window = WindowObservation(
        window_seconds=window_s,
        covered_seconds=window_s,
        readings=len(running),
        resets=0,
        acceptance=acceptance,
        load=load,
        cost=CostObservation(status=ok, points=list(cost_points))
        if cost_points
        else CostObservation(status=EstimateStatus.UNKNOWN, reason="no profile"),
        outcome=OutcomeObservation(
            status=ok,
            output_tokens_per_second=tokens_per_second,
            tpot=LatencyObservation(
                observations=1000.0,
                mean_seconds=tpot_s,
                p50_seconds=tpot_s,
                p90_seconds=tpot_s,
                p99_seconds=tpot_s,
                bounds=list(TPOT_BOUNDS[: len(tpot_below)]),
                cumulative_fractions=list(tpot_below),
            )
            if tpot_s is not None
            else None,
        ),
    )
    return PodObservation(
        namespace="ml",
        pod=pod,
        service="llama",
        observed_at=at,
        latest_reading_at=at,
        status=status,
        configured_k=k,
        source=SourceObservation(kind="direct", target="http://engine/metrics", up=True),
        windows=[window],
        prediction=PredictionObservation(status=EstimateStatus.UNKNOWN, reason="no profile"),
    )
