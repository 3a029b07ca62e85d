"""From a history of snapshots to a PodObservation: every window, every estimate, a prediction.

Pure: the snapshots, ``now`` and the configuration go in, a frozen PodObservation comes
out. A window is the readings in ``(now - length, now]``; counters are summed over the
intervals inside it that have them (a series missing from some readings only shortens
the time it is measured over), so a gap never reads as zero traffic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specops.observation._acceptance import estimate_acceptance
from specops.observation._cost import (
    StepTimeFit,
    StepTimePrior,
    adjusted_cost_model,
    cost_point,
    fit_step_time,
    prior_from_model,
)
from specops.observation._load import RUNNING_BOUNDS, Distribution, distribution
from specops.observation._model import (
    AcceptanceObservation,
    CandidateK,
    CostObservation,
    CostPointObservation,
    DistributionObservation,
    EstimateStatus,
    ExpectedTokensObservation,
    LatencyObservation,
    LoadObservation,
    OutcomeObservation,
    PodObservation,
    PredictionObservation,
    SourceObservation,
    StepTimeFitObservation,
    WindowObservation,
)
from specops.observation._names import Counter, Gauge, Hist
from specops.observation._outcome import latency_quantiles
from specops.observation._snapshot import (
    Histogram,
    Interval,
    Snapshot,
    intervals_of,
)
from specops.observation._validity import interval_problems
from specops.policy import (
    AcceptanceCurve,
    BatchDistribution,
    Objective,
    PolicyInput,
    Prompts,
    SpecConfig,
    SpeedModel,
    StepCostModel,
    StepShape,
    choose,
    draft_reach,
    predict,
)
from specops.vllm import MAX_NUM_SEQS_DEFAULT, table_applies

__all__ = [
    "ObserverConfig",
    "distribution_observation",
    "measured_prompts",
    "observe",
]

_KV_BOUNDS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
_OK = EstimateStatus.OK
_UNKNOWN = EstimateStatus.UNKNOWN


@dataclass(frozen=True)
class ObserverConfig:
    """Who is observed, over which windows, and the prior the predictions start from.

    ``pod`` is None when the readings are a whole service's (its pods' series in
    Prometheus, read at once). ``cost_model`` is the performance profile's step-cost model
    for the running method; without it there is no step-time fit and no prediction.
    ``speculation`` is the config vLLM was started with, needed when it holds a
    per-batch-size table: its short drafts are then corrected for, each position divided
    by the drafts that reached it (with no cost model, steps are taken as equally long).
    """

    namespace: str
    pod: str | None
    service: str
    windows_s: tuple[float, ...] = (60.0, 300.0, 900.0)
    prediction_window_s: float = 300.0
    stale_after_s: float = 45.0
    max_k: int = 8
    max_batch: int = MAX_NUM_SEQS_DEFAULT
    method: str = "eagle3"
    context_tokens_per_request: float = 1024.0
    cost_model: StepCostModel | None = None
    speculation: SpecConfig | None = None

    def __post_init__(self) -> None:
        if not self.windows_s or min(self.windows_s) <= 0:
            raise ValueError(f"windows must be positive lengths in seconds, got {self.windows_s}")
        if self.prediction_window_s not in self.windows_s:
            raise ValueError(
                f"prediction window {self.prediction_window_s}s must be one of {self.windows_s}"
            )
        if self.stale_after_s <= 0 or self.max_k < 1 or self.max_batch < 1:
            raise ValueError("stale_after_s must be > 0, max_k >= 1 and max_batch >= 1")


def _sum(intervals: Sequence[Interval], counter: Counter) -> tuple[float, float] | None:
    """Total increase of ``counter`` and the seconds it was measured over."""
    present = [i for i in intervals if counter in i.counters]
    if not present:
        return None
    return sum(i.counters[counter] for i in present), sum(i.seconds for i in present)


def _rate(intervals: Sequence[Interval], counter: Counter) -> float | None:
    total = _sum(intervals, counter)
    return total[0] / total[1] if total is not None and total[1] > 0 else None


class _EqualSteps:
    """Every step equally long: the draft rate at batch B is then proportional to B."""

    def step_time(self, shape: StepShape) -> float:
        return 1.0


def _busy_load(running: Sequence[float]) -> BatchDistribution | None:
    """The batch-size distribution of the samples with a running request; None when idle."""
    busy = [round(b) for b in running if round(b) > 0]
    return BatchDistribution.from_samples(busy) if busy else None


def _reach(
    config: ObserverConfig, load: BatchDistribution | None, cost: StepCostModel | None
) -> tuple[float, ...] | None:
    """The share of drafts that reached each position, when a table cut some short."""
    speculation = config.speculation
    if speculation is None or not speculation.per_batch_size or load is None:
        return None
    return draft_reach(
        speculation,
        load,
        cost if cost is not None else _EqualSteps(),
        config.context_tokens_per_request,
    )


def _acceptance(
    intervals: Sequence[Interval],
    positions: int,
    max_k: int,
    status: EstimateStatus,
    reach: Sequence[float] | None,
) -> tuple[AcceptanceObservation, AcceptanceCurve | None]:
    usable = [
        i
        for i in intervals
        if Counter.DRAFTS in i.counters and len(i.accepted_per_position) == positions
    ]
    drafts = sum(i.counters[Counter.DRAFTS] for i in usable)
    if positions == 0 or not usable:
        reason = "no per-position acceptance counters in the window (speculation off?)"
        return AcceptanceObservation(status=_UNKNOWN, reason=reason), None
    if drafts <= 0:
        reason = "no drafts in the window (idle, or every batch above the drafting range)"
        return AcceptanceObservation(status=_UNKNOWN, reason=reason, drafts=0.0), None
    accepted = [sum(i.accepted_per_position[p] for i in usable) for p in range(positions)]
    if reach is not None and len(reach) != positions:
        reach = None  # the counters are of another k than the config given: take them as is
    try:
        estimate = estimate_acceptance(drafts, accepted, max_k, reach)
    except ValueError as exc:
        return AcceptanceObservation(status=_UNKNOWN, reason=str(exc), drafts=drafts), None
    total_accepted = [i.counters.get(Counter.ACCEPTED_TOKENS) for i in usable]
    draft_tokens = [i.counters.get(Counter.DRAFT_TOKENS) for i in usable]
    mean_length = rate = None
    if all(a is not None for a in total_accepted):
        accepted_sum = sum(a for a in total_accepted if a is not None)
        mean_length = 1.0 + accepted_sum / drafts
        if all(d is not None for d in draft_tokens):
            tokens = sum(d for d in draft_tokens if d is not None)
            rate = accepted_sum / tokens if tokens > 0 else None
    observation = AcceptanceObservation(
        status=status,
        reason=_stale_reason(status),
        drafts=drafts,
        mean_acceptance_length=mean_length,
        acceptance_rate=rate,
        per_position=list(estimate.curve.rates),
        accepted_per_position=accepted,
        expected_tokens=[
            ExpectedTokensObservation(k=e.k, tokens=e.value, stderr=e.stderr, measured=e.measured)
            for e in estimate.expected
        ],
    )
    return observation, estimate.curve


def distribution_observation(
    values: Sequence[float], bounds: Sequence[float]
) -> DistributionObservation | None:
    """The wire form of :func:`distribution` (the +Inf bucket left out); None without values."""
    found: Distribution | None = distribution(values, bounds)
    if found is None:
        return None
    finite = [
        (b, f)
        for b, f in zip(found.bounds, found.cumulative_fractions, strict=True)
        if b != math.inf
    ]
    return DistributionObservation(
        samples=found.samples,
        mean=found.mean,
        p50=found.p50,
        p90=found.p90,
        p99=found.p99,
        max=found.maximum,
        bounds=[b for b, _ in finite],
        cumulative_fractions=[f for _, f in finite],
    )


def _per_engine(snapshots: Sequence[Snapshot], gauge: Gauge) -> list[float]:
    return [s.gauges[gauge] / s.engines for s in snapshots if gauge in s.gauges]


def _load(
    snapshots: Sequence[Snapshot], intervals: Sequence[Interval], status: EstimateStatus
) -> LoadObservation:
    running = distribution_observation(_per_engine(snapshots, Gauge.RUNNING), RUNNING_BOUNDS)
    if running is None:
        return LoadObservation(status=_UNKNOWN, reason=f"{Gauge.RUNNING.value} missing")
    preemptions = _sum(intervals, Counter.PREEMPTIONS)
    return LoadObservation(
        status=status,
        reason=_stale_reason(status),
        engines=snapshots[-1].engines,
        running=running,
        waiting=distribution_observation(_per_engine(snapshots, Gauge.WAITING), RUNNING_BOUNDS),
        kv_cache_usage=distribution_observation(
            [s.gauges[Gauge.KV_CACHE_USAGE] for s in snapshots if Gauge.KV_CACHE_USAGE in s.gauges],
            _KV_BOUNDS,
        ),
        kv_capacity_tokens=next(
            (s.kv_capacity_tokens for s in reversed(snapshots) if s.kv_capacity_tokens), None
        ),
        preemptions=preemptions[0] if preemptions else None,
        preemptions_per_second=_rate(intervals, Counter.PREEMPTIONS),
    )


def _fit_observation(fit: StepTimeFit) -> StepTimeFitObservation:
    return StepTimeFitObservation(
        intercept_seconds=fit.intercept_s,
        slope_seconds_per_token=fit.slope_s,
        intercept_stddev_seconds=fit.intercept_stddev_s,
        slope_stddev_seconds_per_token=fit.slope_stddev_s,
        correlation=fit.correlation,
        points=fit.points,
        steps=fit.steps,
    )


def _prior_observation(prior: StepTimePrior) -> StepTimeFitObservation:
    return _fit_observation(fit_step_time((), prior))


def _cost(
    intervals: Sequence[Interval], prior: StepTimePrior | None, status: EstimateStatus
) -> tuple[CostObservation, StepTimeFit | None]:
    points = [p for i in intervals if (p := cost_point(i)) is not None]
    fit = fit_step_time(points, prior) if prior is not None else None
    prior_obs = _prior_observation(prior) if prior is not None else None
    fit_obs = _fit_observation(fit) if fit is not None else None
    if not points:
        reason = "no interval with steps and running requests at both ends (idle or restarting)"
        return CostObservation(status=_UNKNOWN, reason=reason, prior=prior_obs, fit=fit_obs), fit
    steps = sum(p.steps for p in points)
    busy_seconds = sum(p.step_seconds * p.steps for p in points)
    return CostObservation(
        status=status,
        reason=_stale_reason(status),
        steps_per_second=steps / busy_seconds,
        batched_tokens_per_step=sum(p.batched_tokens * p.steps for p in points) / steps,
        step_seconds=busy_seconds / steps,
        points=[
            CostPointObservation(
                batched_tokens=p.batched_tokens,
                step_seconds=p.step_seconds,
                steps=p.steps,
                batch=p.batch,
                drafted_tokens=p.drafted,
                drafts=p.drafts,
                decoding=p.decoding,
                end=p.end,
                spread=list(p.spread),
            )
            for p in points
        ],
        prior=prior_obs,
        fit=fit_obs,
    ), fit


def _merged(intervals: Sequence[Interval], hist: Hist) -> Histogram | None:
    merged: Histogram | None = None
    for interval in intervals:
        part = interval.histograms.get(hist)
        if part is None:
            continue
        merged = part if merged is None else merged.plus(part)
        if merged is None:
            return None
    return merged


def _latency(intervals: Sequence[Interval], hist: Hist) -> LatencyObservation | None:
    merged = _merged(intervals, hist)
    found = latency_quantiles(merged) if merged is not None else None
    if merged is None or found is None:
        return None
    total = merged.cumulative[-1]
    finite = [
        (b, c / total)
        for b, c in zip(merged.bounds, merged.cumulative, strict=True)
        if b != math.inf
    ]
    return LatencyObservation(
        observations=found.observations,
        mean_seconds=found.mean,
        p50_seconds=found.p50,
        p90_seconds=found.p90,
        p99_seconds=found.p99,
        bounds=[b for b, _ in finite],
        cumulative_fractions=[f for _, f in finite],
    )


def _outcome(intervals: Sequence[Interval], status: EstimateStatus) -> OutcomeObservation:
    tokens_per_second = _rate(intervals, Counter.GENERATION_TOKENS)
    if tokens_per_second is None:
        return OutcomeObservation(
            status=_UNKNOWN, reason=f"{Counter.GENERATION_TOKENS.value} missing"
        )
    return OutcomeObservation(
        status=status,
        reason=_stale_reason(status),
        tpot=_latency(intervals, Hist.TPOT),
        itl=_latency(intervals, Hist.ITL),
        output_tokens_per_second=tokens_per_second,
        prompt_tokens_per_second=_rate(intervals, Counter.PROMPT_TOKENS),
        requests_per_second=_rate(intervals, Counter.REQUESTS),
    )


def measured_prompts(outcomes: Sequence[OutcomeObservation]) -> Prompts:
    """Prompt tokens per output token and per finished request, each over the windows that
    count both of its figures (0 for a figure no window counts).

    In steady state prompts enter as fast as requests finish, so prompt tokens over
    finished requests is one prompt's mean length. A window that counts no finished
    request leaves its prompts out of that length, not in it over no requests.
    """
    prompt = output = counted = requests = 0.0
    for outcome in outcomes:
        tokens, out = outcome.prompt_tokens_per_second, outcome.output_tokens_per_second
        if tokens is None or not out:
            continue
        prompt, output = prompt + tokens, output + out
        if outcome.requests_per_second:
            counted, requests = counted + tokens, requests + outcome.requests_per_second
    return Prompts(
        per_output_token=prompt / output if output > 0 else 0.0,
        mean_tokens=counted / requests if requests > 0 else 0.0,
    )


def _stale_reason(status: EstimateStatus) -> str:
    if status is EstimateStatus.STALE:
        return "no fresh reading from the source; these are the last measured values"
    return ""


@dataclass(frozen=True)
class _Window:
    observation: WindowObservation
    curve: AcceptanceCurve | None
    load: BatchDistribution | None
    fit: StepTimeFit | None


def _window(
    length: float,
    snapshots: Sequence[Snapshot],
    all_intervals: Sequence[Interval],
    now: float,
    status: EstimateStatus,
    config: ObserverConfig,
    prior: StepTimePrior | None,
) -> _Window:
    inside = [s for s in snapshots if now - length < s.timestamp <= now]
    intervals = [i for i in all_intervals if now - length < i.start and i.end <= now]
    positions = len(inside[-1].accepted_per_position) if inside else 0
    if not intervals:
        reason = (
            "readings left out: they hold impossible values (see problems)"
            if status is EstimateStatus.INVALID
            else f"fewer than two readings in the last {length:g}s"
        )
        return _Window(
            WindowObservation(
                window_seconds=length,
                covered_seconds=0.0,
                readings=len(inside),
                resets=0,
                acceptance=AcceptanceObservation(status=_UNKNOWN, reason=reason),
                load=LoadObservation(status=_UNKNOWN, reason=reason),
                cost=CostObservation(status=_UNKNOWN, reason=reason),
                outcome=OutcomeObservation(status=_UNKNOWN, reason=reason),
            ),
            None,
            None,
            None,
        )
    cost, fit = _cost(intervals, prior, status)
    load = _busy_load(_per_engine(inside, Gauge.RUNNING))
    priced = (
        _priced(config.cost_model, prior, fit)
        if config.cost_model is not None and prior is not None
        else None
    )
    reach = _reach(config, load, priced)
    acceptance, curve = _acceptance(intervals, positions, config.max_k, status, reach)
    observation = WindowObservation(
        window_seconds=length,
        covered_seconds=inside[-1].timestamp - inside[0].timestamp,
        readings=len(inside),
        resets=sum(i.reset for i in intervals),
        acceptance=acceptance,
        load=_load(inside, intervals, status),
        cost=cost,
        outcome=_outcome(intervals, status),
    )
    return _Window(observation, curve, load, fit)


def _priced(model: StepCostModel, prior: StepTimePrior, fit: StepTimeFit | None) -> StepCostModel:
    """The cost model the window's predictions use: the profile's, moved by the fit."""
    return adjusted_cost_model(model, prior, fit) if fit is not None else model


def _prediction(
    window: _Window,
    config: ObserverConfig,
    configured_k: int | None,
    prior: StepTimePrior | None,
) -> PredictionObservation:
    length = window.observation.window_seconds
    acceptance = window.observation.acceptance
    if config.cost_model is None or prior is None:
        return PredictionObservation(status=_UNKNOWN, reason="no performance profile given")
    if window.curve is None:
        return PredictionObservation(status=_UNKNOWN, reason=f"acceptance: {acceptance.reason}")
    load = window.load
    if load is None:
        return PredictionObservation(
            status=_UNKNOWN, reason=f"no running requests in the last {length:g}s"
        )
    cost = _priced(config.cost_model, prior, window.fit)
    prompts = measured_prompts([window.observation.outcome])
    choice = choose(
        PolicyInput(
            acceptance=window.curve,
            drafts_seen=round(acceptance.drafts),
            load=load,
            cost=cost,
            context_tokens=config.context_tokens_per_request,
            prompts=prompts,
            current=config.speculation or SpecConfig.static(configured_k or 0),
            k_max=config.max_k,
            max_batch=config.max_batch,
            per_batch_size=table_applies(config.method),
            one_k_reason=f"vLLM takes no per-batch-size table for method {config.method}",
        )
    )
    model = SpeedModel(cost, window.curve, config.context_tokens_per_request, prompts)
    predictions = [
        predict(SpecConfig.static(k), load, model, Objective()) for k in range(config.max_k + 1)
    ]
    crossover = {c.k: c.batch for c in choice.crossovers}
    return PredictionObservation(
        status=acceptance.status,
        reason=acceptance.reason,
        window_seconds=length,
        mean_batch=load.mean,
        candidates=[
            CandidateK(
                k=k,
                expected_tokens=window.curve.expected_tokens(k),
                predicted_speedup=p.throughput / predictions[0].throughput,
                predicted_tpot_seconds=p.mean_tpot_s,
                crossover_batch=crossover.get(k),
            )
            for k, p in enumerate(predictions)
        ],
        recommended_k=choice.config.num_speculative_tokens,
        recommended_schedule=[r.as_list() for r in choice.config.per_batch_size],
        explanation=choice.reason,
    )


def observe(
    snapshots: Sequence[Snapshot],
    now: float,
    config: ObserverConfig,
    source: SourceObservation,
    intervals: Sequence[Interval] | None = None,
) -> PodObservation:
    """Every window's estimates at ``now`` from time-ordered ``snapshots`` (pure).

    ``intervals`` may pass ``intervals_of(snapshots)`` kept up to date by the caller, one
    new interval per reading instead of all of them again.
    """
    latest = snapshots[-1] if snapshots else None
    if latest is None:
        status = _UNKNOWN
    elif now - latest.timestamp > config.stale_after_s:
        status = EstimateStatus.STALE
    else:
        status = _OK
    configured_k = len(latest.accepted_per_position) if latest is not None else None
    prior = (
        prior_from_model(config.cost_model, configured_k or 0, config.context_tokens_per_request)
        if config.cost_model is not None
        else None
    )
    if intervals is None:
        intervals = intervals_of(snapshots)
    problems = _problems(snapshots, intervals, now - max(config.windows_s), config.pod is not None)
    if problems:
        status, snapshots, intervals = EstimateStatus.INVALID, (), ()
    windows = {
        length: _window(length, snapshots, intervals, now, status, config, prior)
        for length in config.windows_s
    }
    return PodObservation(
        namespace=config.namespace,
        pod=config.pod,
        service=config.service,
        observed_at=now,
        latest_reading_at=latest.timestamp if latest is not None else None,
        status=status,
        configured_k=configured_k,
        source=source,
        windows=[w.observation for w in windows.values()],
        prediction=_prediction(windows[config.prediction_window_s], config, configured_k, prior),
        problems=list(problems),
    )


def _problems(
    snapshots: Sequence[Snapshot], intervals: Sequence[Interval], since: float, one_engine: bool
) -> tuple[str, ...]:
    """The impossible readings after ``since``, each named once."""
    found = [p for s in snapshots if s.timestamp > since for p in s.problems]
    found += interval_problems([i for i in intervals if i.start > since], one_engine)
    return tuple(dict.fromkeys(found))
